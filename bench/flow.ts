/**
 * Flow control's claim cost (issue 13): a claim → ack loop on a queue with
 * limits, with due work spread over 1, 100 and 10 000 groups, against the
 * same loop on a queue without limits, as paired ratios per interleaved
 * round (every scenario once per round, on a fresh database each).
 *
 *   tsx bench/flow.ts            SQLite (a fresh WAL file per sample)
 *   tsx bench/flow.ts --pg       PostgreSQL (bench/pg/cluster.ts: a throw-away server, or ALKSTORE_PG_URL)
 *
 * Environment: FLOW_ROUNDS (default 5), FLOW_OPS timed claims (default 10000 on SQLite,
 * 1000 on PostgreSQL), FLOW_JOBS due jobs (default 20000),
 * FLOW_SCENARIOS (comma-separated scenario ids, default all; the baseline always runs).
 * FLOW_ANALYZE=1: ANALYZE after filling (PostgreSQL: the jobs table, steady-state plans; SQLite: the file).
 * FLOW_PAIRED=1: instead, each limited scenario side by side with a baseline store in one process, in
 * alternating chunks of 100 claim → ack pairs, CPU time summed per side: the ratio a loaded machine disturbs least.
 * Prints a Markdown table. A run with none of these set writes it, with its verdicts, as its engine's section of
 * docs/benchmarks.md ("Flow control (issue 13)", bench/sections.ts; FLOW_OUT=dir writes that dir's benchmarks.md
 * instead); the earlier runs and their analysis are in docs/benchmarks-flow.md.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Layer, ManagedRuntime, Option, Redacted } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { PgStore, Queues, SqliteStore } from "../src/index.js"
import { admin, startServer } from "./pg/cluster.js"
import { spliceSection } from "./sections.js"

const pg = process.argv.includes("--pg")
const ROUNDS = Number(process.env.FLOW_ROUNDS ?? 5)
// 10 000 on SQLite: with 2 000 (0.3 s a sample) the baseline read 181–185 µs of CPU per claim+ack against 111 with
// 10 000 on the same machine within the hour, and a round's ratios spread 0.78–1.91× (the start of each sample's
// loop, not the claims, set them); with 10 000 they spread 0.1–0.3× (docs/benchmarks-flow.md, 2026-12-07).
const OPS = Number(process.env.FLOW_OPS ?? (pg ? 1000 : 10_000))
const WARMUP = 200
const JOBS = Number(process.env.FLOW_JOBS ?? 20_000)
/** Issue 13's target: a limited claim+ack costs at most this many times an unlimited one. */
const TARGET = 1.5
/** A run as `npm run bench` makes it (no setting changed) is the record: it writes its section of the docs. */
const recorded = ["FLOW_ROUNDS", "FLOW_OPS", "FLOW_JOBS", "FLOW_SCENARIOS", "FLOW_ANALYZE", "FLOW_PAIRED"]
  .every((name) => process.env[name] === undefined)

interface Scenario {
  readonly id: string
  readonly title: string
  readonly limits: Queues.Limits | undefined
  readonly groups: number
}

const allScenarios: ReadonlyArray<Scenario> = [
  { id: "unlimited", title: "no limits (baseline)", limits: undefined, groups: 1 },
  { id: "limited-1", title: "concurrency 10 + groupConcurrency 1, 1 group", limits: { concurrency: 10, groupConcurrency: 1 }, groups: 1 },
  { id: "limited-100", title: "concurrency 10 + groupConcurrency 1, 100 groups", limits: { concurrency: 10, groupConcurrency: 1 }, groups: 100 },
  { id: "limited-10k", title: "concurrency 10 + groupConcurrency 1, 10 000 groups", limits: { concurrency: 10, groupConcurrency: 1 }, groups: 10_000 },
  {
    id: "rate-100",
    title: "rate 1e6/s + groupRate 1e6/s, 100 groups",
    limits: { rate: { limit: 1_000_000, per: "1 second" }, groupRate: { limit: 1_000_000, per: "1 second" } },
    groups: 100
  },
  { id: "fair-10k", title: "fair rotation only ({}), 10 000 groups", limits: {}, groups: 10_000 }
]

const chosen = process.env.FLOW_SCENARIOS?.split(",")
const scenarios = allScenarios.filter((s) => s.id === "unlimited" || chosen === undefined || chosen.includes(s.id))

