/**
 * Statistics and rendering (console table, Markdown, SVG) for bench/run.ts,
 * including the Waking section (bench/waking.ts).
 */
import type { WakeDef, WakeId, WakeResult, WakeSettings, WakeSide, WakeTarget } from "./waking.js"
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
  "effect-pq": "#9333ea",
  "alkstore-pq": "#0891b2",
  "raw-effect": "#64748b"
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

// ---------- waking (issue 4) ----------

/** One waking child: one scenario for one side (bench/waking.ts). */
export interface WakeSample {
  readonly id: WakeId
  readonly side: WakeSide
  /** scenarios with targets against raw run in several interleaved rounds */
  readonly round?: number | undefined
  readonly ok: boolean
  readonly error?: string | undefined
  readonly result?: WakeResult | undefined
  readonly wallMs: number
  readonly load1: number
  readonly quietStart?: boolean | undefined
}

/** Nearest-rank percentile (p in 0–100) of a non-empty list. */
export const percentile = (xs: ReadonlyArray<number>, p: number): number => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!
}

export const fmtMs = (x: number): string => `${x < 1 ? x.toFixed(3) : x < 10 ? x.toFixed(2) : x.toFixed(1)} ms`
export const fmtPct = (x: number): string => `${x < 10 ? x.toFixed(2) : x.toFixed(1)} %`

const wakeOf = (samples: ReadonlyArray<WakeSample>, id: WakeId, side: WakeSide) =>
  samples.find((s) => s.id === id && s.side === side && s.ok) ?? samples.find((s) => s.id === id && s.side === side)

/** Every latency one side measured in a scenario, pooled over its rounds (undefined when none). */
export const pooledLatencies = (samples: ReadonlyArray<WakeSample>, id: WakeId, side: WakeSide) => {
  const xs = samples.filter((s) => s.id === id && s.side === side && s.ok).flatMap((s) => s.result?.latenciesMs ?? [])
  return xs.length > 0 ? xs : undefined
}

const targetText = (t: WakeTarget): string =>
  [
    t.p50 !== undefined ? `p50 ≤ ${t.p50} ms` : "",
    t.p99 !== undefined ? `p99 ≤ ${t.p99} ms` : "",
    t.cpu !== undefined ? `≤ ${t.cpu} % of a core` : ""
  ].filter(Boolean).join(", ")

const failedText = (s: WakeSample | undefined) => (s === undefined ? "not measured" : `FAILED: ${s.error ?? "no result"}`)

/** The Waking table: one row per scenario, alkstore against its raw baseline and the issue-4 target. */
export const wakeRows = (defs: ReadonlyArray<WakeDef>, samples: ReadonlyArray<WakeSample>) => {
  const header = ["scenario", "samples", "p50", "p99", "max", "raw baseline p50 / p99", "target", "verdict"]
  const rows = defs.map((d) => {
    const alk = wakeOf(samples, d.id, "alkstore")
    const raw = wakeOf(samples, d.id, "raw")
    const a = alk?.ok ? alk.result : undefined
    const r = raw?.ok ? raw.result : undefined
    if (d.target.cpu !== undefined) {
      const base = r?.cpuPercent !== undefined ? `${fmtPct(r.cpuPercent)} of a core (raw polling at 1 ms)` : failedText(raw)
      if (a?.cpuPercent === undefined) return [d.title, "—", failedText(alk), "", "", base, targetText(d.target), "not measured"]
      const wall = a.values?.["measured wall time (s)"]
      return [
        d.title,
        wall !== undefined ? `${wall.toFixed(1)} s wall` : "—",
        `${fmtPct(a.cpuPercent)} of a core`,
        "—",
        "—",
        base,
        targetText(d.target),
        a.cpuPercent <= d.target.cpu ? "PASS" : "FAIL"
      ]
    }
    const rl = pooledLatencies(samples, d.id, "raw")
    const base = rl ? `${fmtMs(percentile(rl, 50))} / ${fmtMs(percentile(rl, 99))}` : failedText(raw)
    const al = pooledLatencies(samples, d.id, "alkstore")
    if (!al) return [d.title, "—", failedText(alk), "", "", base, targetText(d.target), "not measured"]
    if (targetText(d.target) === "") {
      return [d.title, String(al.length), fmtMs(percentile(al, 50)), fmtMs(percentile(al, 99)), fmtMs(Math.max(...al)), base, "vs raw: see the issue-14 targets", "—"]
    }
    const p50 = percentile(al, 50)
    const p99 = percentile(al, 99)
    const misses = [
      d.target.p50 !== undefined && p50 > d.target.p50 ? "p50" : "",
      d.target.p99 !== undefined && p99 > d.target.p99 ? "p99" : ""
    ].filter(Boolean)
    return [
      d.title,
      String(al.length),
      fmtMs(p50),
      fmtMs(p99),
      fmtMs(Math.max(...al)),
      base,
      targetText(d.target),
      misses.length === 0 ? "PASS" : `FAIL (${misses.join(", ")})`
    ]
  })
  return { header, rows }
}

