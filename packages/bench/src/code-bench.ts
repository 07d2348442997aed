/**
 * The code interpreter's rows: create from `code-interpreter-v1` -> the first `runCode`
 * result (the template is baked with its server and a warm Python kernel running, so this
 * is a restore, not a kernel start), and a `runCode('1+1')` round trip, beside create from
 * `base` -> first exec and an exec round trip in the same run (their floor: what any
 * sandbox costs before a kernel is involved).
 */
import { fmt, pct, row, time } from "./table.js";

type Api = (method: string, path: string, body?: unknown) => Promise<any>;

const TEMPLATE = "code-interpreter-v1";

/** One execution through /v1, the NDJSON read to its end; the main result's text. */
async function runCode(base: string, key: string, id: string, code: string): Promise<string | undefined> {
  const res = await fetch(`${base}/v1/sandboxes/${id}/code/execute`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ code }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`runCode: ${res.status} ${text.slice(0, 300)}`);
  let main: string | undefined;
  let ended = false;
  for (const line of text.split("\n")) {
    if (!line) continue;
    const msg = JSON.parse(line) as { type: string; text?: string; is_main_result?: boolean; name?: string; value?: string };
    if (msg.type === "result" && msg.is_main_result) main = msg.text;
    if (msg.type === "error") throw new Error(`runCode: ${msg.name}: ${msg.value}`);
    if (msg.type === "end_of_execution") ended = true;
  }
  if (!ended) throw new Error("runCode: the stream ended without end_of_execution");
  return main;
}

export async function benchCode(api: Api, base: string, key: string, runs: number, hasTemplate: boolean, made: string[]): Promise<string[]> {
  if (!hasTemplate) return [`code interpreter rows skipped: no ${TEMPLATE} template on this host (den template build ${TEMPLATE})`];
  const createBase = row("create from base -> first exec (API, beside the code interpreter rows)");
  const createCode = row(`create from ${TEMPLATE} -> first runCode result (API)`);
  const execRtt = row("exec round trip (API, beside runCode)");
  const codeRtt = row("runCode('1+1') round trip (API)");
  for (let i = 0; i < runs; i++) {
    let id = "";
    createBase.den.push(await time(async () => {
      id = (await api("POST", "/v1/sandboxes", { template: "base" })).id;
      made.push(id);
      await api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "true" });
    }));
    for (let j = 0; j < 3; j++) execRtt.den.push(await time(() => api("POST", `/v1/sandboxes/${id}/exec`, { cmd: "true" })));
    await api("DELETE", `/v1/sandboxes/${id}`);

    createCode.den.push(await time(async () => {
      id = (await api("POST", "/v1/sandboxes", { template: TEMPLATE })).id;
      made.push(id);
      const two = await runCode(base, key, id, "1+1");
      if (two !== "2") throw new Error(`runCode('1+1') gave ${JSON.stringify(two)}`);
    }));
    for (let j = 0; j < 3; j++) codeRtt.den.push(await time(() => runCode(base, key, id, "1+1")));
    await api("DELETE", `/v1/sandboxes/${id}`);
  }
  return [
    `create -> first result, ${TEMPLATE} vs base (p50): ${fmt(pct(createCode.den, 50))} vs ${fmt(pct(createBase.den, 50))}; ` +
      `runCode('1+1') vs exec round trip (p50): ${fmt(pct(codeRtt.den, 50))} vs ${fmt(pct(execRtt.den, 50))}`,
  ];
}
