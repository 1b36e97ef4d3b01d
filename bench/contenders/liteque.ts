/**
 * Peer: liteque (npm). It is isolated in bench/peers/liteque/ with its own
 * better-sqlite3 11.9: on better-sqlite3 12 (the root one) its dequeue throws
 * "Transaction function cannot return a promise" (it passes an async callback
 * to drizzle's better-sqlite3 transaction). buildDBClient sets
 * journal_mode=WAL and synchronous=NORMAL (plus cache_size=-65536,
 * temp_store=MEMORY, foreign_keys=ON).
 */
import type { Contender, RunContext, RunResult, WorkloadId } from "../workloads.js"
import { payload } from "../workloads.js"

const PEER_DIR = new URL("../peers/liteque/", import.meta.url)
const QUEUE = "bench"

interface LitequeModule {
  buildDBClient: (path: string, opts?: { runMigrations?: boolean }) => any
  SqliteQueue: new (name: string, db: any, opts: any) => any
  Runner: new (queue: any, funcs: any, opts: any) => any
}

const run = async (workload: WorkloadId, { file, sizes: s }: RunContext): Promise<RunResult> => {
  const lq = (await import(new URL("node_modules/liteque/dist/index.js", PEER_DIR).href)) as LitequeModule
  const db = lq.buildDBClient(file, { runMigrations: true })
  const client = db.session.client // the better-sqlite3 Database behind drizzle
  const queue = new lq.SqliteQueue(QUEUE, db, { defaultJobArgs: { numRetries: 2 }, keepFailedJobs: true })
  const notes: Array<string> = []

  /**
   * Untimed preload straight into liteque's table, in one SQL statement, with the
   * column values SqliteQueue.enqueue writes (JSON payload, createdAt in seconds,
   * availableAt in ms, a random allocationId, 3 runs). Its enqueue is one awaited
   * drizzle insert per job with no batch API; 1M of those would eat the time budget.
   */
  const preload = (n: number, status = "pending", from = 0) => {
    const now = Date.now()
    client
      .prepare(
        `INSERT INTO tasks (queue, payload, createdAt, availableAt, status, allocationId, numRunsLeft, maxNumRuns, priority)
         WITH RECURSIVE seq(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM seq WHERE i < ?)
         SELECT ?, json_object('n', i, 'to', 'user@example.com'), ?, ?, ?, lower(hex(randomblob(6))), 3, 3, 0 FROM seq`
      )
      .run(from, from + n - 1, QUEUE, Math.floor(now / 1000), now, status)
  }
  const claimAck = async (ops: number) => {
    for (let i = 0; i < ops; i++) {
      const job = await queue.attemptDequeue({ timeoutSecs: 300 })
      if (!job) throw new Error(`liteque: queue empty after ${i}`)
      JSON.parse(job.payload)
      await queue.finalize(job.id, job.allocationId, "completed")
    }
  }

  let t0 = 0
  let ops = 0
  const start = () => (t0 = performance.now())
  switch (workload) {
    case "enqueue-1tx":
      start()
      for (let i = 0; i < s.enqueueJobs; i++) await queue.enqueue(payload(i))
      ops = s.enqueueJobs
      break
    case "enqueue-100tx":
      // no transaction API of its own: BEGIN/COMMIT on the connection it shares with the app
      start()
      for (let i = 0; i < s.enqueueJobs; i += s.batch) {
        client.exec("BEGIN IMMEDIATE")
        for (let j = i; j < Math.min(i + s.batch, s.enqueueJobs); j++) await queue.enqueue(payload(j))
        client.exec("COMMIT")
      }
      ops = s.enqueueJobs
      break
    case "drain-1":
      preload(s.drainJobs)
      start()
      await claimAck(s.drainJobs)
      ops = s.drainJobs
      break
    case "drain-1-process": {
      preload(s.drainJobs)
      const runner = new lq.Runner(queue, { run: async () => {} }, { concurrency: 1, pollIntervalMs: 10, timeoutSecs: 300 })
      start()
      await runner.runUntilEmpty()
      ops = s.drainJobs
      break
    }
    case "claim-1k":
    case "claim-1m":
    case "claim-dead100k": {
      if (workload === "claim-dead100k") preload(s.deadRows, "failed")
      preload((workload === "claim-1m" ? s.claimLarge : s.claimSmall) + s.claimOps + s.warmupOps)
      await claimAck(s.warmupOps)
      client.exec("PRAGMA wal_checkpoint(TRUNCATE)")
      start()
      await claimAck(s.claimOps)
      ops = s.claimOps
      break
    }
    default:
      throw new Error(`liteque: unsupported workload ${workload}`)
  }
  const ms = performance.now() - t0
  if (workload.startsWith("drain")) {
    const left = client.prepare("SELECT count(*) AS c FROM tasks WHERE status != 'failed'").get().c
    if (left !== 0) throw new Error(`liteque: ${left} jobs left`)
  }
  const pragmas = {
    journal_mode: String(client.pragma("journal_mode", { simple: true })),
    synchronous: Number(client.pragma("synchronous", { simple: true }))
  }
  const sqliteVersion = client.prepare("SELECT sqlite_version() AS v").get().v as string
  client.close()
  return { ops, ms, pragmas, sqliteVersion, notes }
}

export const contender: Contender = {
  name: "liteque",
  label: "liteque",
  packages: [
    "bench/peers/liteque/node_modules/liteque/package.json",
    "bench/peers/liteque/node_modules/better-sqlite3/package.json",
    "bench/peers/liteque/node_modules/drizzle-orm/package.json"
  ],
  supports: {
    "enqueue-1tx": true,
    "enqueue-100tx": true,
    "enqueue-batch100": "no batch enqueue API",
    "drain-1": true,
    "drain-1-process": true,
    "drain-batch100": "no batch claim: attemptDequeue claims exactly one job",
    "drain-batch100-read": "no batch claim: attemptDequeue claims exactly one job",
    "drain-stream100": "no stream / batch consumer API",
    "claim-1k": true,
    "claim-1m": true,
    "claim-dead100k": true,
    "memory-1m": "memory is measured for alkstore and raw only"
  },
  run
}
