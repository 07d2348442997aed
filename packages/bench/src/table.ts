/** The benchmark's result table: one row per operation, Den's timings beside raw QEMU's where one exists. */
export interface Row {
  op: string;
  den: number[];
  raw: number[];
}

export const rows: Row[] = [];

export function row(op: string): Row {
  const r: Row = { op, den: [], raw: [] };
  rows.push(r);
  return r;
}

export async function time(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

export function pct(xs: number[], p: number): number {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}

export const fmt = (ms: number) => (Number.isNaN(ms) ? "-" : ms >= 1000 ? `${(ms / 1000).toFixed(2)} s` : `${ms.toFixed(1)} ms`);
