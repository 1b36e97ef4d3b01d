/**
 * graphile-worker 0.18 through its public API: `makeWorkerUtils` to enqueue,
 * `run` (concurrency 1, one task) as the worker. Enqueue in the caller's
 * transaction is its SQL API, `graphile_worker.add_job(…)`, on the caller's
 * connection.
 */
import type { PgContender, Session } from "../workloads.js"
import { payload, QUEUE, range, supportsAll } from "../workloads.js"

const quiet = async () => {
  const { Logger } = await import("graphile-worker")
  return new Logger(() => () => {})
}

const open = async (url: string): Promise<Session> => {
  const gw = await import("graphile-worker")
  const logger = await quiet()
  const utils = await gw.makeWorkerUtils({ connectionString: url, logger })
  const { default: pg } = await import("pg")
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  return {
    enqueue: async (n) => {
      await utils.addJob(QUEUE, payload(n))
    },
    enqueueInTx: async (ns) => {
      await client.query("BEGIN")
      for (const n of ns) {
        await client.query({
          name: "gw_add_job",
          text: "SELECT graphile_worker.add_job($1, $2::json)",
          values: [QUEUE, JSON.stringify(payload(n))]
        })
      }
      await client.query("COMMIT")
    },
    enqueueBatch: async (ns) => {
      await utils.addJobs(ns.map((n) => ({ identifier: QUEUE, payload: payload(n) })))
    },
    preload: async (count, from) => {
      for (let i = 0; i < count; i += 5_000) {
        await utils.addJobs(range(Math.min(5_000, count - i), from + i).map((n) => ({
          identifier: QUEUE,
          payload: payload(n)
        })))
      }
    },
    startWorker: async (onJob) => {
      const runner = await gw.run({
        connectionString: url,
        concurrency: 1,
        noHandleSignals: true,
        logger,
        taskList: {
          [QUEUE]: async (p) => {
            onJob((p as { n: number }).n)
          }
        }
      })
      return () => runner.stop()
    },
    live: async () =>
      Number((await client.query<{ c: string }>("SELECT count(*) AS c FROM graphile_worker.jobs")).rows[0]!.c),
    close: async () => {
      await utils.release()
      await client.end()
    }
  }
}

export const contender: PgContender = {
  name: "graphile-worker",
  label: "graphile-worker",
  packages: ["bench/node_modules/graphile-worker/package.json"],
  supports: supportsAll({
    "claim-1k": "no claim API outside its worker (jobs are fetched by the runner only)",
    "claim-1m": "no claim API outside its worker (jobs are fetched by the runner only)"
  }),
  setup: async (url) => {
    const gw = await import("graphile-worker")
    await gw.runMigrations({ connectionString: url, logger: await quiet() })
  },
  open,
  notes: [
    "its package.json asks for Node ≥ 22.18 (npm warns on Node 20); everything the bench calls runs on Node 20",
    "enqueue = `WorkerUtils.addJob`; 100 / tx = `SELECT graphile_worker.add_job($1, $2::json)` on a `pg` client inside `BEGIN` … `COMMIT` (its documented way to enqueue in the caller's transaction)",
    "worker = `run({ concurrency: 1, taskList })` with defaults otherwise (pool of 10, `pollInterval` 2 s, woken by its LISTEN/NOTIFY on `jobs:insert`); completed jobs are deleted",
    "batch = `WorkerUtils.addJobs` of 100; preload = `addJobs` in chunks of 5,000"
  ]
}
