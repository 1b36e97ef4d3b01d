/**
 * Statistics and rendering for the PostgreSQL benchmark (bench/pg/run.ts):
 * per-cell medians, paired per-round ratios against the raw baseline, the
 * issue-10 targets, and the SVG plot.
 */
import type { Spread } from "../report.js"
import { fmtMs, fmtOps, fmtRatio, fmtUs, spread } from "../report.js"
import type { PgContender, PgWorkloadDef, PgWorkloadId } from "./workloads.js"

export interface PgSample {
  readonly round: number
  readonly contender: string
  readonly workload: PgWorkloadId
  readonly ok: boolean
  readonly error?: string | undefined
  readonly wallMs: number
  readonly load1: number
  /** throughput and claim workloads */
  readonly opsPerSec?: number | undefined
  readonly usPerOp?: number | undefined
  /** latency workloads: enqueue call → handler */
  readonly p50?: number | undefined
  readonly p99?: number | undefined
  readonly samples?: number | undefined
  /** latency workloads: the enqueue call alone, and its return → handler (the wake) */
  readonly callP50?: number | undefined
  readonly wakeP50?: number | undefined
  readonly wakeP99?: number | undefined
  readonly notes?: ReadonlyArray<string> | undefined
}

type Metric = "opsPerSec" | "usPerOp" | "p50" | "p99" | "wakeP50" | "wakeP99" | "callP50"

const ok = (all: ReadonlyArray<PgSample>, c: string, w: PgWorkloadId) =>
  all.filter((s) => s.ok && s.contender === c && s.workload === w)

export const metricSpread = (all: ReadonlyArray<PgSample>, c: string, w: PgWorkloadId, m: Metric) =>
  spread(ok(all, c, w).map((s) => s[m]).filter((x): x is number => x !== undefined))

/**
 * Paired per round: f(contender's sample, reference sample) for every round
 * where both ran, then their median and min–max.
 */
export const paired = (
  all: ReadonlyArray<PgSample>,
  a: { readonly c: string; readonly w: PgWorkloadId },
  b: { readonly c: string; readonly w: PgWorkloadId },
  f: (x: PgSample, ref: PgSample) => number | undefined
): Spread | undefined => {
  const refs = new Map(ok(all, b.c, b.w).map((s) => [s.round, s]))
  return spread(ok(all, a.c, a.w).flatMap((s) => {
    const r = refs.get(s.round)
    const v = r ? f(s, r) : undefined
    return v === undefined || !Number.isFinite(v) ? [] : [v]
  }))
}

/** Speed relative to raw in the same round (higher is better): throughput ÷, latency and µs inverted. */
export const speedVsRaw = (all: ReadonlyArray<PgSample>, c: string, w: PgWorkloadDef): Spread | undefined =>
  paired(all, { c, w: w.id }, { c: "raw", w: w.id }, (x, r) =>
    w.kind === "throughput"
      ? x.opsPerSec! / r.opsPerSec!
      : w.kind === "claim"
      ? r.usPerOp! / x.usPerOp!
      : r.p50! / x.p50!)

const range = (s: Spread | undefined, f: (x: number) => string) => (s ? `${f(s.min)}–${f(s.max)}` : "—")
const firstError = (all: ReadonlyArray<PgSample>, c: string, w: PgWorkloadId) =>
  all.find((s) => !s.ok && s.contender === c && s.workload === w)?.error

/** The main table: every workload × contender, with the paired ratio against raw. */
export const resultRows = (
  all: ReadonlyArray<PgSample>,
  workloads: ReadonlyArray<PgWorkloadDef>,
  contenders: ReadonlyArray<PgContender>,
  unavailable: ReadonlyMap<string, string>
) => {
  const rows: Array<Array<string>> = []
  for (const w of workloads) {
    for (const c of contenders) {
      const na = unavailable.get(c.name) ?? (c.supports[w.id] === true ? undefined : String(c.supports[w.id]))
      if (na !== undefined) {
        rows.push([w.title, c.label, "n/a", "", "", "", na])
        continue
      }
      const err = firstError(all, c.name, w.id)
      const note = err ? `FAILED (${all.filter((s) => !s.ok && s.contender === c.name && s.workload === w.id).length}×): ${err}` : ""
      const speed = c.name === "raw" ? undefined : speedVsRaw(all, c.name, w)
      const ratioText = c.name === "raw" ? "1 (baseline)" : speed ? `${fmtRatio(speed.median)}×` : "—"
      if (w.kind === "latency") {
        const p50 = metricSpread(all, c.name, w.id, "p50")
        const p99 = metricSpread(all, c.name, w.id, "p99")
        const wake = metricSpread(all, c.name, w.id, "wakeP50")
        rows.push([
          w.title,
          c.label,
          p50 && p99 ? `${fmtMs(p50.median)} / ${fmtMs(p99.median)}` : "—",
          range(p50, fmtMs),
          ratioText,
          range(speed, fmtRatio),
          [wake ? `wake (return → handler) p50 ${fmtMs(wake.median)}` : "", note].filter(Boolean).join("; ")
        ])
      } else if (w.kind === "claim") {
        const us = metricSpread(all, c.name, w.id, "usPerOp")
        rows.push([w.title, c.label, us ? fmtUs(us.median) : "—", range(us, fmtUs), ratioText, range(speed, fmtRatio), note])
      } else {
        const t = metricSpread(all, c.name, w.id, "opsPerSec")
        rows.push([w.title, c.label, t ? `${fmtOps(t.median)}/s` : "—", range(t, fmtOps), ratioText, range(speed, fmtRatio), note])
      }
    }
  }
  return {
    header: ["workload", "contender", "median (latency: p50 / p99)", "min–max", "vs raw (paired)", "min–max", "notes"],
    rows
  }
}

