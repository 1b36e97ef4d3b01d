/**
 * alkstore through its public API (src/index.ts). Each workload's measured
 * loop is ONE Effect run (Effect.runPromise once per workload).
 */
import type { Contender, RunContext, RunResult, WorkloadId } from "../workloads.js"
import type { EnqueueOpts } from "../../src/Queues.js"
import { payload, range } from "../workloads.js"

const QUEUE = "bench"
const WORKER = "w1"

const run = async (workload: WorkloadId, { file, sizes: s }: RunContext): Promise<RunResult> => {
  const { Effect, Option, Stream, Fiber, Ref, Deferred } = await import("effect")
  const { SqlClient } = await import("@effect/sql")
  // Loaded lazily so the orchestrator can read this module's metadata even while src/ is in flux.
  const { Queues, SqliteStore } = await import("../../src/index.js")

  const program = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const queues = yield* Queues.Queues
    const q = yield* queues.queue(QUEUE)
    const notes: Array<string> = []
    const sync0 = (yield* sql<{ synchronous: number }>`PRAGMA synchronous`)[0]!
    if (sync0.synchronous !== 1) {
      // the harness wants WAL + NORMAL everywhere; say so when the library left another level
      yield* sql`PRAGMA synchronous = NORMAL`
      notes.push(`library left synchronous=${sync0.synchronous}; harness set NORMAL`)
    }

    const preload = (n: number, opts?: EnqueueOpts) =>
      Effect.gen(function*() {
        for (let i = 0; i < n; i += s.preloadChunk) {
          yield* q.enqueueBatch(range(Math.min(s.preloadChunk, n - i), i).map(payload), opts)
        }
      })
    const claimAck = (ops: number) =>
      Effect.gen(function*() {
        for (let i = 0; i < ops; i++) {
          const h = yield* q.claim(WORKER)
          if (Option.isNone(h)) return yield* Effect.die(new Error(`alkstore: queue empty after ${i}`))
          yield* h.value.ack
        }
      })
    let seen = 0
    const drainBatched = (total: number, read = false) =>
      Effect.gen(function*() {
        let done = 0
        while (done < total) {
          const hs = yield* q.claimBatch(WORKER, s.batch)
          if (hs.length === 0) return yield* Effect.die(new Error(`alkstore: queue empty after ${done}`))
          // the handler every real worker has: it reads the job's payload
          if (read) for (const h of hs) seen += (h.job.payload as { n: number }).n >= 0 ? 1 : 0
          yield* q.ackAll(hs)
          done += hs.length
        }
      })
    const waitIdle = Effect.gen(function*() {
      // process() acks after the handler returns: wait until nothing is pending or claimed
      while (true) {
        const st = yield* q.stats
        if (st.pending + st.claimed + st.scheduled === 0) return
        yield* Effect.sleep("1 millis")
      }
    })

    let t0 = 0
    let ops = 0
    const start = Effect.sync(() => (t0 = performance.now()))
    switch (workload) {
      case "enqueue-1tx":
        yield* start
        for (let i = 0; i < s.enqueueJobs; i++) yield* q.enqueue(payload(i))
        ops = s.enqueueJobs
        break
      case "enqueue-100tx":
        yield* start
        for (let i = 0; i < s.enqueueJobs; i += s.batch) {
          yield* sql.withTransaction(Effect.gen(function*() {
            for (let j = i; j < Math.min(i + s.batch, s.enqueueJobs); j++) yield* q.enqueue(payload(j))
          }))
        }
        ops = s.enqueueJobs
        break
      case "enqueue-batch100":
        yield* start
        for (let i = 0; i < s.enqueueJobs; i += s.batch) {
          yield* q.enqueueBatch(range(Math.min(s.batch, s.enqueueJobs - i), i).map(payload))
        }
        ops = s.enqueueJobs
        break
      case "drain-1":
        yield* preload(s.drainJobs)
        yield* start
        yield* claimAck(s.drainJobs)
        ops = s.drainJobs
        break
      case "drain-1-process": {
        yield* preload(s.drainJobs)
        const count = yield* Ref.make(0)
        const seen = yield* Deferred.make<void>()
        const handler = () =>
          Ref.updateAndGet(count, (n) => n + 1).pipe(
            Effect.flatMap((n) => (n === s.drainJobs ? Deferred.succeed(seen, undefined) : Effect.void))
          )
        yield* start
        const fiber = yield* Effect.fork(q.process(WORKER, handler, { concurrency: 1 }))
        yield* Deferred.await(seen)
        yield* waitIdle
        yield* Fiber.interrupt(fiber)
        ops = s.drainJobs
        break
      }
      case "drain-batch100":
        yield* preload(s.drainJobs)
        yield* start
        yield* drainBatched(s.drainJobs)
        ops = s.drainJobs
        break
      case "drain-batch100-read":
        yield* preload(s.drainJobs)
        yield* start
        yield* drainBatched(s.drainJobs, true)
        if (seen !== s.drainJobs) return yield* Effect.die(new Error(`alkstore: read ${seen} payloads`))
        ops = s.drainJobs
        break
      case "drain-stream100":
        yield* preload(s.drainJobs)
        yield* start
        yield* q.stream(WORKER, { batch: s.batch }).pipe(
          Stream.mapEffect((h) => h.ack),
          Stream.take(s.drainJobs),
          Stream.runDrain
        )
        ops = s.drainJobs
        break
      case "claim-1k":
      case "claim-1m":
      case "claim-dead100k":
        if (workload === "claim-dead100k") {
          // dead rows through the public API: expire them, then let maintenance move them to dead
          yield* preload(s.deadRows, { expires: "1 millis" })
          yield* Effect.sleep("5 millis")
          const m = yield* queues.maintenance
          if (m.expired !== s.deadRows) notes.push(`maintenance expired ${m.expired} of ${s.deadRows}`)
        }
        yield* preload((workload === "claim-1m" ? s.claimLarge : s.claimSmall) + s.claimOps + s.warmupOps)
        yield* claimAck(s.warmupOps)
        yield* sql`PRAGMA wal_checkpoint(TRUNCATE)`
        yield* start
        yield* claimAck(s.claimOps)
        ops = s.claimOps
        break
      case "memory-1m":
        yield* start
        yield* preload(s.memoryJobs)
        yield* drainBatched(s.memoryJobs)
        ops = s.memoryJobs
        break
      default:
        return yield* Effect.die(new Error(`alkstore: unsupported workload ${workload}`))
    }
    const ms = performance.now() - t0
    const st = yield* q.stats
    const live = st.pending + st.claimed + st.scheduled
    const expected = workload.startsWith("claim-")
      ? (workload === "claim-1m" ? s.claimLarge : s.claimSmall)
      : workload.startsWith("enqueue")
      ? s.enqueueJobs
      : 0
    if (live !== expected) return yield* Effect.die(new Error(`alkstore: ${live} live jobs left, expected ${expected}`))
    const jm = (yield* sql<{ journal_mode: string }>`PRAGMA journal_mode`)[0]!
    const sy = (yield* sql<{ synchronous: number }>`PRAGMA synchronous`)[0]!
    const v = (yield* sql<{ v: string }>`SELECT sqlite_version() AS v`)[0]!
    return {
      ops,
      ms,
      notes,
      pragmas: { journal_mode: jm.journal_mode, synchronous: sy.synchronous },
      sqliteVersion: v.v
    } satisfies RunResult
  })

  return Effect.runPromise(program.pipe(Effect.provide(SqliteStore.layer({ filename: file })), Effect.scoped))
}

export const contender: Contender = {
  name: "alkstore",
  label: "alkstore",
  packages: [
    "package.json",
    "node_modules/@effect/sql-sqlite-node/package.json",
    "node_modules/better-sqlite3/package.json",
    "node_modules/effect/package.json"
  ],
  supports: {
    "enqueue-1tx": true,
    "enqueue-100tx": true,
    "enqueue-batch100": true,
    "drain-1": true,
    "drain-1-process": true,
    "drain-batch100": true,
    "drain-batch100-read": true,
    "drain-stream100": true,
    "claim-1k": true,
    "claim-1m": true,
    "claim-dead100k": true,
    "memory-1m": true
  },
  run
}
