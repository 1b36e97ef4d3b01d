/**
 * Benchmark orchestrator (issue 5): `npm run bench`.
 *
 * Runs every (workload × contender) in interleaved rounds; every run is a
 * fresh child process (bench/child.ts) on a fresh WAL database file in
 * os.tmpdir(). Prints medians, min–max and paired ratios against the raw
 * better-sqlite3 baseline, and writes docs/benchmarks.md +
 * docs/benchmarks-ratios.svg.
 *
 * Then the waking benchmark (issue 4; bench/waking.ts, children
 * bench/waking-child.ts): enqueue→handler latency of an idle worker in-process
 * (`wake-inprocess`) and cross-process (`wake-crossprocess`), and the idle CPU
 * of a waiting worker (`idle-cpu`), each for alkstore and a raw better-sqlite3
 * baseline, once per run (about a minute); its section of benchmarks.md is
 * "Waking".
 *
 * Environment:
 *   BENCH_REPS=n          rounds (default 5; 2 with BENCH_QUICK)
 *   BENCH_HEAVY_REPS=n    rounds that also run the 1M-row workloads claim-1m and memory-1m
 *                         (default min(2, BENCH_REPS): they dominate the run time)
 *   BENCH_QUICK=1         small sizes, for a smoke run
 *   BENCH_CONTENDERS=a,b  only these contenders (raw is always added: it is the baseline); memory-pq and
 *                         noop-pq (PersistedQueue over non-durable reference stores) run only when named
 *   BENCH_WORKLOADS=a,b   only these workloads (their raw reference workloads are added); the waking
 *                         ids are wake-inprocess, wake-outside, wake-crossprocess, wake-crossprocess-warm, idle-cpu
 *                         (e.g. BENCH_WORKLOADS=wake-inprocess,wake-crossprocess,idle-cpu runs only those)
 *   BENCH_WAKE_SAMPLES=n  timed samples per waking latency scenario (default 500; 200 with BENCH_QUICK)
 *   BENCH_WAKE_IDLE_S=n   idle-cpu measuring window (default 10; 3 with BENCH_QUICK)
 *   BENCH_WAKE_GAP_MS=a-b the idle gap between latency samples, uniform in [a, b] ms (default 2-5)
 *   BENCH_WAKE_REPS=n     interleaved rounds of the waking scenarios with targets against raw
 *                         (wake-outside, wake-crossprocess, wake-crossprocess-warm; default 3, 1 with BENCH_QUICK); the others run once
 *   BENCH_OUT=dir         where to write benchmarks.md + benchmarks-ratios.svg
 *                         (default: docs/ for a full unfiltered run, else a tmp dir)
 *   BENCH_TIMEOUT_S=n     per-child timeout (default 300)
 *   BENCH_BUNDLE=0        spawn children through tsx instead of per-contender (and waking) esbuild bundles
 *   BENCH_RENDER=file     re-render the Markdown/SVG from a benchmarks-samples.json (no measuring;
 *                         use the same BENCH_QUICK/BENCH_REPS as the run that wrote it)
 *   BENCH_QUIET_WAIT_S=n  before each child, wait up to n s (default 5) until no other process
 *                         is runnable (Linux /proc/loadavg, 3 readings in a row), so a test suite
 *                         running on the same machine disturbs fewer measurements (0 = don't wait)
 *   BENCH_QUIET_BUDGET_S=n  total time the whole run may spend in those waits (default 60)
 */
import { spawn, spawnSync } from "node:child_process"
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { CONTENDER_NAMES, loadContender, REFERENCE_ONLY } from "./contenders/index.js"
import { keepSections } from "./sections.js"
import type { Cell, Sample, WakeSample } from "./report.js"
import {
  buildCell,
  fmtMs,
  fmtOps,
  fmtPct,
  fmtRange,
  fmtRatio,
  fmtSpread,
  fmtUs,
  mdTable,
  percentile,
  pairedUsRatio,
  ratiosSvg,
  sizeNote,
  spread,
  textTable,
  usSpread,
  wakeDiagRows,
  wakeMarkdown,
  wakeRows
} from "./report.js"
import { issue14Rows } from "./report-issue14.js"
import type { WakeDef, WakeResult, WakeSettings, WakeSide } from "./waking.js"
import { WAKE_SCENARIOS, wakeSettings } from "./waking.js"
import type { ChildResult, Contender, Sizes, WorkloadDef, WorkloadId } from "./workloads.js"
import { baseOf, FULL_SIZES, QUICK_SIZES, WORKLOADS } from "./workloads.js"

const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url))
const ROOT = path.resolve(BENCH_DIR, "..")
const env = process.env
const QUICK = env.BENCH_QUICK === "1"
const REPS = Number(env.BENCH_REPS ?? (QUICK ? 2 : 5))
const HEAVY_REPS = Math.min(REPS, Number(env.BENCH_HEAVY_REPS ?? 2))
const HEAVY: ReadonlySet<WorkloadId> = new Set(["claim-1m", "memory-1m"])
const BUNDLE = env.BENCH_BUNDLE !== "0"
const CACHE_DIR = path.join(BENCH_DIR, ".cache")
const TIMEOUT_MS = Number(env.BENCH_TIMEOUT_S ?? 300) * 1000
const BASE: Sizes = QUICK ? QUICK_SIZES : FULL_SIZES
const only = (v: string | undefined) => (v ? new Set(v.split(",").map((s) => s.trim()).filter(Boolean)) : undefined)
const ONLY_CONTENDERS = only(env.BENCH_CONTENDERS)
const ONLY_WORKLOADS = only(env.BENCH_WORKLOADS)
const FILTERED = ONLY_CONTENDERS !== undefined || ONLY_WORKLOADS !== undefined
const WAKE = wakeSettings(QUICK, env)
const WAKE_REPS = Number(env.BENCH_WAKE_REPS ?? (QUICK ? 1 : 3))

