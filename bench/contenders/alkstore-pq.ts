/**
 * Effect's PersistedQueue (`@effect/experimental`) over alkstore:
 * `EffectStores.layerPersistedQueueStore()` on `SqliteStore.layer`, the
 * one-layer swap for `effect-pq` (PersistedQueue over `@effect/sql`'s
 * SqlPersistedQueue). The same workloads as `effect-pq`, through the same
 * PersistedQueue API: `offer(value)` and `take(f)`; "batched" is 100
 * concurrent takes, as there.
 *
 * Preloads (untimed) go through alkstore's `enqueueBatch` with the rows
 * `offer` writes (payload `{ id, element }`, a fresh UUID, the store's
 * stamps); dead rows for `claim-dead100k` are made as the `alkstore`
 * contender makes them (expired, then `Queues.maintenance`).
 */
import type { Contender, RunContext, RunResult, WorkloadId } from "../workloads.js"
import { payload, range } from "../workloads.js"

const QUEUE = "bench"

const run = async (workload: WorkloadId, { file, sizes: s }: RunContext): Promise<RunResult> => {
  const { Effect, Layer, Schema } = await import("effect")
  const { SqlClient } = await import("@effect/sql")
  const PersistedQueue = await import("@effect/experimental/PersistedQueue")
  const { EffectStores, Queues, SqliteStore } = await import("../../src/index.js")

  const QueueLive = PersistedQueue.layer.pipe(
    Layer.provideMerge(EffectStores.layerPersistedQueueStore()),
    Layer.provideMerge(SqliteStore.layer({ filename: file }))
  )

  const program = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const queues = yield* Queues.Queues
    const q = yield* PersistedQueue.make({ name: QUEUE, schema: Schema.Unknown })
    // the rows offer() writes (see src/internal/effectStores/persistedQueue.ts)
    const raw = yield* queues.queue(QUEUE, { visibilityTimeout: "2 minutes", maxAttempts: Number.MAX_SAFE_INTEGER })
    const noop = () => Effect.void
    const preload = (n: number, opts?: { readonly expires: "1 millis" }) =>
      Effect.gen(function*() {
        for (let i = 0; i < n; i += s.preloadChunk) {
          const chunk = range(Math.min(s.preloadChunk, n - i), i).map((j) => ({ id: crypto.randomUUID(), element: payload(j) }))
          yield* raw.enqueueBatch(chunk, opts)
        }
      })
    const takeLoop = (ops: number) =>
      Effect.gen(function*() {
        for (let i = 0; i < ops; i++) yield* q.take(noop)
      })

    let t0 = 0
    let ops = 0
    const notes: Array<string> = []
    const start = Effect.sync(() => (t0 = performance.now()))
    switch (workload) {
      case "enqueue-1tx":
        yield* start
        for (let i = 0; i < s.enqueueJobs; i++) yield* q.offer(payload(i))
        ops = s.enqueueJobs
        break
      case "enqueue-100tx":
        yield* start
        for (let i = 0; i < s.enqueueJobs; i += s.batch) {
          yield* sql.withTransaction(Effect.gen(function*() {
            for (let j = i; j < Math.min(i + s.batch, s.enqueueJobs); j++) yield* q.offer(payload(j))
          }))
        }
        ops = s.enqueueJobs
        break
      case "drain-1":
        yield* preload(s.drainJobs)
        yield* start
        yield* takeLoop(s.drainJobs)
        ops = s.drainJobs
        break
      case "drain-batch100":
        yield* preload(s.drainJobs)
        yield* start
        yield* Effect.forEach(Array.from({ length: s.drainJobs }), () => q.take(noop), {
          concurrency: s.batch,
          discard: true
        })
        ops = s.drainJobs
        break
      case "claim-1k":
      case "claim-1m":
      case "claim-dead100k":
        if (workload === "claim-dead100k") {
          yield* preload(s.deadRows, { expires: "1 millis" })
          yield* Effect.sleep("5 millis")
          const m = yield* queues.maintenance
          if (m.expired !== s.deadRows) notes.push(`maintenance expired ${m.expired} of ${s.deadRows}`)
        }
        yield* preload((workload === "claim-1m" ? s.claimLarge : s.claimSmall) + s.claimOps + s.warmupOps)
        yield* takeLoop(s.warmupOps)
        yield* sql`PRAGMA wal_checkpoint(TRUNCATE)`
        yield* start
        yield* takeLoop(s.claimOps)
        ops = s.claimOps
        break
      default:
        return yield* Effect.die(new Error(`alkstore-pq: unsupported workload ${workload}`))
    }
    const ms = performance.now() - t0
    const st = yield* raw.stats
    const live = st.pending + st.claimed + st.scheduled
    const expected = workload.startsWith("claim-")
      ? (workload === "claim-1m" ? s.claimLarge : s.claimSmall)
      : workload.startsWith("enqueue")
      ? s.enqueueJobs
      : 0
    if (live !== expected) return yield* Effect.die(new Error(`alkstore-pq: ${live} live jobs left, expected ${expected}`))
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

  return Effect.runPromise(program.pipe(Effect.provide(QueueLive), Effect.scoped))
}

export const contender: Contender = {
  name: "alkstore-pq",
  label: "PersistedQueue over alkstore (EffectStores)",
  packages: [
    "package.json",
    "node_modules/@effect/experimental/package.json",
    "node_modules/better-sqlite3/package.json",
    "node_modules/effect/package.json"
  ],
  supports: {
    "enqueue-1tx": true,
    "enqueue-100tx": true,
    "enqueue-batch100": "no batch offer API in PersistedQueue",
    "drain-1": true,
    "drain-1-process": "PersistedQueue has no worker runner: take(handler) is its consumer API (see drain-1)",
    "drain-batch100": true,
    "drain-batch100-read": "no batch claim without a handler in PersistedQueue (see drain-batch100)",
    "drain-stream100": "no stream API in PersistedQueue",
    "claim-1k": true,
    "claim-1m": true,
    "claim-dead100k": true,
    "memory-1m": "memory is measured for alkstore and raw only"
  },
  run
}
