#!/usr/bin/env python3
"""One durable sandbox per agent run, hibernated while the agent thinks, checkpointed at
milestones, restored after a "crash", and forked at a decision point (the shape of the second
seed's "Running Long-Lived AI Agent Tasks in microVMs Without Paying for Idle" examples,
adapted to Den).

Adapted to what a Den host allows: template ``base`` (no network), a local ``git init`` and a
small local package written once instead of ``git clone`` + ``pip install -r
requirements.txt``, and the undefined ``agent``/``llm`` helpers replaced by a fixed plan of
steps (``ScriptedAgent``) whose "thinking" is a short sleep. Every step asserts what it did;
the script exits non-zero on any failure.

Run it against a Den server::

    DEN_API_URL=http://127.0.0.1:8787 DEN_API_KEY=... PYTHONPATH=packages/sdk-python \\
        python3 packages/sdk-python/examples/durable_agent_run.py
"""

import os
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from typing import List, Optional, Tuple

try:
    from den_sdk import Checkpoint, ExecResult, Sandbox
except ImportError:  # run from a checkout without installing: use the package next to examples/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from den_sdk import Checkpoint, ExecResult, Sandbox


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)
    print(f"  ok: {what}")


# --------------------------------------------------------------------------- the workspace

# The "dependencies" the run installs once (instead of `pip install -r requirements.txt`).
RESEARCH_INIT = ""
RESEARCH_STATS = '''"""Word statistics over a directory of markdown sources."""
import collections
import pathlib
import re
import sys

STOP = {"a", "an", "and", "the", "of", "to", "in", "is", "it", "for", "on", "per", "one", "its"}


def top_words(src: str, n: int = 3):
    words = collections.Counter()
    for p in sorted(pathlib.Path(src).glob("*.md")):
        words.update(w for w in re.findall(r"[a-z]+", p.read_text().lower()) if w not in STOP)
    return sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


if __name__ == "__main__":
    for word, count in top_words(sys.argv[1]):
        print(word, count)
'''
RESEARCH_REPORT = '''"""Turns the stats into a markdown report."""
import sys

lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
print("# Research report")
print()
print("Most frequent terms across the sources:")
print()
for word, count in lines:
    print(f"- {word}: {count}")
'''

PAGE_1 = "A sandbox per run keeps the workspace. The sandbox hibernates while the agent waits.\n"
PAGE_2 = "Snapshots make checkpoints; a sandbox forks at a decision point. Hibernate when idle.\n"
PAGE_3 = "The agent resumes from the checkpoint: the sandbox workspace is intact.\n"

EXPECTED_STATS = "sandbox 4\nagent 2\nworkspace 2\n"
EXPECTED_REPORT = "# Research report\n\nMost frequent terms across the sources:\n\n- sandbox: 4\n- agent: 2\n- workspace: 2\n"


# --------------------------------------------------------------------------- the "agent"


@dataclass
class Step:
    """One tool call: write a file, or run a command (and what its stdout must contain)."""

    kind: str
    path: str = ""
    content: str = ""
    command: str = ""
    expect_stdout: Optional[str] = None


# A fixed research plan in three phases, standing in for `agent.plan(run_id)`.
PLAN: List[Tuple[str, List[Step]]] = [
    (
        "collect",
        [
            Step("write", path="/work/sources/page1.md", content=PAGE_1),
            Step("write", path="/work/sources/page2.md", content=PAGE_2),
            Step("write", path="/work/sources/page3.md", content=PAGE_3),
            Step("exec", command="ls /work/sources | wc -l", expect_stdout="3\n"),
        ],
    ),
    (
        "analyze",
        [
            Step("exec", command="cd /work && mkdir -p notes && python3 -m research.stats sources > notes/stats.txt && cat notes/stats.txt", expect_stdout=EXPECTED_STATS),
        ],
    ),
    (
        "report",
        [
            Step("exec", command="cd /work && python3 -m research.report notes/stats.txt > report.md && git add -A && git commit -qm 'research report' && git log --format=%s -1", expect_stdout="research report\n"),
        ],
    ),
]


