// needs: one VM
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js";
import { ADMIN_KEY, CLI, serverFixture, waitFor } from "./helpers.js";

/**
 * Den's MCP server against a real server and real microVMs, driven by the MCP SDK's own
 * client over both transports: `den mcp` on stdio, and `/mcp` on the server.
 */
describe("Den's MCP server through the MCP SDK's client", () => {
  const f = serverFixture();
  const clients: Client[] = [];
  // Closing a stdio client ends its `den mcp` process.
  after(async () => {
    for (const c of clients) await c.close();
  });

  async function stdioClient(): Promise<Client> {
    const env = { ...(process.env as Record<string, string>), DEN_API_URL: f.server.url, DEN_API_KEY: ADMIN_KEY };
    const client = new Client({ name: "den-test", version: "1.0.0" });
    await client.connect(new StdioClientTransport({ command: process.execPath, args: [CLI, "mcp"], env, stderr: "inherit" }));
    clients.push(client);
    return client;
  }

  /** `localhost` rather than the server's 127.0.0.1: URLs the tools hand out must follow the caller's Host. */
  const mcpUrl = () => new URL(`${f.server.url.replace("127.0.0.1", "localhost")}/mcp`);

  async function httpClient(key = ADMIN_KEY): Promise<Client> {
    const client = new Client({ name: "den-test", version: "1.0.0" });
    await client.connect(new StreamableHTTPClientTransport(mcpUrl(), { requestInit: { headers: { authorization: `Bearer ${key}` } } }));
    clients.push(client);
    return client;
  }

  async function call(client: Client, name: string, args: Record<string, unknown>): Promise<CallToolResult & { structuredContent?: any }> {
    return (await client.callTool({ name, arguments: args })) as CallToolResult;
  }

  const text = (r: CallToolResult) => r.content.map((c) => (c.type === "text" ? c.text : "")).join("");

  /** A call that must succeed: its error text in the failure message otherwise. */
  async function ok(client: Client, name: string, args: Record<string, unknown>) {
    const r = await call(client, name, args);
    assert.ok(!r.isError, `${name} failed: ${text(r)}`);
    return r;
  }

  // One client per transport, shared by its tests (a `den mcp` process takes seconds to start on a busy host).
  const shared = new Map<string, Promise<Client>>();
  const once = (transport: string, connect: () => Promise<Client>) => () => {
    if (!shared.has(transport)) shared.set(transport, connect());
    return shared.get(transport)!;
  };

  for (const [transport, connect] of [["stdio", once("stdio", stdioClient)], ["HTTP", once("HTTP", () => httpClient())]] as const) {
    test(`${transport}: the tools and their schemas, then a sandbox's life: write, exec, read, cold hibernate, exec wakes it, destroy`, async () => {
      const client = await connect();
      const { tools } = await client.listTools();
      const byName = new Map(tools.map((t) => [t.name, t]));
      for (const name of ["create_sandbox", "list_sandboxes", "exec", "read_file", "write_file", "list_files", "hibernate_sandbox", "wake_sandbox", "checkpoint_sandbox", "restore_checkpoint", "fork_sandbox", "destroy_sandbox", "get_port_url"]) {
        assert.ok(byName.get(name)?.description, `tool ${name} is listed with a description`);
      }
      const exec = byName.get("exec")!.inputSchema as { properties: Record<string, { maxLength?: number }>; required?: string[] };
      for (const p of ["sandbox_id", "cmd", "argv", "cwd", "timeout_seconds", "max_output_bytes"]) assert.ok(exec.properties[p], `exec has ${p}`);
      assert.equal(exec.properties.cmd!.maxLength, 128 * 1024, "exec's cmd carries /v1's bound");
      assert.deepEqual(exec.required, ["sandbox_id"]);
      const hib = byName.get("hibernate_sandbox")!.inputSchema as { properties: Record<string, { enum?: string[] }> };
      assert.deepEqual(hib.properties.mode!.enum, ["warm", "cold", "disk"]);

      const created = await ok(client, "create_sandbox", { persistent: true, metadata: { via: `mcp-${transport}` } });
      const id = created.structuredContent.sandbox.id as string;
      assert.match(id, /^sbx_[a-z2-7]{16}$/);
      assert.match(text(created), new RegExp(`${id}: running`));

      await ok(client, "write_file", { sandbox_id: id, path: "/work/notes/a.txt", content: `hello from ${transport}\n` });
      const cat = await ok(client, "exec", { sandbox_id: id, cmd: "cat /work/notes/a.txt; echo oops >&2; exit 3" });
      assert.equal(cat.structuredContent.stdout, `hello from ${transport}\n`);
      assert.equal(cat.structuredContent.stderr, "oops\n");
      assert.equal(cat.structuredContent.exit_code, 3);
      assert.match(text(cat), /^exit code 3\n--- stdout ---\nhello from/);
      const read = await ok(client, "read_file", { sandbox_id: id, path: "/work/notes/a.txt" });
      assert.equal(text(read), `hello from ${transport}\n`);
      assert.equal(read.structuredContent.truncated, false);
      const ls = await ok(client, "list_files", { sandbox_id: id, path: "/work/notes" });
      assert.deepEqual(ls.structuredContent.entries.map((e: { path: string }) => e.path), ["/work/notes/a.txt"]);

      // 300 KB on stdout, 4 KiB kept: its start and end, the middle marked as dropped.
      const big = await ok(client, "exec", { sandbox_id: id, cmd: "seq 1 60000", max_output_bytes: 4096 });
      const out = big.structuredContent.stdout as string;
      assert.equal(big.structuredContent.stdout_truncated, true);
      assert.equal(big.structuredContent.stdout_bytes, 348894);
      assert.ok(out.startsWith("1\n2\n3\n") && out.endsWith("59999\n60000\n"), out.slice(0, 40));
      assert.match(out, /\[\.\.\. 344798 bytes of 348894 dropped here: output over the 4096-byte cap \.\.\.\]/);
      assert.ok(Buffer.byteLength(out) < 4096 + 200);

      const cold = await ok(client, "hibernate_sandbox", { sandbox_id: id, mode: "cold" });
      assert.equal(cold.structuredContent.sandbox.state, "hibernated");
      assert.equal(cold.structuredContent.sandbox.hibernate_mode, "cold");
      const again = await ok(client, "exec", { sandbox_id: id, cmd: "cat /work/notes/a.txt" });
      assert.equal(again.structuredContent.stdout, `hello from ${transport}\n`, "the cold-hibernated sandbox woke with its file");

      if (transport === "stdio") {
        // A cancelled call (the client's notifications/cancelled) hangs up its exec stream, and Den kills the command.
        await assert.rejects(client.callTool({ name: "exec", arguments: { sandbox_id: id, cmd: "sleep 300" } }, undefined, { signal: AbortSignal.timeout(1500) }));
        await waitFor("the cancelled command killed", async () => {
          const r = await ok(client, "exec", { sandbox_id: id, cmd: "pgrep -c -x sleep || true" });
          return r.structuredContent.stdout.trim() === "0" ? true : undefined;
        }, 15_000, 300);
      }

      const url = await ok(client, "get_port_url", { sandbox_id: id, port: 8000 });
      if (transport === "HTTP") assert.ok(url.structuredContent.path_url.startsWith(`${mcpUrl().origin}/v1/sandboxes/${id}/ports/8000/`), url.structuredContent.path_url);

      const gone = await ok(client, "destroy_sandbox", { sandbox_id: id });
      assert.equal(gone.structuredContent.sandbox.state, "destroyed");
    });

    test(`${transport}: a missing sandbox is a tool error with Den's code; bad input is a tool error too`, async () => {
      const client = await connect();
      const missing = "sbx_aaaaaaaaaaaaaaaa";
      for (const [name, args] of [["exec", { sandbox_id: missing, cmd: "true" }], ["hibernate_sandbox", { sandbox_id: missing }]] as const) {
        const r = await call(client, name, args);
        assert.equal(r.isError, true);
        assert.equal(r.structuredContent.error.code, "sandbox_not_found", text(r));
        assert.match(text(r), new RegExp(`^sandbox_not_found: .*${missing}`));
      }
      const bad = await call(client, "exec", { sandbox_id: "not-an-id", cmd: "true" });
      assert.equal(bad.isError, true);
      assert.match(text(bad), /not a sandbox id/);
    });
  }

  test("HTTP: a wrong or missing key is a 401 in Den's error shape, and the SDK client cannot connect", async () => {
    const init = { jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "1" } } };
    for (const headers of [{ authorization: "Bearer den_wrong_key" }, {}] as Array<Record<string, string>>) {
      const res = await fetch(mcpUrl(), { method: "POST", headers: { ...headers, "content-type": "application/json", accept: "application/json, text/event-stream" }, body: JSON.stringify(init) });
      assert.equal(res.status, 401);
      assert.equal(((await res.json()) as { error: { code: string } }).error.code, "unauthorized");
    }
    assert.equal((await fetch(mcpUrl(), { headers: { authorization: "Bearer den_wrong_key" } })).status, 401, "GET is refused before the 405 too");
    await assert.rejects(httpClient("den_wrong_key"), /401|unauthorized/i);
  });
});