if (!Number.isInteger(REPS) || REPS < 1) throw new Error(`BENCH_REPS must be a positive integer, got ${env.BENCH_REPS}`)
if (!Number.isInteger(HEAVY_REPS) || HEAVY_REPS < 1) throw new Error(`BENCH_HEAVY_REPS must be a positive integer`)
if (!Number.isInteger(WAKE.samples) || WAKE.samples < 1) throw new Error(`BENCH_WAKE_SAMPLES must be a positive integer`)
if (!(WAKE.idleMs > 0)) throw new Error(`BENCH_WAKE_IDLE_S must be positive`)
if (!(WAKE.gapMinMs >= 0 && WAKE.gapMaxMs >= WAKE.gapMinMs)) throw new Error(`BENCH_WAKE_GAP_MS must be "min-max" in ms`)

/**
 * Slow peers are scaled down so the whole run stays within its time budget on
 * a 2-core machine; their per-op figures stay comparable (and flatter than at
 * full size: their claim is O(pending), no index serves their ORDER BY), and
 * the Markdown lists every scaled size.
 */
const PEER_SCALE: Record<string, Partial<Record<WorkloadId, Partial<Sizes>>>> = QUICK
  ? {
    "effect-pq": { "claim-1m": { claimOps: 20, warmupOps: 5 } },
    liteque: { "claim-1m": { claimOps: 20, warmupOps: 5 }, "claim-dead100k": { claimOps: 50, warmupOps: 10 } }
  }
  : {
    "effect-pq": {
      "enqueue-1tx": { enqueueJobs: 5_000 },
      "enqueue-100tx": { enqueueJobs: 5_000 },
      "drain-1": { drainJobs: 2_000 },
      "drain-batch100": { drainJobs: 5_000 },
      "claim-1k": { claimOps: 500, warmupOps: 100 },
      "claim-dead100k": { claimOps: 500, warmupOps: 100 },
      "claim-1m": { claimLarge: 200_000, claimOps: 20, warmupOps: 5 }
    },
    liteque: {
      "enqueue-1tx": { enqueueJobs: 5_000 },
      "enqueue-100tx": { enqueueJobs: 5_000 },
      "drain-1": { drainJobs: 2_000 },
      "drain-1-process": { drainJobs: 2_000 },
      "claim-1k": { claimOps: 500, warmupOps: 100 },
      "claim-dead100k": { claimOps: 100, warmupOps: 20 },
      "claim-1m": { claimLarge: 200_000, claimOps: 20, warmupOps: 5 }
    }
  }

const sizesFor = (c: Contender, w: WorkloadId): Sizes => ({
  ...BASE,
  ...c.scale?.[baseOf(w)],
  ...PEER_SCALE[c.name]?.[baseOf(w)]
})

// ---------- dependencies of the bench (installed on demand) ----------

const npmInstall = (prefix: string): string | undefined => {
  console.log(`installing bench dependencies: npm install --prefix ${path.relative(ROOT, prefix)} …`)
  const r = spawnSync("npm", ["install", "--prefix", prefix, "--no-audit", "--no-fund"], {
    cwd: ROOT,
    stdio: ["ignore", "inherit", "inherit"]
  })
  return r.status === 0 ? undefined : `npm install --prefix ${path.relative(ROOT, prefix)} failed (exit ${r.status})`
}

const ensureDeps = (): Map<string, string> => {
  const unavailable = new Map<string, string>()
  if (
    !existsSync(path.join(BENCH_DIR, "node_modules/plainjob/package.json")) ||
    !existsSync(path.join(BENCH_DIR, "node_modules/esbuild/package.json"))
  ) {
    const err = npmInstall(BENCH_DIR)
    if (err) unavailable.set("plainjob", err)
  }
  const litequeDir = path.join(BENCH_DIR, "peers/liteque")
  const litequeReady = existsSync(path.join(litequeDir, "node_modules/liteque/package.json")) &&
    existsSync(path.join(litequeDir, "node_modules/better-sqlite3/build/Release/better_sqlite3.node"))
  if (!litequeReady) {
    console.log("(liteque needs its own better-sqlite3 11.x, built from source: about a minute)")
    const err = npmInstall(litequeDir)
    if (err) unavailable.set("liteque", err)
  }
  if (!existsSync(path.join(ROOT, "src/index.ts"))) unavailable.set("alkstore", "src/index.ts does not exist yet")
  return unavailable
}

// ---------- children ----------

/**
 * An esbuild bundle of a child entry (better-sqlite3 is native and stays
 * external). Returns the bundle path, or undefined to fall back to tsx (e.g.
 * while src/ does not compile).
 */
const bundle = async (
  what: string,
  entry: string,
  outfile: string,
  plugins: ReadonlyArray<import("esbuild").Plugin> = []
): Promise<string | undefined> => {
  if (!BUNDLE) return undefined
  try {
    const esbuild = await import("esbuild")
    await esbuild.build({
      entryPoints: [path.join(BENCH_DIR, entry)],
      outfile,
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      external: ["better-sqlite3"],
      banner: { js: `import { createRequire as __alkCreateRequire } from "node:module"; const require = __alkCreateRequire(import.meta.url);` },
      logLevel: "silent",
      plugins: [...plugins]
    })
    return outfile
  } catch (e) {
    const msg = e instanceof Error ? e.message.split("\n").slice(0, 3).join(" ") : String(e)
    console.log(`(could not bundle the ${what} child, using tsx for it: ${msg})`)
    return undefined
  }
}

/**
 * One bundle of bench/child.ts per contender: the other contenders' modules
 * stay external and are never loaded.
 */
const bundleChild = (name: string): Promise<string | undefined> =>
  bundle(name, "child.ts", path.join(CACHE_DIR, `child-${name}.mjs`), [{
    name: "one-contender",
    setup(build) {
      build.onResolve({ filter: /^\.\/[a-z-]+\.js$/ }, (args) => {
        if (!args.importer.endsWith(path.join("contenders", "index.ts"))) return undefined
        return args.path === `./${name}.js` ? undefined : { path: args.path, external: true }
      })
    }
  }])