type Store = Layer.Layer<Queues.Queues, unknown>

interface Sample {
  readonly opsPerSecond: number
  /** CPU time of this process per claim+ack, µs (user + system): on a loaded machine steadier than wall time. */
  readonly cpuMicros: number
}

/** The scenario's queue, its limits set and its jobs enqueued (spread over its groups). */
const filled = (scenario: Scenario) =>
  Effect.gen(function*() {
    const queues = yield* Queues.Queues
    if (scenario.limits !== undefined) yield* queues.setLimits("bench", scenario.limits)
    const q = yield* queues.queue("bench")
    const perGroup = Math.ceil(JOBS / scenario.groups)
    for (let g = 0; g < scenario.groups; g++) {
      const payloads = Array.from({ length: perGroup }, (_, i) => ({ g, i }))
      yield* q.enqueueBatch(payloads, scenario.groups === 1 ? undefined : { group: `tenant-${g}` })
    }
    // The fill's WAL copied back before timing (SQLite): otherwise the store's checkpointer does it during the
    // first timed claims, more for a limited queue (its flow indexes), and charges the enqueues' pages to them.
    if (!pg) {
      const sql = yield* Effect.serviceOption(SqlClient.SqlClient)
      if (Option.isSome(sql)) yield* Effect.orDie(sql.value.unsafe("PRAGMA wal_checkpoint(TRUNCATE)"))
    }
    // FLOW_ANALYZE=1: planner statistics before timing — on PostgreSQL as autovacuum's analyze gives a store
    // that has run a while (without, the first minute's plans see a table of unknown contents); on SQLite as
    // an application running `ANALYZE` or `PRAGMA optimize` on the file would leave it.
    if (process.env.FLOW_ANALYZE === "1") {
      const sql = yield* Effect.serviceOption(SqlClient.SqlClient)
      if (Option.isSome(sql)) yield* Effect.orDie(sql.value.unsafe(pg ? "ANALYZE alkstore.__alkstore_jobs" : "ANALYZE"))
    }
    return q
  })

const sample = async (scenario: Scenario, store: Store): Promise<Sample> => {
  const program = Effect.gen(function*() {
    const q = yield* filled(scenario)
    const loop = (n: number) =>
      Effect.gen(function*() {
        for (let i = 0; i < n; i++) {
          const handle = yield* q.claim("bench")
          if (Option.isNone(handle)) return yield* Effect.die(new Error(`nothing claimable at op ${i} (${scenario.id})`))
          yield* handle.value.ack
        }
      })
    yield* loop(WARMUP)
    const started = performance.now()
    const cpu = process.cpuUsage()
    yield* loop(OPS)
    const used = process.cpuUsage(cpu)
    return { opsPerSecond: OPS / ((performance.now() - started) / 1000), cpuMicros: (used.user + used.system) / OPS }
  })
  return Effect.runPromise(Effect.scoped(Effect.provide(program, store)) as Effect.Effect<Sample>)
}

/** A store's queue, filled as `sample` fills it, with its claim → ack loop as a runnable chunk. */
const prepared = async (scenario: Scenario, store: Store) => {
  const runtime = ManagedRuntime.make(store)
  const q = await runtime.runPromise(filled(scenario) as Effect.Effect<Queues.Queue<unknown>>)
  const loop = (n: number) =>
    Effect.gen(function*() {
      for (let i = 0; i < n; i++) {
        const handle = yield* q.claim("bench")
        if (Option.isNone(handle)) return yield* Effect.die(new Error(`nothing claimable (${scenario.id})`))
        yield* handle.value.ack
      }
    })
  /** CPU µs of `n` claim → ack pairs (and their wall time, µs, in `walls`). */
  const chunk = async (n: number, walls?: Array<number>) => {
    const cpu = process.cpuUsage()
    const started = performance.now()
    await runtime.runPromise(loop(n) as Effect.Effect<void>)
    const used = process.cpuUsage(cpu)
    walls?.push((performance.now() - started) * 1000)
    return used.user + used.system
  }
  return { chunk, dispose: () => runtime.dispose() }
}