/** drain-4 ÷ drain-1 per contender, paired per round. */
export const scalingRows = (all: ReadonlyArray<PgSample>, contenders: ReadonlyArray<PgContender>) => ({
  header: ["contender", "1 process", "4 processes", "4 ÷ 1 (paired)", "min–max"],
  rows: contenders.filter((c) => c.supports["drain-1"] === true).map((c) => {
    const one = metricSpread(all, c.name, "drain-1", "opsPerSec")
    const four = metricSpread(all, c.name, "drain-4", "opsPerSec")
    const r = paired(all, { c: c.name, w: "drain-4" }, { c: c.name, w: "drain-1" }, (x, y) => x.opsPerSec! / y.opsPerSec!)
    return [c.label, one ? `${fmtOps(one.median)}/s` : "—", four ? `${fmtOps(four.median)}/s` : "—", r ? `${fmtRatio(r.median)}×` : "—", range(r, fmtRatio)]
  })
})

/** claim-1m ÷ claim-1k per contender, paired per round. */
export const flatness = (all: ReadonlyArray<PgSample>, c: string) =>
  paired(all, { c, w: "claim-1m" }, { c, w: "claim-1k" }, (x, y) => x.usPerOp! / y.usPerOp!)

export const flatnessRows = (all: ReadonlyArray<PgSample>, contenders: ReadonlyArray<PgContender>) => ({
  header: ["contender", "µs / claim+ack @1k", "@1M", "@1M ÷ @1k (paired)", "min–max"],
  rows: contenders.filter((c) => c.supports["claim-1k"] === true).map((c) => {
    const a = metricSpread(all, c.name, "claim-1k", "usPerOp")
    const b = metricSpread(all, c.name, "claim-1m", "usPerOp")
    const r = flatness(all, c.name)
    return [c.label, a ? fmtUs(a.median) : "—", b ? fmtUs(b.median) : "—", r ? `${fmtRatio(r.median)}×` : "—", range(r, fmtRatio)]
  })
})

const ALK = "alkstore-pg"
const verdict = (x: number | undefined, pass: (x: number) => boolean) => (x === undefined ? "not measured" : pass(x) ? "PASS" : "FAIL")

/**
 * Is alkstore ahead of every peer on this row? Compared on the paired speed
 * vs raw (median), which cancels the drift of a shared machine between rounds.
 */
const aheadRow = (all: ReadonlyArray<PgSample>, w: PgWorkloadDef, peers: ReadonlyArray<PgContender>) => {
  const value = (c: string) => speedVsRaw(all, c, w)?.median
  const alk = value(ALK)
  const measured = peers.flatMap((p) => {
    const v = value(p.name)
    return v === undefined ? [] : [{ p, v }]
  })
  const behind = measured.filter(({ v }) => alk !== undefined && v >= alk)
  const show = ({ p, v }: { p: PgContender; v: number }) => `${p.label} ${fmtRatio(v)}×`
  return [
    w.title,
    measured.map(show).join(", ") || "—",
    alk === undefined
      ? "—"
      : `${fmtRatio(alk)}×: ${behind.length === 0 ? "ahead of all" : `behind ${behind.map(({ p }) => p.label).join(", ")}`}`,
    alk === undefined ? "not measured" : behind.length === 0 ? "PASS" : "FAIL"
  ]
}

