#!/usr/bin/env python3
"""A long-lived sandbox across many turns of a coding agent (the shape of the first seed's
"Long-Running Sandboxes for AI Agents" example, adapted to Den).

ONE microVM lives across the whole task instead of one per turn: it is created once
(``persistent=True`` so the idle timeout never reclaims it between turns, ``ttl_seconds`` only
as the backstop, ``metadata`` for audit and billing), talked to turn after turn, hibernated
while the "human reviews the diff", and destroyed in a ``finally``.

Adapted to what a Den host allows: template ``base`` (no network), a local ``git init`` and
files instead of ``git clone`` + ``npm install``, Python's unittest instead of ``npm test``,
and the model's rewrite of ``auth`` is a fixed string. Every turn asserts what it did; the
script exits non-zero on any failure.

Run it against a Den server::

    DEN_API_URL=http://127.0.0.1:8787 DEN_API_KEY=... PYTHONPATH=packages/sdk-python \\
        python3 packages/sdk-python/examples/long_running_agent.py
"""

import os
import sys
import time

try:
    from den_sdk import Sandbox
except ImportError:  # run from a checkout without installing: use the package next to examples/
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from den_sdk import Sandbox

REPO = "/workspace/api"

AUTH_BUGGY = '''"""Password hashing for the API."""
import hashlib
import hmac


def hash_password(password: str, salt: str) -> str:
    return hashlib.sha256((salt + ":" + password).encode()).hexdigest()


def verify(password: str, salt: str, stored: str) -> bool:
    # BUG: hashes password and salt in the wrong order, so no password ever verifies.
    candidate = hashlib.sha256((password + ":" + salt).encode()).hexdigest()
    return hmac.compare_digest(candidate, stored)
'''

# What "the model" rewrote src/auth.py to (turn 3).
AUTH_FIXED = '''"""Password hashing for the API."""
import hashlib
import hmac


def hash_password(password: str, salt: str) -> str:
    return hashlib.sha256((salt + ":" + password).encode()).hexdigest()


def verify(password: str, salt: str, stored: str) -> bool:
    return hmac.compare_digest(hash_password(password, salt), stored)
'''

TESTS = '''import unittest

from src.auth import hash_password, verify


class AuthTest(unittest.TestCase):
    def test_the_right_password_verifies(self):
        self.assertTrue(verify("s3cret", "pepper", hash_password("s3cret", "pepper")))

    def test_a_wrong_password_does_not(self):
        self.assertFalse(verify("guess", "pepper", hash_password("s3cret", "pepper")))
'''

RUN_TESTS = f"cd {REPO} && python3 -m unittest discover -s tests -t . 2>&1"


def expect(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)
    print(f"  ok: {what}")


def main() -> int:
    t0 = time.monotonic()
    # ONE microVM that lives across the whole agent task, not one per turn.
    sbx = Sandbox.create(
        template="base",
        persistent=True,  # exempt from the idle timeout: not reclaimed between turns
        ttl_seconds=3600,  # BACKSTOP only: if our cleanup never runs, it is reaped after an hour
        metadata={"task_id": "refactor-auth-module", "user_id": "u_8821"},
    )
    print(f"created {sbx.id} ({sbx.state}) in {time.monotonic() - t0:.2f}s")
    expect(sbx.info.persistent and sbx.info.ttl_seconds == 3600, "persistent, with a one-hour TTL backstop")
    expect(sbx.info.metadata == {"task_id": "refactor-auth-module", "user_id": "u_8821"}, "tagged with task_id and user_id")

    try:
        # Turn 1: one-time setup. This state persists for every later turn; nothing is
        # re-created across the task. (A local repo stands in for `git clone` + `npm install`.)
        print("turn 1: set up the repository")
        sbx.exec(f"git init -q {REPO} && mkdir -p {REPO}/src {REPO}/tests && touch {REPO}/src/__init__.py {REPO}/tests/__init__.py")
        sbx.filesystem.write(f"{REPO}/src/auth.py", AUTH_BUGGY)
        sbx.filesystem.write(f"{REPO}/tests/test_auth.py", TESTS)
        sbx.filesystem.write(f"{REPO}/.gitignore", "__pycache__/\n")
        init = sbx.exec(
            f"cd {REPO} && git config user.email agent@example.com && git config user.name agent"
            " && git add -A && git commit -qm 'import the API' && git log --oneline | wc -l",
            timeout_seconds=120,
        )
        expect(init.exit_code == 0 and init.stdout.strip() == "1", "repository initialised with one commit")

        # Turn 2: the agent runs the failing test and reads the traceback.
        print("turn 2: run the tests")
        failing = sbx.exec(RUN_TESTS, timeout_seconds=120)
        print("    " + (failing.stdout.strip().splitlines() or [""])[-1])
        expect(failing.exit_code != 0, f"the test suite fails before the fix (exit {failing.exit_code}, not an exception)")
        expect("FAILED" in failing.stdout, "the failure is in the output fed back to the model")

        # The human reviews the traceback for a while: hibernate (warm) across the gap.
        info = sbx.hibernate()
        expect(info.state == "hibernated" and info.hibernate_mode == "warm", "hibernated (warm) while the model thinks")
        expect(sbx.wake().state == "running", "woken for the next turn")

        # Turn 3: the model edits a file; the edit lands in the SAME working tree.
        print("turn 3: apply the model's edit")
        sbx.filesystem.write(f"{REPO}/src/auth.py", AUTH_FIXED)
        diff = sbx.exec(f"cd {REPO} && git status --porcelain")
        expect(diff.stdout == " M src/auth.py\n", f"the edit shows in the working tree from turn 1 ({diff.stdout.strip()})")

        # Turn 4: re-run the test against the edited tree. No re-setup.
        print("turn 4: re-run the tests")
        passing = sbx.exec(RUN_TESTS, timeout_seconds=120)
        print("    " + (passing.stdout.strip().splitlines() or [""])[-1])
        expect(passing.exit_code == 0 and passing.stdout.rstrip().endswith("OK"), "the test suite passes after the fix")

        # Turn 5: lint and commit, still against the one live workspace.
        print("turn 5: lint and commit")
        lint = sbx.exec(f"cd {REPO} && python3 -m py_compile src/auth.py tests/test_auth.py", timeout_seconds=120)
        expect(lint.exit_code == 0, "lint (py_compile) is clean")
        commit = sbx.exec(f"cd {REPO} && git commit -qam 'fix verify(): hash salt and password in order' && git log --oneline | wc -l")
        expect(commit.stdout.strip() == "2", "the fix is committed")

        # The user goes to lunch: a long quiet stretch, so cold (no VM at all, state in the store).
        info = sbx.hibernate(mode="cold")
        expect(info.hibernate_mode == "cold" and (info.stored_bytes or 0) > 0, f"cold-hibernated: {info.stored_bytes} bytes in the store, no VM")

        # Turn 6: the next exec wakes it, with everything exactly as it was.
        print("turn 6: back from lunch")
        log = sbx.exec(f"cd {REPO} && git log --format=%s", timeout_seconds=120)
        expect(sbx.refresh().state == "running", "the exec woke the sandbox")
        expect(log.stdout.splitlines() == ["fix verify(): hash salt and password in order", "import the API"], "the history survived hibernation")
        expect(sbx.exec(RUN_TESTS, timeout_seconds=120).exit_code == 0, "the tests still pass after the cold wake")
    finally:
        # DESTROY is our job; TTL is only the insurance.
        sbx.destroy()

    expect(Sandbox.connect(sbx.id).state == "destroyed", "destroyed in the finally block")
    print(f"OK: long-running agent task finished in {time.monotonic() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
