/**
 * The PostgreSQL benchmark (`npm run bench` runs it after the SQLite one; or
 * `tsx bench/pg/run.ts`): alkstore's PgStore against pg-boss 12,
 * graphile-worker 0.18 and a raw-SQL `pg` baseline, on one local
 * PostgreSQL (a throw-away cluster, or `ALKSTORE_PG_URL`), each run on a
 * fresh database, interleaved over rounds; medians and paired ratios against
 * the raw baseline. Writes docs/benchmarks-pg.md.
 *
 *   BENCH_PG_REPS=n      rounds (default 3)
 *   BENCH_PG_JOBS=n      jobs per workload (default 2000)
 */
import { writeFileSync } from "node:fs"
import path from "node:path"
import { fileURLToPath } from "node:url"
import Pg from "pg"
import { startCluster } from "../../test/support/pg-cluster.js"
import { contenders, type PgContender } from "./contenders.js"

const REPS = Number(process.env.BENCH_PG_REPS ?? 3)
const JOBS = Number(process.env.BENCH_PG_JOBS ?? 2000)
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..")

const workloads: ReadonlyArray<{ id: string; title: string; run: (c: PgContender) => Promise<void> }> = [
  { id: "enqueue-1tx", title: `enqueue ${JOBS}, one per transaction`, run: (c) => c.enqueue(JOBS, 1) },
  { id: "enqueue-100tx", title: `enqueue ${JOBS * 5}, 100 per transaction`, run: (c) => c.enqueue(JOBS * 5, 100) },
  { id: "drain-1", title: `drain ${JOBS} with one worker`, run: async (c) => c.drain(JOBS) }
]

const median = (xs: ReadonlyArray<number>) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2
}

// A contender's pool whose idle connections the DROP DATABASE ends reports it as an error event.
process.on("uncaughtException", (error) => {
  if (String((error as Error)?.message).includes("terminating connection due to administrator command")) return
  console.error(error)
  process.exit(1)
})

const main = async () => {
  const given = process.env.ALKSTORE_PG_URL
  const cluster = given ? { url: given, stop: () => {} } : await startCluster()
  const admin = new Pg.Client({ connectionString: cluster.url })
  await admin.connect()
  let n = 0
  const fresh = async () => {
    const name = `bench_${process.pid}_${++n}`
    await admin.query(`CREATE DATABASE ${name}`)
    const url = new URL(cluster.url)
    url.pathname = `/${name}`
    // FORCE: a contender's pool may still hold idle connections (their errors are ignored below)
    return { url: url.toString(), drop: () => admin.query(`DROP DATABASE ${name} WITH (FORCE)`) }
  }
  // samples[workload][contender] = ms per job, one per round
  const samples = new Map<string, Map<string, Array<number>>>()
  const failures = new Map<string, string>()
  try {
    for (let round = 0; round < REPS; round++) {
      for (const workload of workloads) {
        for (const [name, make] of contenders) {
          if (failures.has(name)) continue
          const db = await fresh()
          try {
            const contender = await make(db.url)
            try {
              if (workload.id === "drain-1") await contender.enqueue(JOBS, 100)
              const started = performance.now()
              await workload.run(contender)
              const perJob = (performance.now() - started) / (workload.id === "enqueue-100tx" ? JOBS * 5 : JOBS)
              const byContender = samples.get(workload.id) ?? new Map<string, Array<number>>()
              samples.set(workload.id, byContender)
              byContender.set(name, [...(byContender.get(name) ?? []), perJob])
              console.log(`round ${round + 1} ${workload.id} ${name}: ${(perJob * 1000).toFixed(1)} µs/job`)
            } finally {
              await contender.close()
            }
          } catch (cause) {
            failures.set(name, String((cause as Error)?.message ?? cause).split("\n")[0]!)
            console.log(`${name} failed: ${failures.get(name)}`)
          } finally {
            await db.drop()
          }
        }
      }
    }
  } finally {
    await admin.end()
    cluster.stop()
  }
  const names = contenders.map(([name]) => name)
  const header = `| workload | ${names.map((n) => `${n} µs/job`).join(" | ")} | ${names.slice(1).map((n) => `${n} ÷ raw`).join(" | ")} |`
  const lines = [header, `|${"---|".repeat(1 + names.length * 2 - 1)}`]
  for (const workload of workloads) {
    const byContender = samples.get(workload.id) ?? new Map<string, Array<number>>()
    const raws = byContender.get("raw") ?? []
    const cells = names.map((n) => {
      const xs = byContender.get(n)
      return xs ? (median(xs) * 1000).toFixed(1) : "—"
    })
    // paired ratios: each round's time over the same round's raw time (lower is better)
    const ratios = names.slice(1).map((n) => {
      const xs = byContender.get(n)
      if (!xs || raws.length !== xs.length) return "—"
      return `${median(xs.map((x, i) => x / raws[i]!)).toFixed(2)}×`
    })
    lines.push(`| ${workload.title} | ${cells.join(" | ")} | ${ratios.join(" | ")} |`)
  }
  const failed = [...failures].map(([name, why]) => `- ${name} did not run here: ${why}`)
  const md = `# PostgreSQL benchmark

\`tsx bench/pg/run.ts\` (part of \`npm run bench\`): ${REPS} interleaved rounds, each contender on a fresh database
of one local PostgreSQL ${given ? "(ALKSTORE_PG_URL)" : "(a throw-away cluster: fsync off)"}, Node ${process.version}.
Medians of µs per job; ratios are paired per round against the raw \`pg\` baseline (a minimal table, a
\`FOR UPDATE SKIP LOCKED\` claim then a delete — the ceiling), so lower is better and 1.00× is the ceiling.

${lines.join("\n")}

${failed.length > 0 ? `${failed.join("\n")}\n` : ""}
Not measured yet (issue 10 asks for them): drain with 4 worker processes, enqueue→handler latency in and across
processes, claim cost at 1M pending, BullMQ's PostgreSQL backend.
`
  writeFileSync(path.join(ROOT, "docs/benchmarks-pg.md"), md)
  console.log(md)
}

main().catch((error) => {
  console.error(error)
  process.exit(1)
})
