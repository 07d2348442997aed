/** A dependency-free SVG chart: host CPU (cores) and RSS (MiB) over time, one line per series. */
export interface Series {
  name: string;
  points: Array<{ t: number; cpu: number; pssMb: number }>;
}

const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"];

function panel(series: Series[], pick: (p: Series["points"][number]) => number, title: string, y0: number, w: number, h: number, tMax: number): string {
  const vMax = Math.max(1e-9, ...series.flatMap((s) => s.points.map(pick)));
  const x = (t: number) => 60 + (t / tMax) * (w - 80);
  const y = (v: number) => y0 + h - (v / vMax) * h;
  const lines = series.map((s, i) => {
    const d = s.points.map((p) => `${x(p.t).toFixed(1)},${y(pick(p)).toFixed(1)}`).join(" ");
    return `<polyline fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="1.5" points="${d}"/>`;
  });
  return [
    `<text x="60" y="${y0 - 8}" font-size="13" font-weight="bold">${title}</text>`,
    `<line x1="60" y1="${y0 + h}" x2="${w - 20}" y2="${y0 + h}" stroke="#888"/>`,
    `<line x1="60" y1="${y0}" x2="60" y2="${y0 + h}" stroke="#888"/>`,
    `<text x="54" y="${y0 + 4}" font-size="11" text-anchor="end">${vMax.toFixed(vMax < 10 ? 2 : 0)}</text>`,
    `<text x="54" y="${y0 + h}" font-size="11" text-anchor="end">0</text>`,
    `<text x="${w - 20}" y="${y0 + h + 14}" font-size="11" text-anchor="end">${tMax.toFixed(0)} s</text>`,
    ...lines,
  ].join("\n");
}

export function chartSvg(series: Series[], w = 900): string {
  const tMax = Math.max(1, ...series.flatMap((s) => s.points.map((p) => p.t)));
  const h = 180;
  const legend = series.map((s, i) => `<text x="${60 + i * 200}" y="${2 * h + 130}" font-size="12" fill="${COLORS[i % COLORS.length]}">■ ${s.name}</text>`);
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${2 * h + 145}" font-family="sans-serif">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    panel(series, (p) => p.cpu, "host CPU of the sandboxes' QEMU processes (cores)", 30, w, h, tMax),
    panel(series, (p) => p.pssMb, "RAM held by them (anonymous + shmem PSS, MiB)", h + 90, w, h, tMax),
    ...legend,
    "</svg>",
  ].join("\n") + "\n";
}