const pairedRun = async (storeFor: () => Promise<Store>) => {
  const lines: Array<string> = []
  for (const scenario of scenarios.filter((s) => s.id !== "unlimited")) {
    const base = await prepared(scenarios[0]!, await storeFor())
    const limited = await prepared(scenario, await storeFor())
    await base.chunk(WARMUP)
    await limited.chunk(WARMUP)
    let baseCpu = 0
    let limitedCpu = 0
    const ratios: Array<number> = []
    const baseWalls: Array<number> = []
    const limitedWalls: Array<number> = []
    for (let done = 0; done < OPS; done += 100) {
      // alternate which side goes first, so neither always runs right after the other
      const [b, l] = done % 200 === 0
        ? [await base.chunk(100, baseWalls), await limited.chunk(100, limitedWalls)]
        : [await limited.chunk(100, limitedWalls), await base.chunk(100, baseWalls)].reverse() as [number, number]
      baseCpu += b
      limitedCpu += l
      ratios.push(l / b)
    }
    await base.dispose()
    await limited.dispose()
    const line = `| ${scenario.title} | ${(baseCpu / OPS).toFixed(1)} | ${(limitedCpu / OPS).toFixed(1)} | ` +
      `${(limitedCpu / baseCpu).toFixed(2)}× (chunks: median ${median(ratios).toFixed(2)}×) | ` +
      `${(median(limitedWalls.map((w, i) => w / baseWalls[i]!))).toFixed(2)}× |`
    process.stderr.write(line + "\n")
    lines.push(line)
  }
  return lines
}

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}

const main = async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-flow-bench-"))
  const server = pg ? await startServer() : undefined
  let n = 0
  const storeFor = async (): Promise<Store> => {
    n++
    if (server === undefined) return SqliteStore.layer({ filename: path.join(dir, `flow-${n}.db`) }) as Store
    const db = `flow_bench_${n}`
    await admin(server.adminUrl, [`CREATE DATABASE ${db}`])
    return PgStore.layer({ url: Redacted.make(server.urlFor(db)), clock: "host" }) as unknown as Store
  }
  if (process.env.FLOW_PAIRED === "1") {
    try {
      const lines = await pairedRun(storeFor)
      process.stdout.write([
        `Engine: ${pg ? "PostgreSQL" : "SQLite (SqliteStore.layer, WAL file)"}; paired in one process, alternating chunks of 100; ` +
        `${JOBS} due jobs; ${OPS} timed claim → ack pairs per side after ${WARMUP} untimed; 1-minute load average at the end ` +
        `${os.loadavg()[0]!.toFixed(2)} on ${os.cpus().length} cores; ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC.`,
        "",
        `| scenario | no limits: ${pg ? "client " : ""}CPU µs per claim+ack | limited: ${pg ? "client " : ""}CPU µs per claim+ack | CPU cost vs. no limits | wall time vs. no limits (chunks: median) |`,
        "| --- | ---: | ---: | ---: | ---: |",
        ...lines
      ].join("\n") + "\n")
    } finally {
      server?.stop()
      fs.rmSync(dir, { recursive: true, force: true })
    }
    return
  }
  const results = new Map<string, Array<number>>()
  const ratios = new Map<string, Array<number>>()
  const cpus = new Map<string, Array<number>>()
  const cpuRatios = new Map<string, Array<number>>()
  const push = (map: Map<string, Array<number>>, id: string, x: number) => map.set(id, [...(map.get(id) ?? []), x])
  try {
    for (let round = 0; round < ROUNDS; round++) {
      const order = scenarios.map((_, i) => scenarios[(i + round) % scenarios.length]!)
      const thisRound = new Map<string, Sample>()
      for (const scenario of order) {
        const s = await sample(scenario, await storeFor())
        thisRound.set(scenario.id, s)
        push(results, scenario.id, s.opsPerSecond)
        push(cpus, scenario.id, s.cpuMicros)
        process.stderr.write(
          `round ${round + 1}/${ROUNDS} ${scenario.id}: ${s.opsPerSecond.toFixed(0)} claim+ack/s, ${s.cpuMicros.toFixed(1)} µs CPU each\n`
        )
      }
      const base = thisRound.get("unlimited")!
      for (const scenario of scenarios) {
        // the cost ratios: how much longer a limited claim+ack takes than an unlimited one, this round
        const s = thisRound.get(scenario.id)!
        push(ratios, scenario.id, base.opsPerSecond / s.opsPerSecond)
        push(cpuRatios, scenario.id, s.cpuMicros / base.cpuMicros)
      }
    }
  } finally {
    server?.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  }
  const load = os.loadavg()[0]!.toFixed(2)
  const at = new Date().toISOString().slice(0, 16).replace("T", " ")
  const engine = pg ? "PostgreSQL" : "SQLite (SqliteStore.layer, WAL file)"
  const spread = (r: ReadonlyArray<number>) => `${median(r).toFixed(2)}× (${Math.min(...r).toFixed(2)}–${Math.max(...r).toFixed(2)})`
  const header = `| scenario | claim+ack/s (median) | wall-time cost vs. no limits | ${pg ? "client " : ""}CPU µs per claim+ack (median) | ${pg ? "client " : ""}CPU cost vs. no limits |`
  const row = (s: Scenario) =>
    `| ${s.title} | ${median(results.get(s.id)!).toFixed(0)} | ${spread(ratios.get(s.id)!)} | ` +
    `${median(cpus.get(s.id)!).toFixed(1)} | ${spread(cpuRatios.get(s.id)!)} |`
  const lines = [
    `Engine: ${engine}; ${ROUNDS} interleaved rounds; ${JOBS} due jobs; ` +
    `${OPS} timed claim → ack pairs after ${WARMUP} untimed; 1-minute load average at the end ${load} on ${os.cpus().length} cores; ` +
    `${at} UTC.`,
    "",
    header,
    "| --- | ---: | ---: | ---: | ---: |",
    ...scenarios.map(row),
    "",
    "Ratios: the median over rounds of each round's ratio to that round's baseline (min–max in brackets)."
  ]
  process.stdout.write(lines.join("\n") + "\n")
  if (recorded || process.env.FLOW_OUT !== undefined) {
    const dir = path.resolve(process.env.FLOW_OUT ?? path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "docs"))
    const file = path.join(dir, "benchmarks.md")
    const doc = fs.existsSync(file) ? fs.readFileSync(file, "utf8") : "# Benchmarks\n"
    fs.writeFileSync(file, spliceSection(doc, `flow-bench-${pg ? "pg" : "sqlite"}`, "bench/flow.ts", flowSection(lines, ratios)))
    process.stdout.write(`wrote ${file} (section "Flow control (issue 13): ${pg ? "PostgreSQL" : "SQLite"}")\n`)
  }
}

