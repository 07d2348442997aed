/**
 * `Symbol.asyncDispose` for runtimes that lack it, so `await using sbx = await Sandbox.create()`
 * works. Imported first by every module that defines a disposer (Node 20.4+ has it natively).
 */
const S = Symbol as unknown as { asyncDispose?: symbol };
S.asyncDispose ??= Symbol.for("Symbol.asyncDispose");
export {};
