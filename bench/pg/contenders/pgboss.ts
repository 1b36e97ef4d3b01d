/**
 * pg-boss 12 through its public API. The queue is created with
 * `notify: true` and the instance with `useListenNotify: true`, so an idle
 * worker is woken by NOTIFY rather than its ≥ 0.5 s poll.
 */
import type { PgContender, Session } from "../workloads.js"
import { payload, QUEUE, range, supportsAll } from "../workloads.js"

const options = (url: string) => ({
  connectionString: url,
  useListenNotify: true,
  // the bench measures queue operations, not pg-boss's cron/maintenance timers
  schedule: false,
  max: 4
})

const open = async (url: string): Promise<Session> => {
  const { PgBoss } = await import("pg-boss")
  const boss = new PgBoss(options(url))
  boss.on("error", (e) => console.error("pg-boss:", e))
  await boss.start()
  const { default: pg } = await import("pg")
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  const db = { executeSql: (text: string, values?: Array<unknown>) => client.query(text, values) }

  const drainLoop = (onJob: (n: number) => void) => {
    let stopping = false
    const loop = (async () => {
      while (!stopping) {
        const [job] = await boss.fetch<{ n: number }>(QUEUE)
        if (!job) {
          await new Promise((r) => setTimeout(r, 5))
          continue
        }
        onJob(job.data.n)
        await boss.complete(QUEUE, job.id)
      }
    })()
    return async () => {
      stopping = true
      await loop
    }
  }

  return {
    enqueue: async (n) => {
      await boss.send(QUEUE, payload(n))
    },
    enqueueInTx: async (ns) => {
      await client.query("BEGIN")
      for (const n of ns) await boss.send(QUEUE, payload(n), { db })
      await client.query("COMMIT")
    },
    enqueueBatch: async (ns) => {
      await boss.insert(QUEUE, ns.map((n) => ({ data: payload(n) })))
    },
    preload: async (count, from) => {
      for (let i = 0; i < count; i += 5_000) {
        await boss.insert(QUEUE, range(Math.min(5_000, count - i), from + i).map((n) => ({ data: payload(n) })))
      }
    },
    startWorker: async (onJob, purpose) => {
      if (purpose === "drain") return drainLoop(onJob)
      const id = await boss.work<{ n: number }>(QUEUE, { batchSize: 1 }, async ([job]) => {
        onJob(job!.data.n)
      })
      return async () => {
        await boss.offWork(QUEUE, { id, wait: true })
      }
    },
    claimAck: async () => {
      const [job] = await boss.fetch<{ n: number }>(QUEUE)
      if (!job) return false
      await boss.complete(QUEUE, job.id)
      return true
    },
    live: async () =>
      Number(
        (await client.query<{ c: string }>(
          "SELECT count(*) AS c FROM pgboss.job WHERE name = $1 AND state IN ('created', 'retry', 'active')",
          [QUEUE]
        )).rows[0]!.c
      ),
    close: async () => {
      await boss.stop({ graceful: false })
      await client.end()
    }
  }
}

export const contender: PgContender = {
  name: "pg-boss",
  label: "pg-boss",
  packages: ["bench/node_modules/pg-boss/package.json"],
  supports: supportsAll(),
  setup: async (url) => {
    const { PgBoss } = await import("pg-boss")
    const boss = new PgBoss(options(url))
    await boss.start()
    await boss.createQueue(QUEUE, { notify: true })
    await boss.stop({ graceful: false })
  },
  open,
  notes: [
    "its package.json asks for Node ≥ 22.12 (npm warns on Node 20); everything the bench calls runs on Node 20; its peer `@opentelemetry/api` is installed for it",
    "instance `useListenNotify: true`, `schedule: false` (no cron timers), pool `max: 4`; queue created with `notify: true`; default policy and retention (completed jobs stay in `pgboss.job` until its maintenance deletes them)",
    "enqueue = `send`; 100 / tx = `send(…, { db })` with an adapter over a `pg` client inside `BEGIN` … `COMMIT` (its documented way to enqueue in the caller's transaction)",
    "drain = a `fetch()` → handler → `complete()` loop: its `work()` worker with `batchSize: 1` waits its polling interval (≥ 0.5 s) after every job unless a NOTIFY arrives (and a preloaded backlog sends none), so one job at a time only runs as a pull loop",
    "latency rows = `work(queue, { batchSize: 1 })`, woken by its LISTEN/NOTIFY listener",
    "claim rows = `fetch()` + `complete()`; batch = `insert()` of 100; preload = `insert()` in chunks of 5,000"
  ]
}
