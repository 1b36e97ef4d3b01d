/**
 * Statistics and rendering (console table, Markdown, SVG) for bench/run.ts.
 */
import type { Contender, Sizes, WorkloadDef, WorkloadId } from "./workloads.js"

export interface Sample {
  readonly round: number
  readonly contender: string
  readonly workload: WorkloadId
  readonly ok: boolean
  readonly opsPerSec: number
  readonly usPerOp: number
  readonly maxRssMB: number
  readonly wallMs: number
  /** 1-minute load average when the child ended (other work on the machine shows here) */
  readonly load1: number
  /** whether the machine was quiet (nothing else runnable) when the child started */
  readonly quietStart?: boolean | undefined
  readonly error?: string | undefined
  readonly pragmas?: Record<string, string | number> | undefined
  readonly sqliteVersion?: string | undefined
  readonly notes?: ReadonlyArray<string> | undefined
}

export interface Spread {
  readonly median: number
  readonly min: number
  readonly max: number
  readonly n: number
}

export const median = (xs: ReadonlyArray<number>): number => {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

export const spread = (xs: ReadonlyArray<number>): Spread | undefined =>
  xs.length === 0 ? undefined : { median: median(xs), min: Math.min(...xs), max: Math.max(...xs), n: xs.length }

export interface Cell {
  readonly contender: Contender
  readonly workload: WorkloadDef
  readonly sizes: Sizes
  readonly na?: string | undefined
  readonly samples: ReadonlyArray<Sample>
  readonly throughput?: Spread | undefined
  /** paired: per round, this / raw (rawRef) in the same round */
  readonly ratio?: Spread | undefined
  readonly rss?: Spread | undefined
  readonly errors: ReadonlyArray<string>
}

export const buildCell = (
  contender: Contender,
  workload: WorkloadDef,
  sizes: Sizes,
  na: string | undefined,
  all: ReadonlyArray<Sample>
): Cell => {
  const samples = all.filter((s) => s.contender === contender.name && s.workload === workload.id)
  const ok = samples.filter((s) => s.ok)
  const ratios: Array<number> = []
  for (const s of ok) {
    const base = all.find((b) => b.ok && b.contender === "raw" && b.workload === workload.rawRef && b.round === s.round)
    if (base) ratios.push(s.opsPerSec / base.opsPerSec)
  }
  return {
    contender,
    workload,
    sizes,
    na,
    samples,
    throughput: spread(ok.map((s) => s.opsPerSec)),
    ratio: contender.name === "raw" && workload.rawRef === workload.id ? undefined : spread(ratios),
    rss: spread(ok.map((s) => s.maxRssMB)),
    errors: [...new Set(samples.filter((s) => !s.ok).map((s) => s.error ?? "failed"))]
  }
}

/** per contender, per round: µs/op of workload a divided by µs/op of workload b */
export const pairedUsRatio = (
  all: ReadonlyArray<Sample>,
  contender: string,
  a: WorkloadId,
  b: WorkloadId
): Spread | undefined => {
  const out: Array<number> = []
  for (const s of all) {
    if (!s.ok || s.contender !== contender || s.workload !== a) continue
    const base = all.find((x) => x.ok && x.contender === contender && x.workload === b && x.round === s.round)
    if (base) out.push(s.usPerOp / base.usPerOp)
  }
  return spread(out)
}

export const usSpread = (all: ReadonlyArray<Sample>, contender: string, w: WorkloadId) =>
  spread(all.filter((s) => s.ok && s.contender === contender && s.workload === w).map((s) => s.usPerOp))

// ---------- formatting ----------

export const fmtOps = (x: number): string =>
  x >= 1e6 ? `${(x / 1e6).toFixed(2)}M` : x >= 1e4 ? `${(x / 1e3).toFixed(1)}k` : x >= 1e3 ? `${(x / 1e3).toFixed(2)}k` : x.toFixed(0)
export const fmtRatio = (x: number): string => (x >= 10 ? x.toFixed(1) : x >= 0.1 ? x.toFixed(2) : x.toFixed(3))
export const fmtUs = (x: number): string => (x >= 1000 ? `${(x / 1000).toFixed(2)} ms` : `${x.toFixed(x >= 100 ? 0 : 1)} µs`)
export const fmtSpread = (s: Spread | undefined, f: (x: number) => string, unit = ""): string =>
  s ? `${f(s.median)}${unit}` : "—"
export const fmtRange = (s: Spread | undefined, f: (x: number) => string): string =>
  s ? `${f(s.min)}–${f(s.max)}` : "—"

export const sizeNote = (cell: Cell, base: Sizes): string => {
  const diffs = (Object.keys(base) as Array<keyof Sizes>).filter((k) => cell.sizes[k] !== base[k])
  return diffs.map((k) => `${k}=${cell.sizes[k].toLocaleString("en-US")}`).join(", ")
}

/** A fixed-width console table. */
export const textTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string => {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)))
  const line = (r: ReadonlyArray<string>) => r.map((c, i) => (c ?? "").padEnd(widths[i] ?? 0)).join("  ").trimEnd()
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n")
}