/** The waking children (both sides, and the cross-process enqueuer) share one bundle. */
const bundleWaking = (): Promise<string | undefined> =>
  bundle("waking", "waking-child.ts", path.join(CACHE_DIR, "waking-child.mjs"))

const QUIET_WAIT_MS = Number(env.BENCH_QUIET_WAIT_S ?? 5) * 1000
let quietBudgetMs = Number(env.BENCH_QUIET_BUDGET_S ?? 60) * 1000

/** Runnable tasks right now, this process included (Linux), or undefined. */
const runnableTasks = (): number | undefined => {
  try {
    const field = readFileSync("/proc/loadavg", "utf8").split(" ")[3]
    return field === undefined ? undefined : Number(field.split("/")[0])
  } catch {
    return undefined
  }
}

/** Waits (bounded) until nothing else wants the CPU; true if it got quiet. */
const waitQuiet = async (): Promise<boolean> => {
  const t0 = performance.now()
  const limit = Math.min(QUIET_WAIT_MS, Math.max(0, quietBudgetMs))
  let quiet = 0
  try {
    do {
      const n = runnableTasks()
      if (n === undefined) return true
      quiet = n <= 1 ? quiet + 1 : 0
      if (quiet >= 3) return true
      await new Promise((r) => setTimeout(r, 50))
    } while (performance.now() - t0 < limit)
    return false
  } finally {
    quietBudgetMs -= performance.now() - t0
  }
}

const dbFiles = (file: string) => [file, `${file}-wal`, `${file}-shm`, `${file}-journal`]

interface ChildExit {
  /** the payload of the child's `RESULT {json}` line when it exited 0 with one */
  readonly result?: string | undefined
  /** why it failed otherwise */
  readonly error: string
  readonly wallMs: number
}

/**
 * Runs one child (a bundle, or `entry` through tsx) on a fresh database file
 * in os.tmpdir() that it gets as its third argument, deleted afterwards.
 */
const spawnChild = (
  entry: string,
  bundle: string | undefined,
  tag: string,
  args: (file: string) => ReadonlyArray<string>
): Promise<ChildExit> =>
  new Promise((resolve) => {
    const file = path.join(os.tmpdir(), `alkstore-bench-${process.pid}-${tag}-${Date.now()}.db`)
    for (const f of dbFiles(file)) rmSync(f, { force: true })
    const t0 = performance.now()
    const child = spawn(
      process.execPath,
      [...(bundle ? [bundle] : ["--import", "tsx", path.join(BENCH_DIR, entry)]), ...args(file)],
      { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] }
    )
    let out = ""
    let err = ""
    child.stdout.on("data", (d) => (out += d))
    child.stderr.on("data", (d) => (err += d))
    const timer = setTimeout(() => child.kill("SIGKILL"), TIMEOUT_MS)
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      for (const f of dbFiles(file)) rmSync(f, { force: true })
      const wallMs = performance.now() - t0
      const line = out.split("\n").find((l) => l.startsWith("RESULT "))
      const error = signal === "SIGKILL"
        ? `timed out after ${TIMEOUT_MS / 1000} s`
        : (err.trim().split("\n").find((l) => /error/i.test(l)) ?? err.trim().split("\n")[0] ?? `exit ${code}`)
      resolve({ result: code === 0 && line ? line.slice(7) : undefined, error: (error || `exit ${code}`).slice(0, 300), wallMs })
    })
  })

const runChild = (c: Contender, w: WorkloadId, sizes: Sizes, round: number, bundle: string | undefined): Promise<Sample> =>
  spawnChild("child.ts", bundle, `${c.name}-${w}-${round}`, (file) => [c.name, w, file, JSON.stringify(sizes)]).then(
    ({ error, result, wallMs }) => {
      const base = { round, contender: c.name, workload: w, wallMs, load1: os.loadavg()[0] ?? 0 }
      if (result !== undefined) {
        const r = JSON.parse(result) as ChildResult
        return {
          ...base,
          ok: true,
          opsPerSec: (r.ops / r.ms) * 1000,
          usPerOp: (r.ms * 1000) / r.ops,
          maxRssMB: r.maxRssMB,
          pragmas: r.pragmas,
          sqliteVersion: r.sqliteVersion,
          notes: r.notes
        }
      }
      return { ...base, ok: false, opsPerSec: NaN, usPerOp: NaN, maxRssMB: NaN, error }
    }
  )

/** A warm scenario's untimed samples come first, with the time they take added to the child's budget. */
const settingsOf = (d: WakeDef): WakeSettings =>
  d.warmup === undefined ? WAKE : { ...WAKE, warmup: d.warmup, budgetMs: WAKE.budgetMs + d.warmup * 15 }

const runWakeChild = (d: WakeDef, side: WakeSide, bundle: string | undefined): Promise<WakeSample> =>
  spawnChild("waking-child.ts", bundle, `${d.id}-${side}`, (file) => [d.id, side, file, JSON.stringify(settingsOf(d))]).then(
    ({ error, result, wallMs }) => {
      const base = { id: d.id, side, wallMs, load1: os.loadavg()[0] ?? 0 }
      return result !== undefined
        ? { ...base, ok: true, result: JSON.parse(result) as WakeResult }
        : { ...base, ok: false, error }
    }
  )

// ---------- plan ----------

interface Planned {
  readonly contender: Contender
  readonly workload: WorkloadDef
  readonly sizes: Sizes
  readonly na?: string | undefined
}