class ScriptedAgent:
    """Stands in for the seed's undefined ``agent`` and ``llm``: observes results (asserting
    they are what the plan expects) and "thinks" for a fixed short time."""

    def __init__(self) -> None:
        self.observations: List[ExecResult] = []

    def observe(self, step: Step, result: ExecResult) -> None:
        self.observations.append(result)
        expect(result.exit_code == 0, f"`{step.command[:60]}` exited 0 (stderr: {result.stderr.strip()[:200]})")
        if step.expect_stdout is not None:
            expect(result.stdout == step.expect_stdout, f"its output is what the plan expects ({result.stdout.strip()!r})")

    def think(self) -> None:
        time.sleep(0.2)  # the LLM call; the VM is hibernated meanwhile


def run_phase(sbx: Sandbox, name: str, steps: List[Step], agent: ScriptedAgent, hibernate_between_steps: bool = True) -> None:
    """Each step is an exec or a file write against the SAME machine; between steps, while the
    agent "thinks", the machine is hibernated (warm) and woken for the next step."""
    print(f"phase {name} on {sbx.id}")
    for step in steps:
        sbx.wake()  # resume the frozen machine (idempotent; a no-op if it runs)
        if step.kind == "write":
            st = sbx.filesystem.write(step.path, step.content)
            expect(st.size == len(step.content.encode()), f"wrote {step.path} ({st.size} bytes)")
        else:
            agent.observe(step, sbx.exec(step.command, timeout_seconds=120))
        if hibernate_between_steps:
            info = sbx.hibernate()  # snapshot + pause: nothing runs while the model thinks
            expect(info.state == "hibernated", "hibernated while the agent thinks")
        agent.think()


# --------------------------------------------------------------------------- the run


