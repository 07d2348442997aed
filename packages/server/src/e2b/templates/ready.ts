/**
 * E2B's ready commands in images that lack their tools. `waitForPort(p)` is `ss`, which most
 * images (busybox, python and node slim images) do not have; the same check reads the
 * kernel's socket tables with nothing but the shell: a TCP socket listening (state 0A) or a
 * UDP one bound (07) on the port, v4 or v6 (what `ss -Htuln sport = :p` lists). Any other
 * command runs as given.
 */
const WAIT_FOR_PORT = /^\[ -n "\$\(ss -Htuln sport = :(\d{1,5})\)" \]$/;

export function portableReadyCmd(cmd: string): string {
  const m = WAIT_FOR_PORT.exec(cmd.trim());
  const port = m ? Number(m[1]) : 0;
  if (!m || port < 1 || port > 65535) return cmd;
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  return `for f in /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6; do [ -r "$f" ] || continue; `
    + `while read -r x a y s z; do case "$a/$s" in *:${hex}/0A|*:${hex}/07) exit 0;; esac; done < "$f"; done; exit 1`;
}