const main = async () => {
  const started = performance.now()
  const unavailable = ensureDeps()
  // The non-durable references of the PersistedQueue rows run only when named (BENCH_CONTENDERS).
  const names = CONTENDER_NAMES.filter((n) =>
    ONLY_CONTENDERS ? ONLY_CONTENDERS.has(n) || n === "raw" : !(REFERENCE_ONLY as ReadonlyArray<string>).includes(n)
  )
  const contenders = await Promise.all(names.map(loadContender))
  const wanted = new Set<WorkloadId>()
  for (const w of WORKLOADS) {
    if (ONLY_WORKLOADS && !ONLY_WORKLOADS.has(w.id)) continue
    wanted.add(w.id)
    wanted.add(w.rawRef)
    if (w.id === "claim-1m" || w.id === "claim-dead100k") wanted.add("claim-1k")
  }
  const workloads = WORKLOADS.filter((w) => wanted.has(w.id))
  // waking: alkstore against raw, so it runs when alkstore is among the contenders
  const wakeDefs = WAKE_SCENARIOS.filter((d) =>
    (!ONLY_WORKLOADS || ONLY_WORKLOADS.has(d.id)) && contenders.some((c) => c.name === "alkstore")
  )
  const unknown = [...(ONLY_WORKLOADS ?? [])].filter((id) =>
    !WORKLOADS.some((w) => w.id === id) && !WAKE_SCENARIOS.some((d) => d.id === id)
  )
  if (unknown.length > 0) console.log(`(BENCH_WORKLOADS: unknown ids ignored: ${unknown.join(", ")})`)
  mkdirSync(CACHE_DIR, { recursive: true })
  const bundles = new Map<string, string | undefined>()
  if (workloads.length > 0) {
    for (const c of contenders) if (!unavailable.has(c.name)) bundles.set(c.name, await bundleChild(c.name))
  }
  const wakeBundle = wakeDefs.length > 0 && !unavailable.has("alkstore") ? await bundleWaking() : undefined

  const plan: Array<Planned> = []
  for (const w of workloads) {
    for (const c of contenders) {
      const support = c.supports[baseOf(w.id)]
      let na = support === true ? undefined : support
      if (w.only && !w.only.includes(c.name)) na = na ?? "not measured for this contender"
      if (na === undefined && unavailable.has(c.name)) na = unavailable.get(c.name)
      plan.push({ contender: c, workload: w, sizes: sizesFor(c, w.id), na })
    }
  }
  const toRun = plan.filter((p) => p.na === undefined)
  console.log(
    `alkstore bench: ${REPS} rounds (the 1M-row workloads in ${HEAVY_REPS}) × ${toRun.length} runs ` +
      `(${QUICK ? "QUICK sizes" : "full sizes"}, children ${BUNDLE ? "bundled" : "via tsx"}), ` +
      `contenders: ${contenders.map((c) => c.name).join(", ")}` +
      (wakeDefs.length > 0 ? `; then waking: ${wakeDefs.map((d) => d.id).join(", ")} (alkstore and raw, once)` : "")
  )

  const rendered = env.BENCH_RENDER
    ? (JSON.parse(readFileSync(env.BENCH_RENDER, "utf8")) as {
      samples: Array<Sample>
      wake?: Array<WakeSample>
      totalS: number
    })
    : undefined
  if (rendered) console.log(`re-rendering ${env.BENCH_RENDER} (no measurements)`)
  const samples: Array<Sample> = rendered?.samples ?? []
  const wakeSamples: Array<WakeSample> = rendered?.wake ?? []
  for (let round = 1; !rendered && round <= REPS; round++) {
    for (const w of workloads) {
      if (HEAVY.has(w.id) && round > HEAVY_REPS) continue
      const row = toRun.filter((p) => p.workload.id === w.id)
      // rotate the order each round so no contender always runs first/last
      const order = row.map((_, i) => row[(i + round - 1) % row.length]!)
      for (const p of order) {
        const quiet = await waitQuiet()
        const s = { ...(await runChild(p.contender, w.id, p.sizes, round, bundles.get(p.contender.name))), quietStart: quiet }
        samples.push(s)
        const elapsed = ((performance.now() - started) / 1000).toFixed(0)
        console.log(
          `[${elapsed.padStart(4)} s] round ${round}/${REPS}  ${w.id.padEnd(16)} ${p.contender.name.padEnd(10)} ` +
            (s.ok
              ? `${fmtOps(s.opsPerSec).padStart(8)} ops/s  ${fmtUs(s.usPerOp).padStart(9)}/op  rss ${s.maxRssMB.toFixed(0)} MB  (child ${(s.wallMs / 1000).toFixed(1)} s)`
              : `FAILED: ${s.error}`) +
            (quiet ? "" : "  [machine busy at start]")
        )
      }
    }
  }
  const wakeRuns: Array<{ d: WakeDef; side: WakeSide; round: number }> = []
  for (let round = 1; !rendered && round <= WAKE_REPS; round++) {
    for (const d of wakeDefs) {
      if (d.vsRaw === undefined && round > 1) continue
      const sides = d.sides.filter((side) => side !== "plainjob" || contenders.some((c) => c.name === "plainjob"))
      // rotate the order each round, as the throughput rounds do
      for (let i = 0; i < sides.length; i++) wakeRuns.push({ d, side: sides[(i + round - 1) % sides.length]!, round })
    }
  }
  for (const { d, round, side } of wakeRuns) {
    {
      const quiet = await waitQuiet()
      const missing = unavailable.get("alkstore") ?? (side === "plainjob" ? unavailable.get("plainjob") : undefined)
      const s: WakeSample = missing !== undefined
        ? { id: d.id, side, round, ok: false, error: missing, wallMs: 0, load1: 0 }
        : { ...(await runWakeChild(d, side, wakeBundle)), round, quietStart: quiet }
      wakeSamples.push(s)
      const elapsed = ((performance.now() - started) / 1000).toFixed(0)
      const r = s.result
      const lat = r?.latenciesMs ?? []
      console.log(
        `[${elapsed.padStart(4)} s] waking ${round}/${d.vsRaw ? WAKE_REPS : 1}  ${d.id.padEnd(17)} ${side.padEnd(8)} ` +
          (!s.ok || !r
            ? `FAILED: ${s.error}`
            : r.cpuPercent !== undefined
            ? `${fmtPct(r.cpuPercent)} of a core`
            : lat.length > 0
            ? `n=${lat.length}  p50 ${fmtMs(percentile(lat, 50))}  p99 ${fmtMs(percentile(lat, 99))}`
            : "no samples") +
          `  (child ${(s.wallMs / 1000).toFixed(1)} s)` +
          (quiet ? "" : "  [machine busy at start]")
      )
    }
  }
  const totalS = rendered?.totalS ?? (performance.now() - started) / 1000

  const cells: Array<Cell> = plan.map((p) => buildCell(p.contender, p.workload, p.sizes, p.na, samples))
  const outDir = env.BENCH_OUT
    ? path.resolve(env.BENCH_OUT)
    : QUICK || FILTERED
    ? path.join(os.tmpdir(), "alkstore-bench")
    : path.join(ROOT, "docs")
  mkdirSync(outDir, { recursive: true })

  const svgName = "benchmarks-ratios.svg"
  if (cells.length > 0) {
    const results = resultRows(cells)
    console.log("\n" + textTable(results.header, results.rows))
    const flat = flatnessRows(cells, contenders, samples)
    console.log("\n" + textTable(flat.header, flat.rows))
    const targets = targetRows(cells, samples)
    console.log("\nissue-5 targets (alkstore):\n" + textTable(targets.header, targets.rows))
    const i14 = issue14Rows(cells, samples, wakeSamples)
    console.log("\nissue-14 targets (alkstore, paired against raw in this run):\n" + textTable(i14.header, i14.rows))
    writeFileSync(
      path.join(outDir, svgName),
      ratiosSvg(cells, `alkstore bench — paired ratios vs raw (${REPS} rounds${QUICK ? ", QUICK sizes" : ""})`, RATIO_GOALS)
    )
  }
  const wakeShown = WAKE_SCENARIOS.filter((d) => wakeSamples.some((s) => s.id === d.id))
  if (wakeShown.length > 0) {
    const wake = wakeRows(wakeShown, wakeSamples)
    console.log("\nwaking (issue-4 targets, alkstore vs raw):\n" + textTable(wake.header, wake.rows))
    const diag = wakeDiagRows(wakeShown, wakeSamples)
    console.log("\nwaking diagnostics:\n" + textTable(diag.header, diag.rows))
  }
  const mdFile = path.join(outDir, "benchmarks.md")
  const sqliteMd = markdown(cells, samples, wakeShown, wakeSamples, contenders, unavailable, totalS, svgName)
  // keep the PostgreSQL section (bench/pg/run.ts writes it)
  writeFileSync(mdFile, existsSync(mdFile) ? keepSections(readFileSync(mdFile, "utf8"), sqliteMd) : sqliteMd)
  if (!rendered) {
    const raw = { reps: REPS, heavyReps: HEAVY_REPS, quick: QUICK, totalS, sizes: BASE, wakeSettings: WAKE, samples, wake: wakeSamples }
    writeFileSync(path.join(outDir, "benchmarks-samples.json"), JSON.stringify(raw, null, 1) + "\n")
  }
  console.log(
    `\nwrote ${path.join(outDir, "benchmarks.md")}${cells.length > 0 ? ` and ${svgName}` : ""} (total ${totalS.toFixed(0)} s)`
  )
}

