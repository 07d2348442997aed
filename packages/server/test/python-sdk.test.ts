// needs: one VM, python3
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ERROR_STATUS } from "@den/protocol";
import { ADMIN_KEY, hostDiagnostics, serverFixture } from "./helpers.js";

/**
 * The Python SDK (packages/sdk-python, standard library only) against a real in-process
 * server and real microVMs: its unittest suite, then the seeds' two examples adapted to Den.
 * Python is whichever `python3` is on PATH (>= 3.9).
 */
const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");
const SDK = join(ROOT, "packages", "sdk-python");

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  output: string;
}

/** Runs python3 without blocking the event loop (the server answering it runs in this process). */
function python(args: string[], env: Record<string, string>, timeoutMs: number): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn("python3", args, { cwd: SDK, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let output = "";
    child.stdout.on("data", (d: Buffer) => (output += d.toString()));
    child.stderr.on("data", (d: Buffer) => (output += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", (e) => {
      clearTimeout(timer);
      reject(e);
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, output });
    });
  });
}

function assertPassed(what: string, r: Run): void {
  if (r.code !== 0) console.error(`--- ${what}: python3 exited ${r.code ?? r.signal} ---\n${r.output}\n--- end of ${what} ---`);
  assert.equal(r.code, 0, `${what} failed (exit ${r.code ?? r.signal}):\n${r.output.slice(-5000)}\n${hostDiagnostics()}`);
}

describe("the Python SDK against a real server", () => {
  hostDiagnostics(); // (starts collecting Den's warnings)
  const f = serverFixture();
  let tmp = "";

  function pyEnv(): Record<string, string> {
    if (!tmp) {
      tmp = mkdtempSync(join(tmpdir(), "den-py-sdk-"));
      // The codes of the compiled protocol, for the test that every code maps to a Python class.
      writeFileSync(join(tmp, "error-status.json"), JSON.stringify(ERROR_STATUS));
    }
    const noProxy = ["127.0.0.1", "localhost", process.env.NO_PROXY ?? process.env.no_proxy ?? ""].filter(Boolean).join(",");
    return {
      DEN_API_URL: f.server.url,
      DEN_API_KEY: ADMIN_KEY,
      PYTHONPATH: SDK,
      PYTHONDONTWRITEBYTECODE: "1",
      PYTHONUNBUFFERED: "1",
      DEN_ERROR_STATUS_JSON: join(tmp, "error-status.json"),
      NO_PROXY: noProxy,
      no_proxy: noProxy,
    };
  }

  test("python3 is on PATH and is 3.9 or newer", async () => {
    const r = await python(["-c", "import sys; print('%d.%d' % sys.version_info[:2]); sys.exit(0 if sys.version_info >= (3, 9) else 1)"], {}, 30_000);
    assertPassed("python3 --version", r);
  });

  test("the unittest suite passes, nothing skipped", { timeout: 10 * 60_000 }, async () => {
    const r = await python(["-m", "unittest", "discover", "-v", "-s", "tests", "-t", "."], pyEnv(), 10 * 60_000);
    assertPassed("python unittest suite", r);
    assert.match(r.output, /\nOK\s*$/, r.output.slice(-3000));
    assert.doesNotMatch(r.output, /skipped/i, `tests were skipped:\n${r.output}`);
    const ran = Number(/Ran (\d+) tests?/.exec(r.output)?.[1] ?? 0);
    assert.ok(ran >= 70, `only ${ran} tests ran:\n${r.output}`);
    for (const name of [
      // errors, offline
      "test_every_protocol_code_maps_to_a_typed_class",
      "test_mounts_on_create_restore_fork",
      // the blocking client against real microVMs
      "test_agent_loop_across_turns",
      "test_hibernate_and_wake_warm_and_cold_keep_state",
      "test_snapshot_restore_and_fork",
      "test_pty_shell_resize_ctrl_c_exit_code",
      "test_forward_and_raw_port_connections",
      "test_timeout_events_network_and_ports",
      "test_background_processes",
      "test_templates_list_build_use_delete",
      "test_keys_create_use_revoke",
      "test_usage_and_hosts",
      "test_webhooks_create_list_deliveries_delete",
      "test_volume_write_mount_conflicts_readers_read_back_grow_delete",
      "test_with_destroys_on_exception_and_reraises",
      "test_bad_key",
      "test_missing_sandbox",
      // the asyncio client against real microVMs
      "test_async_agent_loop_across_turns",
      "test_async_hibernate_warm_and_cold_keep_state",
      "test_async_checkpoint_restore_fork",
      "test_async_pty",
      "test_async_ports_url_forward_and_raw",
      "test_async_background_processes_and_events",
      "test_async_cancelled_exec_returns_promptly_and_the_sandbox_stays_usable",
      "test_async_with_destroys_on_exit_and_on_exception",
      "test_async_templates_keys_usage_hosts",
      "test_async_webhooks",
      "test_async_volume_write_mount_conflict_read_delete",
      "test_async_bad_key",
      "test_async_missing_sandbox",
      // the WebSocket client and the asyncio bridge, offline
      "test_fragmented_message_with_a_ping_inside_and_a_server_close",
      "test_message_over_the_bound_closes_with_1009",
      "test_wss",
      "test_cancelling_hangs_up_instead_of_leaving_a_thread_blocked",
    ]) {
      assert.match(r.output, new RegExp(`${name} .*\\.\\.\\. ok`), `${name} did not pass:\n${r.output}`);
    }
  });

  test("seed example 000: a long-lived sandbox across many turns", { timeout: 5 * 60_000 }, async () => {
    const r = await python(["examples/long_running_agent.py"], pyEnv(), 5 * 60_000);
    assertPassed("examples/long_running_agent.py", r);
    for (const line of [
      "ok: the test suite fails before the fix",
      "ok: hibernated (warm) while the model thinks",
      "ok: the test suite passes after the fix",
      "ok: cold-hibernated:",
      "ok: the history survived hibernation",
      "ok: destroyed in the finally block",
      "OK: long-running agent task finished",
    ]) assert.ok(r.output.includes(line), `missing "${line}":\n${r.output}`);
  });

  test("seed example 001: one durable sandbox per run, hibernate, checkpoints, restore, fork", { timeout: 5 * 60_000 }, async () => {
    const r = await python(["examples/durable_agent_run.py"], pyEnv(), 5 * 60_000);
    assertPassed("examples/durable_agent_run.py", r);
    for (const line of [
      "ok: hibernated while the agent thinks",
      "(after-analyze)",
      "ok: cold-hibernated: no VM",
      "ok: the dev server survived every hibernate/wake cycle",
      "ok: restored from the after-analyze checkpoint",
      "ok: the resumed run produced the same report",
      "keep branch a",
      "- sandbox: 4",
      "OK: durable agent run finished",
    ]) assert.ok(r.output.includes(line), `missing "${line}":\n${r.output}`);
    // The examples clean up after themselves.
    const left = (await f.api("GET", "/v1/sandboxes?state=running&limit=200")).body.sandboxes as { metadata: Record<string, string> }[];
    assert.deepEqual(left.filter((s) => s.metadata.kind === "deep-research" || s.metadata.task_id === "refactor-auth-module"), []);
  });

  test("cleanup of the temporary files", () => {
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });
});