def main() -> int:
    t0 = time.monotonic()
    run_id = "run-" + uuid.uuid4().hex[:8]
    agent = ScriptedAgent()
    checkpoints: List[Checkpoint] = []
    others: List[Sandbox] = []

    # One durable sandbox for the WHOLE agent run; the TTL is a backstop so a hung run reaps
    # itself even if this supervisor dies.
    sbx = Sandbox.create(template="base", ttl_seconds=3600, metadata={"run": run_id, "kind": "deep-research"})
    print(f"created {sbx.id} for {run_id}")
    expect(sbx.info.metadata == {"run": run_id, "kind": "deep-research"}, "tagged with the run id")
    try:
        # Expensive setup happens ONCE and persists for the rest of the run: a local repo and
        # the "dependencies", plus a long-running process (a dev server over the workspace).
        sbx.exec("git init -q /work && cd /work && git config user.email agent@example.com && git config user.name agent")
        sbx.filesystem.write("/work/research/__init__.py", RESEARCH_INIT)
        sbx.filesystem.write("/work/research/stats.py", RESEARCH_STATS)
        sbx.filesystem.write("/work/research/report.py", RESEARCH_REPORT)
        sbx.filesystem.write("/work/.gitignore", "__pycache__/\n")
        setup = sbx.exec("cd /work && git add -A && git commit -qm 'tools installed' && python3 -c 'import research.stats' && echo ready", timeout_seconds=120)
        expect(setup.stdout == "ready\n", "workspace and tools set up once")
        server = sbx.exec(["python3", "-m", "http.server", "8000", "--directory", "/work"], background=True)
        deadline = time.monotonic() + 30
        while not any(p.port == 8000 for p in sbx.ports()):
            if time.monotonic() > deadline:
                raise AssertionError("the dev server never listened")
            time.sleep(0.2)
        expect(True, f"dev server running (pid {server.pid}) on port 8000")

        checkpoints.append(sbx.snapshot(name="env-ready"))  # durable checkpoint: env is ready
        expect(checkpoints[-1].id.startswith("snap_"), f"checkpoint {checkpoints[-1].id} (env-ready)")

        # The agent loop, phase by phase, checkpointing after each phase.
        for name, steps in PLAN[:2]:
            run_phase(sbx, name, steps, agent)
            sbx.wake()
            checkpoints.append(sbx.snapshot(name=f"after-{name}"))
            expect(True, f"checkpoint {checkpoints[-1].id} (after-{name})")

        # A long gap (say, the agent is parked waiting for a human): scale to zero.
        info = sbx.hibernate(mode="cold")
        expect(info.hibernate_mode == "cold" and (info.stored_bytes or 0) > 0, f"cold-hibernated: no VM, {info.stored_bytes} bytes in the store")

        name, steps = PLAN[2]
        run_phase(sbx, name, steps, agent)
        sbx.wake()
        checkpoints.append(sbx.snapshot(name=f"after-{name}"))

        # The processes and working dir survived every hibernate/wake cycle.
        alive = sbx.exec(f"kill -0 {server.pid} && echo alive")
        expect(alive.stdout == "alive\n", "the dev server survived every hibernate/wake cycle")
        with urllib.request.urlopen(sbx.get_url(8000), timeout=60) as res:
            listing = res.read().decode()
        expect("report.md" in listing, "the dev server (started before the loop) still serves the workspace")
        outcome = sbx.filesystem.read("/work/report.md").decode()
        expect(outcome == EXPECTED_REPORT, "collected /work/report.md")
        print(outcome)

        # Crash recovery: pretend the supervisor died during the report phase. Don't start
        # over: restore the last good checkpoint (after-analyze) and resume from there.
        recovered = Sandbox.restore(checkpoints[-2], ttl_seconds=600, metadata={"run": run_id, "kind": "recovery"})
        others.append(recovered)
        print(f"recovered {recovered.id} from {checkpoints[-2].id}")
        expect(recovered.info.metadata.get("restored_from") == checkpoints[-2].id, "restored from the after-analyze checkpoint")
        expect(not recovered.filesystem.exists("/work/report.md"), "the unfinished phase's output is not there")
        expect(recovered.filesystem.read_text("/work/notes/stats.txt") == EXPECTED_STATS, "the finished phases' work is intact")
        expect(recovered.exec(f"kill -0 {server.pid} && echo alive").stdout == "alive\n", "so is the dev server process")
        run_phase(recovered, name, steps, agent, hibernate_between_steps=False)
        expect(recovered.filesystem.read_text("/work/report.md") == outcome, "the resumed run produced the same report")

        # Fork at a decision point: two candidate ways to write the summary, tried in
        # parallel from the same warm state; keep the one that passes the check.
        a, b = sbx.fork(count=2)
        others.extend([a, b])
        expect(a.info.metadata.get("forked_from") == sbx.id and b.info.metadata.get("forked_from") == sbx.id, f"forked {a.id} and {b.id}")
        a.exec("cd /work && python3 -c \"import research.stats as s; print(s.top_words('sources', 1)[0][0])\" > summary.txt")
        b.exec("cd /work && cat sources/*.md | tr ' ' '\\n' | head -n 1 > summary.txt")
        results = {"a": a.filesystem.read_text("/work/summary.txt").strip(), "b": b.filesystem.read_text("/work/summary.txt").strip()}
        winner = [k for k, v in results.items() if v == "sandbox"]
        expect(winner == ["a"], f"branch results {results}: keep branch a")
        expect(not sbx.filesystem.exists("/work/summary.txt"), "the branches did not touch the parent")
        b.destroy()
    finally:
        # Collect results first; then delete everything this run made.
        for s in [sbx] + others:
            s.delete()
        for c in checkpoints:
            c.delete()

    expect(all(Sandbox.connect(s.id).state == "destroyed" for s in [sbx] + others), "every sandbox of the run deleted")
    print(f"OK: durable agent run finished in {time.monotonic() - t0:.1f}s ({len(agent.observations)} commands observed, {len(checkpoints)} checkpoints)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