export const mdTable = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<string>>): string =>
  [
    `| ${header.join(" | ")} |`,
    `| ${header.map(() => "---").join(" | ")} |`,
    ...rows.map((r) => `| ${r.map((c) => c.replace(/\|/g, "\\|")).join(" | ")} |`)
  ].join("\n")

// ---------- SVG ----------

const COLORS: Record<string, string> = {
  alkstore: "#2563eb",
  plainjob: "#16a34a",
  liteque: "#d97706",
  "effect-pq": "#9333ea"
}

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

/**
 * Horizontal bar chart of the paired ratios (contender / raw, log scale),
 * median as the bar, min–max as a whisker, grouped by workload.
 */
export const ratiosSvg = (
  cells: ReadonlyArray<Cell>,
  title: string,
  goals: Partial<Record<WorkloadId, number>> = {}
): string => {
  const groups = new Map<string, Array<Cell>>()
  for (const c of cells) {
    if (!c.ratio) continue
    const g = groups.get(c.workload.title) ?? []
    g.push(c)
    groups.set(c.workload.title, g)
  }
  const all = [...groups.values()].flat()
  const lo = Math.min(0.01, ...all.map((c) => c.ratio!.min))
  const hi = Math.max(2, ...all.map((c) => c.ratio!.max))
  const minExp = Math.floor(Math.log10(lo))
  const maxExp = Math.ceil(Math.log10(hi))
  const labelW = 330
  const plotW = 520
  const barH = 14
  const gap = 4
  const groupGap = 12
  const top = 72
  const x = (r: number) => labelW + ((Math.log10(r) - minExp) / (maxExp - minExp)) * plotW
  const out: Array<string> = []
  let y = top
  for (const [title, g] of groups) {
    out.push(`<text x="8" y="${y + 11}" font-weight="bold">${esc(title)}</text>`)
    y += barH + gap
    for (const c of g) {
      const color = COLORS[c.contender.name] ?? "#64748b"
      const r = c.ratio!
      out.push(`<text x="24" y="${y + 11}">${esc(c.contender.label)}</text>`)
      out.push(
        `<rect x="${x(Math.pow(10, minExp)).toFixed(1)}" y="${y}" width="${(x(r.median) - x(Math.pow(10, minExp))).toFixed(1)}" height="${barH}" fill="${color}" fill-opacity="0.8"/>`
      )
      out.push(
        `<line x1="${x(r.min).toFixed(1)}" x2="${x(r.max).toFixed(1)}" y1="${y + barH / 2}" y2="${y + barH / 2}" stroke="#111" stroke-width="1.5"/>`,
        `<line x1="${x(r.min).toFixed(1)}" x2="${x(r.min).toFixed(1)}" y1="${y + 3}" y2="${y + barH - 3}" stroke="#111"/>`,
        `<line x1="${x(r.max).toFixed(1)}" x2="${x(r.max).toFixed(1)}" y1="${y + 3}" y2="${y + barH - 3}" stroke="#111"/>`
      )
      const goal = c.contender.name === "alkstore" ? goals[c.workload.id] : undefined
      if (goal !== undefined) {
        out.push(
          `<line x1="${x(goal).toFixed(1)}" x2="${x(goal).toFixed(1)}" y1="${y - 2}" y2="${y + barH + 2}" stroke="#dc2626" stroke-width="2" stroke-dasharray="3,2"/>`
        )
      }
      out.push(`<text x="${(x(Math.max(r.max, r.median, goal ?? 0)) + 6).toFixed(1)}" y="${y + 11}">${fmtRatio(r.median)}×</text>`)
      y += barH + gap
    }
    y += groupGap
  }
  const height = y + 30
  const axis: Array<string> = []
  for (let e = minExp; e <= maxExp; e++) {
    for (const m of e === maxExp ? [1] : [1, 2, 5]) {
      const v = m * Math.pow(10, e)
      const xv = x(v).toFixed(1)
      const labelled = m === 1 || e >= -1
      axis.push(
        `<line x1="${xv}" x2="${xv}" y1="${top - 6}" y2="${y}" stroke="${v === 1 ? "#dc2626" : "#e2e8f0"}" stroke-width="${v === 1 ? 1.5 : 1}"/>`,
        labelled ? `<text x="${xv}" y="${top - 10}" text-anchor="middle" fill="#475569">${Number(v.toPrecision(1))}×</text>` : ""
      )
    }
  }
  const width = labelW + plotW + 80
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="8" y="20" font-size="14" font-weight="bold">${esc(title)}</text>`,
    `<text x="8" y="36" fill="#475569">throughput ÷ raw better-sqlite3 in the same round (log scale; bar = median, whisker = min–max; red line = 1×;</text>`,
    `<text x="8" y="50" fill="#475569">dashed red tick on an alkstore bar = its issue-5 target)</text>`,
    ...axis,
    ...out,
    `</svg>`,
    ""
  ].join("\n")
}
