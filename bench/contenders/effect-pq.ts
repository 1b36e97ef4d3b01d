/**
 * Peer: Effect's own durable queue — `SqlPersistedQueue` (@effect/sql) as the
 * store of `@effect/experimental/PersistedQueue`, on `@effect/sql-sqlite-node`'s
 * SqliteClient (the same client and better-sqlite3 build alkstore uses).
 * SqliteClient sets journal_mode=WAL itself; we add synchronous=NORMAL.
 *
 * API shape: `offer(value)` = one INSERT OR IGNORE (uuid id); `take(f)` asks a
 * per-queue poller for a row (one UPDATE … RETURNING … LIMIT <number of
 * waiting takers>), runs f, then marks the row completed (a second UPDATE;
 * completed rows are kept). There is no claim-without-handler and no batch
 * call, so "batched" here means 100 concurrent takers, which makes the poller
 * claim up to 100 rows in one statement.
 */
import type { Contender, RunContext, RunResult, WorkloadId } from "../workloads.js"
import { payload } from "../workloads.js"

const QUEUE = "bench"

const run = async (workload: WorkloadId, { file, sizes: s }: RunContext): Promise<RunResult> => {
  const { Effect, Layer, Schema } = await import("effect")
  const { SqlClient } = await import("@effect/sql")
  const SqlPersistedQueue = await import("@effect/sql/SqlPersistedQueue")
  const PersistedQueue = await import("@effect/experimental/PersistedQueue")
  const { SqliteClient } = await import("@effect/sql-sqlite-node")

  const SqlLive = SqliteClient.layer({ filename: file })
  const QueueLive = PersistedQueue.layer.pipe(
    Layer.provideMerge(SqlPersistedQueue.layerStore()),
    Layer.provideMerge(SqlLive)
  )

  const program = Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    yield* sql`PRAGMA synchronous = NORMAL`
    const q = yield* PersistedQueue.make({ name: QUEUE, schema: Schema.Unknown })
    const noop = () => Effect.void

    /**
     * Untimed preload straight into its table, in one SQL statement, with the
     * values offer() writes (uuid id, JSON element, CURRENT_TIMESTAMP). A row
     * with `completed = 0, attempts = 10` has used up take()'s default 10
     * attempts: dead.
     */
    const preload = (n: number, attempts = 0) =>
      sql`INSERT INTO effect_queue (id, queue_name, element, completed, attempts, created_at, updated_at)
          WITH RECURSIVE seq(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM seq WHERE i < ${n - 1}),
          u(i, h) AS (SELECT i, lower(hex(randomblob(16))) FROM seq)
          SELECT substr(h, 1, 8) || '-' || substr(h, 9, 4) || '-' || substr(h, 13, 4) || '-' || substr(h, 17, 4) || '-' || substr(h, 21, 12),
                 ${QUEUE}, json_object('n', i, 'to', 'user@example.com'), 0, ${attempts}, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP
          FROM u`
    const takeLoop = (ops: number) =>
      Effect.gen(function*() {
        for (let i = 0; i < ops; i++) yield* q.take(noop)
      })

    let t0 = 0
    let ops = 0
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
        if (workload === "claim-dead100k") yield* preload(s.deadRows, 10)
        yield* preload((workload === "claim-1m" ? s.claimLarge : s.claimSmall) + s.claimOps + s.warmupOps)
        yield* takeLoop(s.warmupOps)
        yield* sql`PRAGMA wal_checkpoint(TRUNCATE)`
        yield* start
        yield* takeLoop(s.claimOps)
        ops = s.claimOps
        break
      default:
        return yield* Effect.die(new Error(`effect-pq: unsupported workload ${workload}`))
    }
    const ms = performance.now() - t0
    if (workload.startsWith("drain")) {
      const c = (yield* sql<{ c: number }>`SELECT count(*) AS c FROM effect_queue WHERE completed = 0`)[0]!.c
      if (c !== 0) return yield* Effect.die(new Error(`effect-pq: ${c} jobs not completed`))
    }
    const jm = (yield* sql<{ journal_mode: string }>`PRAGMA journal_mode`)[0]!
    const sy = (yield* sql<{ synchronous: number }>`PRAGMA synchronous`)[0]!
    const v = (yield* sql<{ v: string }>`SELECT sqlite_version() AS v`)[0]!
    return {
      ops,
      ms,
      pragmas: { journal_mode: jm.journal_mode, synchronous: sy.synchronous },
      sqliteVersion: v.v
    } satisfies RunResult
  })

  return Effect.runPromise(program.pipe(Effect.provide(QueueLive), Effect.scoped))
}

export const contender: Contender = {
  name: "effect-pq",
  label: "@effect/sql SqlPersistedQueue",
  packages: [
    "node_modules/@effect/sql/package.json",
    "node_modules/@effect/experimental/package.json",
    "node_modules/@effect/sql-sqlite-node/package.json",
    "node_modules/effect/package.json"
  ],
  supports: {
    "enqueue-1tx": true,
    "enqueue-100tx": true,
    "enqueue-batch100": "no batch offer API",
    "drain-1": true,
    "drain-1-process": "no worker runner: take(handler) is its consumer API (see drain-1)",
    "drain-batch100": true,
    "drain-batch100-read": "no batch claim without a handler (see drain-batch100)",
    "drain-stream100": "no stream API",
    "claim-1k": true,
    "claim-1m": true,
    "claim-dead100k": true,
    "memory-1m": "memory is measured for alkstore and raw only"
  },
  run
}
