/** Transfer progress as hosts report it: at most one report a second per transfer, plus the last one. */
import type { TransferProgress } from "@den/store";

export function throttled(emit: (p: TransferProgress) => void): (p: TransferProgress) => void {
  let last = 0;
  return (p) => {
    const done = p.total !== undefined && p.bytes >= p.total;
    if (!done && Date.now() - last < 1000) return;
    last = Date.now();
    emit(p);
  };
}
