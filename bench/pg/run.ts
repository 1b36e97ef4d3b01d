/**
 * The PostgreSQL benchmark (issue 10, item 6): `npm run bench:pg`, also run
 * at the end of `npm run bench`.
 *
 * One PostgreSQL 15 server for the whole run (bench/pg/cluster.ts: a
 * throw-away cluster, or ALKSTORE_PG_URL), every sample on a fresh database
 * (CREATE DATABASE before, DROP DATABASE … WITH (FORCE) after) in fresh
 * processes (bench/pg/child.ts; drain workloads spawn their worker
 * processes, wake-crossprocess its enqueuing process). Interleaved rounds:
 * each round runs every workload for every contender, the contender order
 * rotating per round; ratios are paired per round against the raw baseline.
 * Writes its section of docs/benchmarks.md (between the `pg-bench` markers;
 * the SQLite section is left alone) and docs/benchmarks-pg.svg.
 *
 * Environment:
 *   BENCH_REPS=n          rounds (default 5; 1 with BENCH_QUICK): with 3, a paired median
 *                         moved a row's verdict against a peer by 0.01–0.02× from run to run
 *   BENCH_HEAVY_REPS=n    rounds that also run claim-1m (default 1)
 *   BENCH_QUICK=1         small sizes, for a smoke run
 *   BENCH_CONTENDERS=a,b  only these contenders (raw is always added)
 *   BENCH_WORKLOADS=a,b   only these workloads (claim-1m adds claim-1k, drain-4 adds drain-1)
 *   BENCH_OUT=dir         where to write benchmarks.md + benchmarks-pg.svg
 *                         (default: docs/ for a full unfiltered run, else a tmp dir)
 *   BENCH_TIMEOUT_S=n     per-child timeout (default 300)
 *   BENCH_PG_RENDER=file  re-render from a benchmarks-pg-samples.json, or from the progress file a
 *                         run keeps in os.tmpdir() (no measuring; same BENCH_QUICK/BENCH_REPS as that run)
 *   ALKSTORE_PG_URL=url   use this server instead of booting one (needs CREATEDB)
 */
import { spawn, spawnSync } from "node:child_process"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { percentile, textTable } from "../report.js"
import type { PgChildResult } from "./child.js"
import { admin, readSettings, startServer } from "./cluster.js"
import { PG_CONTENDER_NAMES, loadPgContender } from "./contenders/index.js"
import { spliceSection } from "../sections.js"
import { PG_SECTION, PG_WRITER, pgMarkdown } from "./markdown.js"
import type { PgSample } from "./report.js"
import { pgRatiosSvg, resultRows } from "./report.js"
import type { PgContender, PgSizes, PgWorkloadDef, PgWorkloadId } from "./workloads.js"
import { AFTER_RETURN, ENQUEUE_CALL, FULL_SIZES, PG_WORKLOADS, QUICK_SIZES } from "./workloads.js"

const PG_DIR = path.dirname(fileURLToPath(import.meta.url))
const BENCH_DIR = path.resolve(PG_DIR, "..")
const ROOT = path.resolve(BENCH_DIR, "..")
const env = process.env
const QUICK = env.BENCH_QUICK === "1"
const REPS = Number(env.BENCH_REPS ?? (QUICK ? 1 : 5))
const HEAVY_REPS = Math.min(REPS, Number(env.BENCH_HEAVY_REPS ?? 1))
const TIMEOUT_MS = Number(env.BENCH_TIMEOUT_S ?? 300) * 1000
const SIZES: PgSizes = QUICK ? QUICK_SIZES : FULL_SIZES
const only = (v: string | undefined) => (v ? new Set(v.split(",").map((s) => s.trim()).filter(Boolean)) : undefined)
const ONLY_CONTENDERS = only(env.BENCH_CONTENDERS)
const ONLY_WORKLOADS = only(env.BENCH_WORKLOADS)
const FILTERED = ONLY_CONTENDERS !== undefined || ONLY_WORKLOADS !== undefined

if (!Number.isInteger(REPS) || REPS < 1) throw new Error(`BENCH_REPS must be a positive integer, got ${env.BENCH_REPS}`)
if (!Number.isInteger(HEAVY_REPS) || HEAVY_REPS < 1) throw new Error("BENCH_HEAVY_REPS must be a positive integer")

/** Installs the bench's own dependencies (bench/package.json) when one is missing. */
const ensureDeps = (): string | undefined => {
  const need = ["pg", "pg-boss", "graphile-worker", "bullmq"]
  if (need.every((p) => existsSync(path.join(BENCH_DIR, "node_modules", p, "package.json")))) return undefined
  console.log("installing bench dependencies: npm install --prefix bench …")
  const r = spawnSync("npm", ["install", "--prefix", BENCH_DIR, "--no-audit", "--no-fund"], { cwd: ROOT, stdio: "inherit" })
  return r.status === 0 ? undefined : `npm install --prefix bench failed (exit ${r.status})`
}