/** The engine's section of docs/benchmarks.md: the run's table, with each scenario's verdict against the target. */
const flowSection = (lines: ReadonlyArray<string>, ratios: ReadonlyMap<string, ReadonlyArray<number>>) => {
  const limited = scenarios.filter((s) => s.id !== "unlimited")
  const verdicts = limited.map((s) => {
    const wall = median(ratios.get(s.id)!)
    return `| ${s.title} | ${wall.toFixed(2)}× | ≤ ${TARGET}× | ${wall <= TARGET ? "PASS" : `FAIL by ${(wall - TARGET).toFixed(2)}×`} |`
  })
  const groups = ["limited-1", "limited-100", "limited-10k"].filter((id) => ratios.has(id)).map((id) => median(ratios.get(id)!))
  return `## Flow control (issue 13): ${pg ? "PostgreSQL" : "SQLite"}

Generated by \`tsx bench/flow.ts${pg ? " --pg" : ""}\` (a step of \`npm run bench\` and \`npm run bench:flow\`${pg ? ", and of \`npm run bench:pg\`" : ""}):
one claim → ack loop (\`claim\`, then \`handle.ack\`: two write transactions per job) over ${JOBS} due jobs, on a
queue without limits (the baseline) and on queues with limits whose due work is spread over 1, 100 and 10 000
groups; every scenario once per round on a fresh database, the order rotating per round. Earlier runs, paired
runs in one process and what each change did: [benchmarks-flow.md](benchmarks-flow.md).

${lines.join("\n")}

Issue 13's target: a limited claim+ack at most ${TARGET}× an unlimited one (wall time, the median of the rounds'
ratios), flat in the number of groups.

| scenario | wall-time cost vs. no limits | target | verdict |
| --- | ---: | --- | --- |
${verdicts.join("\n")}
${groups.length === 3 ? `\nFlat in the number of groups: 1, 100 and 10 000 groups under the same limits cost ${groups.map((g) => `${g.toFixed(2)}×`).join(", ")} (spread ${(Math.max(...groups) - Math.min(...groups)).toFixed(2)}×).\n` : ""}`
}

main().catch((error) => {
  process.stderr.write(String(error?.stack ?? error) + "\n")
  process.exit(1)
})