// ---------- tables ----------

/** issue-5 throughput targets for alkstore, as ratios vs raw */
const RATIO_GOALS: Partial<Record<WorkloadId, number>> = {
  "enqueue-1tx": 0.8,
  "enqueue-100tx": 0.8,
  "enqueue-batch100": 0.8,
  "drain-1": 1.0,
  "drain-1-process": 1.0,
  "drain-batch100": 0.5,
  "drain-stream100": 0.5
}

const resultRows = (cells: ReadonlyArray<Cell>) => {
  const header = ["workload", "contender", "median ops/s", "min–max ops/s", "ratio vs raw", "ratio min–max", "notes"]
  // The Effect floor only speaks to the per-call workloads: no rows elsewhere.
  const rows = cells.filter((c) => !(c.na && c.contender.name === "raw-effect")).map((c) => {
    const notes = [
      c.na ? `n/a: ${c.na}` : "",
      sizeNote(c, BASE) ? `scaled: ${sizeNote(c, BASE)}` : "",
      c.errors.length ? `FAILED ${c.samples.filter((s) => !s.ok).length}/${c.samples.length}: ${c.errors.join("; ")}` : "",
      c.workload.id === "memory-1m" && c.rss ? `peak RSS ${c.rss.median.toFixed(0)} MB (${fmtRange(c.rss, (x) => x.toFixed(0))})` : "",
      [...new Set(c.samples.flatMap((s) => s.notes ?? []))].join("; ")
    ].filter(Boolean).join("; ")
    const baseline = c.contender.name === "raw" && c.workload.rawRef === c.workload.id
    return [
      c.workload.title,
      c.contender.name,
      c.na ? "n/a" : fmtSpread(c.throughput, fmtOps),
      c.na ? "" : fmtRange(c.throughput, fmtOps),
      c.na ? "" : baseline ? "1 (baseline)" : fmtSpread(c.ratio, fmtRatio, "×"),
      c.na || baseline ? "" : fmtRange(c.ratio, fmtRatio),
      notes
    ]
  })
  return { header, rows }
}