interface Exit {
  readonly result?: PgChildResult | undefined
  readonly error: string
  readonly wallMs: number
}

const runChild = (args: ReadonlyArray<string>): Promise<Exit> =>
  new Promise((resolve) => {
    const t0 = performance.now()
    const child = spawn(process.execPath, ["--import", "tsx", path.join(PG_DIR, "child.ts"), ...args], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true // its own process group: a timeout kills its worker processes too
    })
    let out = ""
    let err = ""
    child.stdout.on("data", (d) => (out += d))
    child.stderr.on("data", (d) => (err += d))
    const timer = setTimeout(() => {
      if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL")
    }, TIMEOUT_MS)
    child.on("close", (code, signal) => {
      clearTimeout(timer)
      const line = out.split("\n").find((l) => l.startsWith("RESULT "))
      const lines = err.trim().split("\n").filter((l) => !/^\s+at /.test(l))
      const error = signal === "SIGKILL"
        ? `timed out after ${TIMEOUT_MS / 1000} s`
        : (lines.find((l) => /error/i.test(l)) ?? lines[0] ?? `exit ${code}`)
      resolve({
        result: code === 0 && line ? (JSON.parse(line.slice(7)) as PgChildResult) : undefined,
        error: (error || `exit ${code}`).slice(0, 300),
        wallMs: performance.now() - t0
      })
    })
  })

let dbCounter = 0

const measure = async (
  adminUrl: string,
  urlFor: (db: string) => string,
  c: PgContender,
  w: PgWorkloadDef,
  round: number
): Promise<PgSample> => {
  const db = `bench_${process.pid}_${++dbCounter}`
  await admin(adminUrl, [`CREATE DATABASE ${db}`])
  let exit: Exit
  try {
    exit = await runChild(["run", c.name, w.id, urlFor(db), JSON.stringify(SIZES)])
  } finally {
    await admin(adminUrl, [`DROP DATABASE IF EXISTS ${db} WITH (FORCE)`])
  }
  const base = { round, contender: c.name, workload: w.id, wallMs: exit.wallMs, load1: os.loadavg()[0] ?? 0 }
  const r = exit.result
  if (!r) return { ...base, ok: false, error: exit.error }
  if (w.kind === "latency") {
    const xs = r.latenciesMs ?? []
    if (xs.length === 0) return { ...base, ok: false, error: (r.notes ?? []).join("; ") || "no samples", notes: r.notes }
    const call = r.series?.[ENQUEUE_CALL] ?? []
    const wake = r.series?.[AFTER_RETURN] ?? []
    return {
      ...base,
      ok: true,
      p50: percentile(xs, 50),
      p99: percentile(xs, 99),
      samples: xs.length,
      callP50: call.length ? percentile(call, 50) : undefined,
      wakeP50: wake.length ? percentile(wake, 50) : undefined,
      wakeP99: wake.length ? percentile(wake, 99) : undefined,
      notes: r.notes
    }
  }
  return { ...base, ok: true, opsPerSec: (r.ops! / r.ms!) * 1000, usPerOp: (r.ms! * 1000) / r.ops!, notes: r.notes }
}

const selected = () => {
  const names = PG_CONTENDER_NAMES.filter((n) => !ONLY_CONTENDERS || ONLY_CONTENDERS.has(n) || n === "raw")
  const wanted = new Set<PgWorkloadId>()
  for (const w of PG_WORKLOADS) {
    if (ONLY_WORKLOADS && !ONLY_WORKLOADS.has(w.id)) continue
    wanted.add(w.id)
    if (w.id === "claim-1m") wanted.add("claim-1k")
    if (w.id === "drain-4") wanted.add("drain-1")
  }
  const unknown = [...(ONLY_WORKLOADS ?? [])].filter((id) => !PG_WORKLOADS.some((w) => w.id === id))
  if (unknown.length) throw new Error(`unknown BENCH_WORKLOADS: ${unknown.join(", ")}`)
  return { names, workloads: PG_WORKLOADS.filter((w) => wanted.has(w.id)) }
}

const outDir = () => {
  if (env.BENCH_OUT) return path.resolve(env.BENCH_OUT)
  if (!FILTERED && !QUICK) return path.join(ROOT, "docs")
  return mkdtempSync(path.join(os.tmpdir(), "alkstore-pgbench-out-"))
}

interface Rendered {
  readonly samples: ReadonlyArray<PgSample>
  readonly server: { readonly version: string; readonly origin: string; readonly settings: Record<string, string> }
  readonly unavailable: Record<string, string>
  readonly totalS: number
  readonly startedAt: string
}

