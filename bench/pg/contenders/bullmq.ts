/**
 * BullMQ 6 on its PostgreSQL backend (`createPostgresBackend`, bound with
 * `withBackend`): the same `Queue` / `Worker` classes as on Redis, over a
 * `pg` pool plus one LISTEN connection per backend.
 */
import type { PgContender, Session } from "../workloads.js"
import { payload, QUEUE, range, supportsAll } from "../workloads.js"

const classes = async () => {
  const bq = await import("bullmq")
  return bq.withBackend(bq.createPostgresBackend)
}

const LIVE_TYPES = ["waiting", "active", "delayed", "prioritized", "waiting-children"] as const

const open = async (url: string): Promise<Session> => {
  const { Queue, Worker } = await classes()
  const queue = new Queue<{ n: number; to: string }>(QUEUE, { connection: url })
  await queue.waitUntilReady()
  return {
    enqueue: async (n) => {
      await queue.add("job", payload(n))
    },
    enqueueInTx: async () => {
      throw new Error("bullmq-pg: no enqueue in a caller's transaction")
    },
    enqueueBatch: async (ns) => {
      await queue.addBulk(ns.map((n) => ({ name: "job", data: payload(n) })))
    },
    preload: async (count, from) => {
      for (let i = 0; i < count; i += 1_000) {
        await queue.addBulk(range(Math.min(1_000, count - i), from + i).map((n) => ({ name: "job", data: payload(n) })))
      }
    },
    startWorker: async (onJob) => {
      const worker = new Worker<{ n: number }>(QUEUE, async (job) => {
        onJob(job.data.n)
      }, { connection: url, concurrency: 1 })
      worker.on("error", (e) => console.error("bullmq worker:", e))
      await worker.waitUntilReady()
      return () => worker.close()
    },
    live: () => queue.getJobCountByTypes(...LIVE_TYPES),
    close: () => queue.close()
  }
}

export const contender: PgContender = {
  name: "bullmq-pg",
  label: "BullMQ (PostgreSQL)",
  packages: ["bench/node_modules/bullmq/package.json"],
  supports: supportsAll({
    "enqueue-100tx": "no enqueue inside a caller's transaction (its PostgreSQL backend owns its connections); its batch call is the batch row",
    "claim-1k": "no claim API outside its Worker class",
    "claim-1m": "no claim API outside its Worker class"
  }),
  setup: async (url) => {
    const { default: pg } = await import("pg")
    const { runMigrations } = await import("bullmq")
    const c = new pg.Client({ connectionString: url })
    await c.connect()
    try {
      await runMigrations(c)
    } finally {
      await c.end()
    }
  },
  open,
  notes: [
    "`withBackend(createPostgresBackend)`, connection = the database URL (its own `pg` pool and LISTEN connection), schema migrated once with `runMigrations`; default job options (completed jobs are kept)",
    "enqueue = `Queue.add`; no enqueue in a caller's transaction (its backend takes no caller connection), so no 100 / tx row; batch = `Queue.addBulk` of 100 (one statement)",
    "worker = `new Worker(queue, handler, { concurrency: 1 })`, woken by its LISTEN/NOTIFY; preload = `addBulk` in chunks of 1,000"
  ]
}