const flatnessRows = (cells: ReadonlyArray<Cell>, contenders: ReadonlyArray<Contender>, samples: ReadonlyArray<Sample>) => {
  const header = [
    "contender",
    "µs/claim+ack @1k",
    "@1M",
    "@1k + dead",
    "@1M ÷ @1k (paired)",
    "min–max",
    "dead ÷ @1k (paired)",
    "min–max",
    "notes"
  ]
  const rows = contenders.filter((c) => c.supports["claim-1k"] === true).map((c) => {
    const r1m = pairedUsRatio(samples, c.name, "claim-1m", "claim-1k")
    const rdead = pairedUsRatio(samples, c.name, "claim-dead100k", "claim-1k")
    const cellOf = (w: WorkloadId) => cells.find((x) => x.contender.name === c.name && x.workload.id === w)
    const large = cellOf("claim-1m")?.sizes.claimLarge
    const notes = [
      large !== undefined && large !== BASE.claimLarge ? `"@1M" measured at ${large.toLocaleString("en-US")} pending` : "",
      ...(["claim-1k", "claim-1m", "claim-dead100k"] as const).map((w) => {
        const cell = cellOf(w)
        return cell?.na ? `${w} n/a: ${cell.na}` : cell && cell.sizes.claimOps !== BASE.claimOps ? `${w}: ${cell.sizes.claimOps} claims` : ""
      })
    ].filter(Boolean).join("; ")
    return [
      c.name,
      fmtSpread(usSpread(samples, c.name, "claim-1k"), fmtUs),
      fmtSpread(usSpread(samples, c.name, "claim-1m"), fmtUs),
      fmtSpread(usSpread(samples, c.name, "claim-dead100k"), fmtUs),
      fmtSpread(r1m, fmtRatio, "×"),
      fmtRange(r1m, fmtRatio),
      fmtSpread(rdead, fmtRatio, "×"),
      fmtRange(rdead, fmtRatio),
      notes
    ]
  })
  return { header, rows }
}

const targetRows = (cells: ReadonlyArray<Cell>, samples: ReadonlyArray<Sample>) => {
  const ratioOf = (w: WorkloadId) => cells.find((c) => c.contender.name === "alkstore" && c.workload.id === w)?.ratio
  const verdict = (x: number | undefined, ok: (x: number) => boolean) => (x === undefined ? "not measured" : ok(x) ? "PASS" : "FAIL")
  const targets: Array<[string, string, number | undefined, (x: number) => boolean, string]> = [
    ["enqueue, 1 job / tx", "≥ 0.8× raw", ratioOf("enqueue-1tx")?.median, (x) => x >= 0.8, fmtRange(ratioOf("enqueue-1tx"), fmtRatio)],
    ["enqueue, 100 jobs / tx (withTransaction)", "≥ 0.8× raw", ratioOf("enqueue-100tx")?.median, (x) => x >= 0.8, fmtRange(ratioOf("enqueue-100tx"), fmtRatio)],
    ["  (info) enqueueBatch(100)", "≥ 0.8× raw 100/tx", ratioOf("enqueue-batch100")?.median, (x) => x >= 0.8, fmtRange(ratioOf("enqueue-batch100"), fmtRatio)],
    ["one-by-one drain (process: ack + next claim in one transaction)", "≥ 1.0× raw", ratioOf("drain-1-process")?.median, (x) => x >= 1.0, fmtRange(ratioOf("drain-1-process"), fmtRatio)],
    ["  (info) claim→ack loop (two transactions per job, as raw)", "≥ 1.0× raw", ratioOf("drain-1")?.median, (x) => x >= 1.0, fmtRange(ratioOf("drain-1"), fmtRatio)],
    ["batched drain (claimBatch 100)", "≥ 0.5× raw batched", ratioOf("drain-batch100")?.median, (x) => x >= 0.5, fmtRange(ratioOf("drain-batch100"), fmtRatio)],
    ["  (info) stream, batch 100", "≥ 0.5× raw batched", ratioOf("drain-stream100")?.median, (x) => x >= 0.5, fmtRange(ratioOf("drain-stream100"), fmtRatio)]
  ]
  const flat = pairedUsRatio(samples, "alkstore", "claim-1m", "claim-1k")
  targets.push(["claim@1M ÷ claim@1k", "≤ 1.2×", flat?.median, (x) => x <= 1.2, fmtRange(flat, fmtRatio)])
  const dead = pairedUsRatio(samples, "alkstore", "claim-dead100k", "claim-1k")
  targets.push(["  (info) claim@1k+100k dead ÷ claim@1k", "≤ 1.2×", dead?.median, (x) => x <= 1.2, fmtRange(dead, fmtRatio)])
  return {
    header: ["target", "goal", "measured (median)", "min–max", "verdict"],
    rows: targets.map(([name, goal, x, ok, range]) => [name, goal, x === undefined ? "—" : `${fmtRatio(x)}×`, range, verdict(x, ok)])
  }
}

// ---------- markdown ----------

const loadNote = (samples: ReadonlyArray<Pick<Sample, "load1" | "quietStart">>): string => {
  const loads = spread(samples.map((s) => s.load1))
  if (!loads) return ""
  const cores = os.cpus().length
  const busy = loads.max > cores
  const notQuiet = samples.filter((s) => s.quietStart === false).length
  return `1-minute load average at the end of each child: median ${loads.median.toFixed(2)}, max ${loads.max.toFixed(2)} on ${cores} cores; ` +
    `${notQuiet} of ${samples.length} children started while other processes were runnable (after waiting up to ${QUIET_WAIT_MS / 1000} s).` +
    (busy
      ? ` **Other work was running on the machine during this run** (load above the core count): single runs are noisy;
trust the medians and paired ratios more than the min–max.`
      : "")
}

const pkgVersion = (rel: string): string | undefined => {
  try {
    const pj = JSON.parse(readFileSync(path.join(ROOT, rel), "utf8")) as { name: string; version: string }
    return `${pj.name}@${pj.version}`
  } catch {
    return undefined
  }
}