const render = async (data: Rendered) => {
  const { names, workloads } = selected()
  const contenders = await Promise.all(names.map(loadPgContender))
  const unavailable = new Map(Object.entries(data.unavailable))
  const dir = outDir()
  mkdirSync(dir, { recursive: true })
  const svgName = "benchmarks-pg.svg"
  writeFileSync(
    path.join(dir, svgName),
    pgRatiosSvg(data.samples, workloads, contenders, `alkstore on PostgreSQL vs peers — ${QUICK ? "QUICK run" : `${REPS} rounds`}`)
  )
  const section = pgMarkdown({
    ...data,
    contenders,
    workloads,
    unavailable,
    sizes: SIZES,
    quick: QUICK,
    reps: REPS,
    heavyReps: HEAVY_REPS,
    svgName,
    command: [
      QUICK ? "BENCH_QUICK=1" : "",
      env.BENCH_REPS ? `BENCH_REPS=${REPS}` : "",
      env.BENCH_HEAVY_REPS ? `BENCH_HEAVY_REPS=${HEAVY_REPS}` : "",
      env.BENCH_WORKLOADS ? `BENCH_WORKLOADS=${env.BENCH_WORKLOADS}` : "",
      env.BENCH_CONTENDERS ? `BENCH_CONTENDERS=${env.BENCH_CONTENDERS}` : "",
      "npm run bench:pg"
    ].filter(Boolean).join(" ")
  })
  const md = path.join(dir, "benchmarks.md")
  writeFileSync(md, spliceSection(existsSync(md) ? readFileSync(md, "utf8") : "# Benchmarks\n", PG_SECTION, PG_WRITER, section))
  writeFileSync(path.join(dir, "benchmarks-pg-samples.json"), `${JSON.stringify(data, null, 1)}\n`)
  const table = resultRows(data.samples, workloads, contenders, unavailable)
  console.log(`\n${textTable(table.header, table.rows)}\n\nwrote ${md} (section "PostgreSQL") and ${path.join(dir, svgName)}`)
}

const main = async () => {
  if (env.BENCH_PG_RENDER) {
    await render(JSON.parse(readFileSync(env.BENCH_PG_RENDER, "utf8")) as Rendered)
    return
  }
  const started = performance.now()
  const startedAt = new Date().toISOString()
  const depsError = ensureDeps()
  const { names, workloads } = selected()
  const contenders = await Promise.all(names.map(loadPgContender))
  const unavailable: Record<string, string> = {}
  if (depsError) for (const c of contenders) if (c.name !== "raw" && c.name !== "alkstore-pg") unavailable[c.name] = depsError
  const server = await startServer()
  const cleanup = () => server.stop()
  process.on("SIGINT", () => {
    cleanup()
    process.exit(130)
  })
  const samples: Array<PgSample> = []
  const progressFile = path.join(os.tmpdir(), `alkstore-pgbench-progress-${process.pid}.json`)
  try {
    const settings = await readSettings(server.adminUrl)
    console.log(`PostgreSQL: ${server.version}\n  ${server.origin}\n  progress: ${progressFile}`)
    const progress = { server: { version: server.version, origin: server.origin, settings }, unavailable, startedAt }
    for (let round = 0; round < REPS; round++) {
      const order = contenders.map((_, i) => contenders[(i + round) % contenders.length]!)
      for (const w of workloads) {
        if (w.id === "claim-1m" && round >= HEAVY_REPS) continue
        for (const c of order) {
          if (c.supports[w.id] !== true || unavailable[c.name] !== undefined) continue
          const s = await measure(server.adminUrl, server.urlFor, c, w, round)
          samples.push(s)
          // progress on disk: an interrupted run can still be rendered (BENCH_PG_RENDER=<this file>)
          writeFileSync(progressFile, `${JSON.stringify({ ...progress, samples, totalS: (performance.now() - started) / 1000 })}\n`)
          const shown = !s.ok
            ? `FAILED: ${s.error}`
            : s.p50 !== undefined
            ? `p50 ${s.p50.toFixed(2)} ms, p99 ${s.p99!.toFixed(2)} ms (${s.samples} samples)`
            : `${s.opsPerSec!.toFixed(0)} ops/s (${s.usPerOp!.toFixed(0)} µs/op)`
          console.log(`[round ${round + 1}/${REPS}] ${w.id.padEnd(18)} ${c.name.padEnd(16)} ${shown}  (${(s.wallMs / 1000).toFixed(1)} s)`)
        }
      }
    }
    await render({
      samples,
      server: { version: server.version, origin: server.origin, settings },
      unavailable,
      totalS: (performance.now() - started) / 1000,
      startedAt
    })
    rmSync(progressFile, { force: true }) // rendered: the samples are in benchmarks-pg-samples.json now
  } finally {
    cleanup()
  }
}

await main()