export const targetRows = (
  all: ReadonlyArray<PgSample>,
  workloads: ReadonlyArray<PgWorkloadDef>,
  peers: ReadonlyArray<PgContender>
) => {
  const speed = (id: PgWorkloadId) => {
    const w = workloads.find((x) => x.id === id)
    return w ? speedVsRaw(all, ALK, w) : undefined
  }
  const wake = metricSpread(all, ALK, "wake-crossprocess", "wakeP50")
  const e2e = metricSpread(all, ALK, "wake-crossprocess", "p50")
  const scale = paired(all, { c: ALK, w: "drain-4" }, { c: ALK, w: "drain-1" }, (x, y) => x.opsPerSec! / y.opsPerSec!)
  const flat = flatness(all, ALK)
  const rows: Array<[string, string, Spread | undefined, (x: number) => boolean, (x: number) => string]> = [
    ["drain, 1 worker process", "≥ 0.5× raw", speed("drain-1"), (x) => x >= 0.5, (x) => `${fmtRatio(x)}×`],
    ["drain, 4 worker processes", "≥ 0.5× raw", speed("drain-4"), (x) => x >= 0.5, (x) => `${fmtRatio(x)}×`],
    ["cross-process wake p50 (enqueue returned → handler)", "≤ 3 ms", wake, (x) => x <= 3, fmtMs],
    ["  (info) cross-process enqueue call → handler p50", "≤ 3 ms", e2e, (x) => x <= 3, fmtMs],
    ["4 processes ÷ 1 process (drain)", "≥ 1.0×", scale, (x) => x >= 1, (x) => `${fmtRatio(x)}×`],
    ["claim@1M ÷ claim@1k", "≤ 1.2×", flat, (x) => x <= 1.2, (x) => `${fmtRatio(x)}×`]
  ]
  return {
    targets: {
      header: ["target", "goal", "measured (median)", "min–max", "verdict"],
      rows: rows.map(([name, goal, s, pass, f]) => [name, goal, s ? f(s.median) : "—", range(s, f), verdict(s?.median, pass)])
    },
    ahead: {
      header: ["row", "peers measured", "alkstore-pg (paired speed vs raw, medians)", "verdict"],
      rows: workloads.map((w) => aheadRow(all, w, peers))
    }
  }
}

// ---------- SVG ----------

const COLORS: Record<string, string> = {
  "alkstore-pg": "#2563eb",
  "pg-boss": "#16a34a",
  "graphile-worker": "#d97706",
  "bullmq-pg": "#9333ea"
}
const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")

/** Bars of speed vs raw per workload (log scale; median bar, min–max whisker). */
export const pgRatiosSvg = (
  all: ReadonlyArray<PgSample>,
  workloads: ReadonlyArray<PgWorkloadDef>,
  contenders: ReadonlyArray<PgContender>,
  title: string
): string => {
  const groups = workloads.map((w) => ({
    w,
    bars: contenders.filter((c) => c.name !== "raw").flatMap((c) => {
      const s = speedVsRaw(all, c.name, w)
      return s ? [{ c, s }] : []
    })
  })).filter((g) => g.bars.length > 0)
  const vals = groups.flatMap((g) => g.bars.flatMap(({ s }) => [s.min, s.max]))
  const minExp = Math.floor(Math.log10(Math.min(0.1, ...vals)))
  const maxExp = Math.max(1, Math.ceil(Math.log10(Math.max(1, ...vals))))
  const labelW = 300
  const plotW = 520
  const barH = 14
  const top = 72
  const x = (r: number) => labelW + ((Math.log10(r) - minExp) / (maxExp - minExp)) * plotW
  const out: Array<string> = []
  let y = top
  for (const { bars, w } of groups) {
    out.push(`<text x="8" y="${y + 11}" font-weight="bold">${esc(w.title)}${w.kind === "latency" ? " (p50)" : ""}</text>`)
    y += barH + 4
    for (const { c, s } of bars) {
      out.push(
        `<text x="24" y="${y + 11}">${esc(c.label)}</text>`,
        `<rect x="${x(10 ** minExp).toFixed(1)}" y="${y}" width="${(x(s.median) - x(10 ** minExp)).toFixed(1)}" height="${barH}" fill="${COLORS[c.name] ?? "#64748b"}" fill-opacity="0.8"/>`,
        `<line x1="${x(s.min).toFixed(1)}" x2="${x(s.max).toFixed(1)}" y1="${y + barH / 2}" y2="${y + barH / 2}" stroke="#111" stroke-width="1.5"/>`,
        `<text x="${(x(Math.max(s.max, s.median)) + 6).toFixed(1)}" y="${y + 11}">${fmtRatio(s.median)}×</text>`
      )
      y += barH + 4
    }
    y += 12
  }
  const axis: Array<string> = []
  for (let e = minExp; e <= maxExp; e++) {
    for (const m of e === maxExp ? [1] : [1, 2, 5]) {
      const v = m * 10 ** e
      const xv = x(v).toFixed(1)
      axis.push(
        `<line x1="${xv}" x2="${xv}" y1="${top - 6}" y2="${y}" stroke="${v === 1 ? "#dc2626" : "#e2e8f0"}" stroke-width="${v === 1 ? 1.5 : 1}"/>`,
        m === 1 || e >= -1 ? `<text x="${xv}" y="${top - 10}" text-anchor="middle" fill="#475569">${Number(v.toPrecision(1))}×</text>` : ""
      )
    }
  }
  const width = labelW + plotW + 80
  const height = y + 20
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="system-ui, sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="8" y="20" font-size="14" font-weight="bold">${esc(title)}</text>`,
    `<text x="8" y="36" fill="#475569">speed ÷ raw pg (SKIP LOCKED) in the same round, log scale: throughput ÷ raw throughput; latency rows raw p50 ÷ p50;</text>`,
    `<text x="8" y="50" fill="#475569">claim rows raw µs ÷ µs. Bar = median over rounds, whisker = min–max; red line = raw (1×); right of it = faster than raw</text>`,
    ...axis,
    ...out,
    `</svg>`,
    ""
  ].join("\n")
}