const markdown = (
  cells: ReadonlyArray<Cell>,
  samples: ReadonlyArray<Sample>,
  wakeDefs: ReadonlyArray<WakeDef>,
  wakeSamples: ReadonlyArray<WakeSample>,
  contenders: ReadonlyArray<Contender>,
  unavailable: Map<string, string>,
  totalS: number,
  svgName: string
): string => {
  const cpus = os.cpus()
  const results = resultRows(cells)
  const flat = flatnessRows(cells, contenders, samples)
  const targets = targetRows(cells, samples)
  const perContender = contenders.map((c) => {
    const ok = samples.filter((s) => s.ok && s.contender === c.name)
    const pragmas = [...new Set(ok.map((s) => JSON.stringify(s.pragmas ?? {})))].map((p) =>
      Object.entries(JSON.parse(p) as Record<string, unknown>).map(([k, v]) => `${k}=${v}`).join(", ")
    )
    const versions = [...new Set(ok.map((s) => s.sqliteVersion).filter(Boolean))]
    return [
      c.name,
      c.packages.map(pkgVersion).filter(Boolean).join(", "),
      versions.join(", ") || "—",
      pragmas.join(" / ") || "—",
      unavailable.get(c.name) ?? ""
    ]
  })
  const memory = cells.filter((c) => c.workload.id === "memory-1m" && !c.na)
  const scaled = cells.filter((c) => !c.na && sizeNote(c, BASE))
  const naCells = cells.filter((c) => c.na && c.contender.name !== "raw")
  const s = BASE
  const childMode = BUNDLE
    ? "run as a per-contender esbuild bundle in `bench/.cache/`, so a child does not pay ~2 s of TypeScript loading; `BENCH_BUNDLE=0` runs it through tsx"
    : "run through tsx"
  const throughput = cells.length > 0
  const command = [
    QUICK ? "BENCH_QUICK=1" : "",
    env.BENCH_REPS ? `BENCH_REPS=${REPS}` : "",
    env.BENCH_WORKLOADS ? `BENCH_WORKLOADS=${env.BENCH_WORKLOADS}` : "",
    env.BENCH_CONTENDERS ? `BENCH_CONTENDERS=${env.BENCH_CONTENDERS}` : "",
    "npm run bench"
  ].filter(Boolean).join(" ")
  const wake = wakeDefs.length > 0 ? wakeMarkdown(wakeDefs, wakeSamples, WAKE) : ""
  const machine = `## Machine

${loadNote([...samples, ...wakeSamples])}

| | |
| --- | --- |
| CPU | ${cpus[0]?.model ?? "unknown"} |
| cores | ${cpus.length} |
| RAM | ${(os.totalmem() / 2 ** 30).toFixed(1)} GiB |
| Node | ${process.version} |
| OS | ${os.type()} ${os.release()} (${os.arch()}) |`
  if (!throughput) {
    return `# Benchmarks

Waking only (issue 4). Generated by \`${command}\` on ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC,
${wakeSamples.length} child runs, ${totalS.toFixed(0)} s in total.${QUICK ? "\n\n**QUICK run: smoke test only.**" : ""}

${machine}

${wake}`
  }
  return `# Benchmarks

Issue 5: *close to raw SQLite, ahead of every peer, measured side by side.*${wake ? " Issue 4: *waking without polling* (section \"Waking\")." : ""}

Written by the benches, each its own sections: \`bench/run.ts\` the SQLite ones, \`bench/flow.ts\` flow control's (one
per engine), \`bench/pg/run.ts\` the PostgreSQL one; \`npm run bench\` runs them all. Runs of single rows and their
analysis, kept by hand beside it: issue 14's rows ([benchmarks-issue14.md](benchmarks-issue14.md)), flow control's
claim cost, issue 13 ([benchmarks-flow.md](benchmarks-flow.md)), Effect's PersistedQueue over alkstore
([benchmarks-persistedqueue.md](benchmarks-persistedqueue.md)).

Generated by \`${command}\` on ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC,
${REPS} interleaved rounds (the 1M-row workloads \`claim-1m\` and \`memory-1m\` in the first ${HEAVY_REPS} of them:
\`BENCH_HEAVY_REPS\`), ${samples.length + wakeSamples.length} child runs, ${totalS.toFixed(0)} s in total.${QUICK ? "\n\n**QUICK run: small sizes, smoke test only — not the issue-5 figures.**" : ""}

![paired ratios vs raw](${svgName})

## Method

- **One fresh child process per measurement** (\`bench/child.ts\`, ${childMode}),
  on a **fresh WAL database file** in \`os.tmpdir()\`, deleted afterwards. Setup (schema/migrations, preloading) is untimed; only the
  workload's loop is timed (\`performance.now()\`), and each contender checks afterwards that the work was really
  done (no live jobs left after a drain, the right number left after an enqueue or claim run).
- **Interleaved rounds**: every round runs every workload for every contender (the contender order rotates per
  round), so slow drift of the machine hits everybody alike.
- **Paired ratio**: per round, contender throughput ÷ raw throughput *in the same round* (on the raw workload that
  does the same job; e.g. \`process\` and the claim loop are both divided by raw's claim→ack loop), then the median
  (and min–max) of those per-round ratios. Claim flatness is paired the same way within one contender.
- **Pragmas**: \`journal_mode=WAL\`, \`synchronous=NORMAL\` for every contender (read back from the connection after
  the run, see below). The raw baseline, plainjob and alkstore run on the **same better-sqlite3 build** (root
  \`node_modules\`); liteque needs better-sqlite3 11 and runs on its own (\`bench/peers/liteque\`).
- **Raw baseline** (\`bench/contenders/raw.ts\`): minimal \`jobs\` table with a partial claim index
  \`(queue, priority DESC, run_at, id) WHERE state='pending'\`; enqueue = one INSERT; claim = one
  \`UPDATE … WHERE id = (SELECT … ORDER BY priority DESC, run_at, id LIMIT 1) RETURNING *\` (autocommit);
  ack = one \`DELETE\` by id (autocommit) — two write transactions per job; batched = claim 100 with
  \`WHERE id IN (SELECT … LIMIT 100)\` and delete the 100 in one transaction. Payloads are JSON.stringify'd on
  enqueue and JSON.parse'd on claim, like a library does.

${machine}

## Contenders

| contender | packages | SQLite | pragmas (read back) | unavailable |
| --- | --- | --- | --- | --- |
${perContender.map((r) => `| ${r.join(" | ")} |`).join("\n")}

## Workloads

| id | what | sizes |
| --- | --- | --- |
${WORKLOADS.filter((w) => cells.some((c) => c.workload.id === w.id)).map((w) => `| \`${w.id}\` | ${w.title} | ${w.description(s)} |`).join("\n")}

