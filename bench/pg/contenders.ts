/**
 * PostgreSQL contenders of `npm run bench` (bench/pg/run.ts): alkstore's
 * PgStore, pg-boss 12, graphile-worker 0.18 and a raw-SQL `pg` baseline (a
 * minimal table, a SKIP LOCKED claim then a delete: the same work, no
 * library). Each gets a fresh database; each workload is timed around its
 * work only.
 */
import { Effect, Exit, Layer, Option, Redacted, Scope } from "effect"
import Pg from "pg"
import { PgStore, Queues } from "../../src/index.js"

export interface PgContender {
  readonly name: string
  /** Enqueues `n` jobs, `perTx` per transaction (1 = one per transaction). */
  readonly enqueue: (n: number, perTx: number) => Promise<void>
  /** Drains `n` pending jobs with one worker (claim, handle (no-op), complete). */
  readonly drain: (n: number) => Promise<void>
  readonly close: () => Promise<void>
}

const payload = (i: number) => ({ i, to: "user@example.com" })

export const raw = async (url: string): Promise<PgContender> => {
  const pool = new Pg.Pool({ connectionString: url, max: 4 })
  await pool.query(`CREATE TABLE raw_jobs (id bigserial PRIMARY KEY, payload json NOT NULL,
    state text NOT NULL DEFAULT 'pending', locked_until bigint)`)
  await pool.query(`CREATE INDEX raw_jobs_pending ON raw_jobs (id) WHERE state = 'pending'`)
  return {
    name: "raw pg (SKIP LOCKED)",
    enqueue: async (n, perTx) => {
      if (perTx === 1) {
        for (let i = 0; i < n; i++) await pool.query(`INSERT INTO raw_jobs (payload) VALUES ($1)`, [JSON.stringify(payload(i))])
        return
      }
      for (let i = 0; i < n; i += perTx) {
        const batch = Array.from({ length: Math.min(perTx, n - i) }, (_, k) => JSON.stringify(payload(i + k)))
        await pool.query(`INSERT INTO raw_jobs (payload) SELECT p::json FROM unnest($1::text[]) AS p`, [batch])
      }
    },
    drain: async (n) => {
      let done = 0
      while (done < n) {
        const { rows } = await pool.query(`UPDATE raw_jobs SET state = 'claimed', locked_until = $1 WHERE id = (
          SELECT id FROM raw_jobs WHERE state = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, payload`,
          [Date.now() + 30_000])
        if (rows.length === 0) throw new Error("raw: ran dry")
        await pool.query(`DELETE FROM raw_jobs WHERE id = $1 AND state = 'claimed'`, [rows[0].id])
        done++
      }
    },
    close: () => pool.end()
  }
}

export const alkstore = async (url: string): Promise<PgContender> => {
  const scope = Effect.runSync(Scope.make())
  const context = await Effect.runPromise(
    Layer.buildWithScope(PgStore.layer({ url: Redacted.make(url), maxConnections: 4 }), scope)
  )
  const close = () => Effect.runPromise(Scope.close(scope, Exit.void))
  const run = <A, E>(effect: Effect.Effect<A, E, Queues.Queues>) => Effect.runPromise(Effect.provide(effect, context))
  const queue = await run(Effect.flatMap(Queues.Queues, (q) => q.queue("bench")))
  return {
    name: "alkstore PgStore",
    enqueue: (n, perTx) =>
      run(perTx === 1
        ? Effect.forEach(Array.from({ length: n }, (_, i) => i), (i) => queue.enqueue(payload(i)), { discard: true })
        : Effect.forEach(
          Array.from({ length: Math.ceil(n / perTx) }, (_, b) => b),
          (b) => queue.enqueueBatch(Array.from({ length: Math.min(perTx, n - b * perTx) }, (_, k) => payload(b * perTx + k))),
          { discard: true }
        )),
    drain: (n) =>
      run(Effect.gen(function*() {
        for (let done = 0; done < n; done++) {
          const handle = yield* queue.claim("bench")
          if (Option.isNone(handle)) return yield* Effect.die(new Error("alkstore: ran dry"))
          yield* handle.value.ack
        }
      })),
    close
  }
}

export const pgBoss = async (url: string): Promise<PgContender> => {
  const { PgBoss } = (await import("pg-boss")) as unknown as { PgBoss: new (url: string) => any }
  const boss = new PgBoss(url)
  boss.on("error", () => {})
  await boss.start()
  await boss.createQueue("bench")
  return {
    name: "pg-boss 12",
    enqueue: async (n, perTx) => {
      if (perTx === 1) {
        for (let i = 0; i < n; i++) await boss.send("bench", payload(i))
        return
      }
      for (let i = 0; i < n; i += perTx) {
        await boss.insert("bench", Array.from({ length: Math.min(perTx, n - i) }, (_, k) => ({ data: payload(i + k) })))
      }
    },
    drain: async (n) => {
      let done = 0
      while (done < n) {
        const jobs = await boss.fetch("bench")
        if (jobs.length === 0) throw new Error("pg-boss: ran dry")
        await boss.complete("bench", jobs[0].id)
        done++
      }
    },
    close: () => boss.stop({ graceful: false, wait: true })
  }
}

export const graphileWorker = async (url: string): Promise<PgContender> => {
  const gw = (await import("graphile-worker")) as any
  const utils = await gw.makeWorkerUtils({ connectionString: url })
  await utils.migrate()
  return {
    name: "graphile-worker 0.18",
    enqueue: async (n, perTx) => {
      if (perTx === 1) {
        for (let i = 0; i < n; i++) await utils.addJob("bench", payload(i))
        return
      }
      for (let i = 0; i < n; i += perTx) {
        await utils.addJobs(Array.from({ length: Math.min(perTx, n - i) }, (_, k) => ({ identifier: "bench", payload: payload(i + k) })))
      }
    },
    drain: async (n) => {
      let done = 0
      let finish: () => void = () => {}
      const finished = new Promise<void>((resolve) => (finish = resolve))
      const runner = await gw.run({
        connectionString: url,
        concurrency: 1,
        noHandleSignals: true,
        pollInterval: 1000,
        taskList: {
          bench: async () => {
            if (++done >= n) finish()
          }
        },
        logger: new gw.Logger(() => () => {})
      })
      await finished
      await runner.stop()
    },
    close: () => utils.release()
  }
}

export const contenders: ReadonlyArray<readonly [string, (url: string) => Promise<PgContender>]> = [
  ["raw", raw],
  ["alkstore", alkstore],
  ["pg-boss", pgBoss],
  ["graphile-worker", graphileWorker]
]