/** Every diagnostic series (pooled over rounds) and value (median over rounds) the waking children reported. */
export const wakeDiagRows = (defs: ReadonlyArray<WakeDef>, samples: ReadonlyArray<WakeSample>) => {
  const header = ["scenario", "side", "what", "n", "p50", "p99", "max"]
  const rows: Array<Array<string>> = []
  for (const d of defs) {
    for (const side of d.sides) {
      const mine = samples.filter((x) => x.id === d.id && x.side === side && x.ok && x.result)
      const series = new Map<string, Array<number>>()
      const values = new Map<string, Array<number>>()
      for (const s of mine) {
        for (const [what, xs] of Object.entries(s.result!.series ?? {})) series.set(what, [...(series.get(what) ?? []), ...xs])
        for (const [what, x] of Object.entries(s.result!.values ?? {})) values.set(what, [...(values.get(what) ?? []), x])
      }
      for (const [what, xs] of series) {
        if (xs.length === 0) continue
        rows.push([d.id, side, what, String(xs.length), fmtMs(percentile(xs, 50)), fmtMs(percentile(xs, 99)), fmtMs(Math.max(...xs))])
      }
      for (const [what, xs] of values) {
        const x = median(xs)
        rows.push([d.id, side, what, "", Number.isInteger(x) ? String(x) : x.toFixed(what.includes("(ms") ? 4 : 2), "", ""])
      }
    }
  }
  return { header, rows }
}

/** The "Waking" section of docs/benchmarks.md. */
export const wakeMarkdown = (
  defs: ReadonlyArray<WakeDef>,
  samples: ReadonlyArray<WakeSample>,
  s: WakeSettings
): string => {
  const table = wakeRows(defs, samples)
  const diag = wakeDiagRows(defs, samples)
  const notes = [...new Set(samples.flatMap((x) => (x.result?.notes ?? []).map((n) => `${x.id} / ${x.side}: ${n}`)))]
  const failed = samples.filter((x) => !x.ok).map((x) => `${x.id} / ${x.side}: ${x.error ?? "failed"}`)
  const busy = samples.filter((x) => x.quietStart === false).length
  return `## Waking (issue 4)

CONTRACT §7: how fast an idle worker sees a new job, and what a waiting worker costs. One fresh child process
per scenario and side (\`bench/waking-child.ts\`, scenarios in \`bench/waking.ts\`), each on a fresh WAL file;
${s.samples} timed samples per latency scenario after ${s.warmup} untimed ones, a random ${s.gapMinMs}–${s.gapMaxMs} ms real sleep
between samples so the worker is idle each time; p50/p99 are nearest-rank percentiles. Select with
\`BENCH_WORKLOADS=${defs.map((d) => d.id).join(",")}\`; \`BENCH_WAKE_SAMPLES\`, \`BENCH_WAKE_IDLE_S\`, \`BENCH_WAKE_GAP_MS\` change the sizes.

${mdTable(table.header, table.rows)}

${defs.map((d) => `- **${d.title}** (\`${d.id}\`): ${d.what}. Baseline: ${d.baseline}.`).join("\n")}
- Outside the fiber: a pacer thread posts "go" 2–5 ms (\`Atomics.wait\`, not a timer) after each sample, so the
  enqueue runs in an I/O callback at a random phase of the main thread's timers. Even so, a raw 1 ms poller in the
  same process often claims at once: the wake-up that delivers the callback also runs its overdue timer.
- Cross-process: the worker process paces the samples over IPC (one job at a time); the enqueuing process busy-waits a
  random 0–3 ms before each enqueue, so commits land at a random phase of the worker's 1 ms poll / 2 ms
  \`data_version\` watch instead of right after a tick. The clock check below compares each process's
  \`timeOrigin + now()\` with CLOCK_MONOTONIC (shared by all processes on Linux).
- Idle CPU: measured after ${(s.settleMs / 1000).toFixed(0)} s of settling; "commits by anyone" reads \`PRAGMA data_version\` on a read-only
  connection before and after the window (0 = the waiting worker wrote nothing).
${busy > 0 ? `- ${busy} of ${samples.length} waking children started while other processes were runnable: tails (p99, max) are noisy then.\n` : ""}
### Where the time goes (diagnostics)

${mdTable(diag.header, diag.rows)}
${notes.length || failed.length ? `\n${[...failed.map((f) => `- **${f}**`), ...notes.map((n) => `- ${n}`)].join("\n")}\n` : ""}`
}