Payload: \`{ n: i, to: "user@example.com" }\`.${scaled.length ? `

Scaled down for slow peers to fit the time budget (their per-op cost grows with the number of pending jobs, so
their figures at the smaller sizes *flatter* them; at 1M pending only a few claims fit):

${scaled.map((c) => `- ${c.contender.name} / \`${c.workload.id}\`: ${sizeNote(c, BASE)}`).join("\n")}` : ""}

## Results

${mdTable(results.header, results.rows)}

## Claim cost vs queue size (flatness)

Time per claim+ack (the pending count is the size named plus the timed claims, which drain away during the run).

${mdTable(flat.header, flat.rows)}
${memory.length ? `
## Memory

Peak RSS (\`process.resourceUsage().maxRSS\`) of the child that enqueued ${s.memoryJobs.toLocaleString("en-US")} jobs (${s.preloadChunk.toLocaleString("en-US")} per transaction) and drained them in claimed batches of ${s.batch}.

${mdTable(
      ["contender", "peak RSS median", "min–max", "throughput (enqueue+drain) median"],
      memory.map((c) => [
        c.contender.name,
        c.rss ? `${c.rss.median.toFixed(0)} MB` : "—",
        fmtRange(c.rss, (x) => `${x.toFixed(0)} MB`),
        fmtSpread(c.throughput, fmtOps, " jobs/s")
      ])
    )}
` : ""}
## Issue-5 targets (alkstore)

${mdTable(targets.header, targets.rows)}

## Issue-14 targets (alkstore, as applications call it)

Each row against raw better-sqlite3 in the same run, plainjob beside it. The latency rows come from the
waking children below (\`wake-outside\`, \`wake-crossprocess\`, \`wake-crossprocess-warm\`: ${WAKE_REPS} interleaved round(s)
per side; the paired ratio is per round, percentiles pooled over the rounds); the throughput rows from the rounds above,
each in a fresh process and in a warm one.

${(() => {
    const t = issue14Rows(cells, samples, wakeSamples)
    return mdTable(t.header, t.rows)
  })()}

Runs of these rows since, each with its command, its figures and, for a target missed, the measurement of its
floor: [benchmarks-issue14.md](benchmarks-issue14.md). Where the time goes, statement by statement, and why a
missed target is missed: [performance.md](performance.md).
${wake ? `\n${wake}` : ""}
## Peer notes

- **plainjob**: ack = \`markJobAsDone\` (an UPDATE; done rows stay until its maintenance removes them after 7 days).
  Its worker (\`defineWorker\`) also checks for due cron jobs on every iteration (one more \`BEGIN IMMEDIATE\`
  per job), which is why \`drain-1-process\` is slower than its claim loop. "100 / tx" = \`db.transaction\` around
  100 \`queue.add\`; the batch row is \`addMany\`.
- **liteque**: runs on its own better-sqlite3 11.9.1 (SQLite 3.49.1): on better-sqlite3 12 its \`attemptDequeue\`
  throws *"Transaction function cannot return a promise"* (it hands an async callback to drizzle's
  better-sqlite3 transaction). On 11.x that transaction commits right after its first SELECT, so the claiming
  UPDATE runs after the COMMIT (its claim is not atomic; harmless with one worker). Its schema has 9 single-column
  indexes and no index serving its \`ORDER BY priority, createdAt\`, so a claim scans every due row. No batch
  enqueue or batch claim. "100 / tx" = \`BEGIN IMMEDIATE\` … \`COMMIT\` on its connection around 100 awaited
  \`enqueue\` calls. Preloads (untimed) go straight into its table with one \`INSERT … SELECT\` writing the
  values \`enqueue\` writes.
- **@effect/sql SqlPersistedQueue** (\`effect-pq\`): \`offer\` = one \`INSERT OR IGNORE\` with a random UUID key;
  \`take(f)\` hands out rows claimed by a per-queue poller fiber (one \`UPDATE … RETURNING … ORDER BY updated_at
  LIMIT <waiting takers>\`, which sorts every unclaimed row: O(pending) per claim) and marks the row completed
  after \`f\` (rows are kept). No batch offer, no claim without a handler; "batched" = 100 concurrent \`take\`s,
  which lets the poller claim up to 100 rows per statement. "100 / tx" = \`sql.withTransaction\` around 100
  \`offer\`s. Preloads (untimed) go straight into its table (\`INSERT … SELECT\`); a dead row is one whose
  attempts reached take's default \`maxAttempts\` (10).
- **raw-effect** (the Effect floor, not a peer): raw's own statements, each call wrapped in one \`Effect.sync\`
  and driven from an \`Effect.gen\` loop in one \`Effect.runPromise\`. Its ratio to raw is what calling through
  Effect costs by itself at these sizes (fiber steps, and the JIT warming up Effect's runtime in a fresh
  process): no library with an Effect API per call can beat it on \`enqueue-1tx\`, \`enqueue-100tx\` or \`drain-1\`.
- **alkstore**: all workloads through the public API (\`src/index.ts\`), one \`Effect.runPromise\` per workload.
  \`drain-1-process\` = \`process(worker, handler, { concurrency: 1 })\`, stopped once the handler saw every job and
  \`stats\` shows nothing pending or claimed (the final \`stats\` polls are inside the timed region). Dead rows
  for \`claim-dead100k\` are made through the API: \`enqueueBatch\` with \`expires: "1 millis"\`, then
  \`Queues.maintenance\`.

## Not measured

${naCells.filter((c) => c.contender.name !== "raw-effect").map((c) => `- ${c.contender.name} / \`${c.workload.id}\`: ${c.na}`).join("\n") || "—"}
`
}

await main()
