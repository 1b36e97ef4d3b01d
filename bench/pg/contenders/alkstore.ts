/**
 * alkstore on PostgreSQL through its public API (src/index.ts):
 * `PgStore.layer({ url })` with default settings, the same Queue API as the
 * SQLite engine. One ManagedRuntime per process; each call the harness makes
 * is one `runPromise` of one public operation.
 */
import type { PgContender, Session } from "../workloads.js"
import { payload, QUEUE, range, supportsAll } from "../workloads.js"

const WORKER = `w${process.pid}`

const runtime = async (url: string) => {
  const effect = await import("effect")
  const { SqlClient } = await import("@effect/sql")
  const { PgStore, Queues } = await import("../../../src/index.js")
  const layer = PgStore.layer({ url: effect.Redacted.make(url) })
  const rt = effect.ManagedRuntime.make(layer)
  const [q, sql] = await rt.runPromise(
    effect.Effect.all([effect.Effect.flatMap(Queues.Queues, (s) => s.queue(QUEUE)), SqlClient.SqlClient])
  )
  /** runPromise, with a failure's underlying cause (e.g. the driver's error under an SqlError) in the message */
  const run = async <A, E>(eff: import("effect").Effect.Effect<A, E, never>): Promise<A> => {
    const exit = await rt.runPromiseExit(eff)
    if (effect.Exit.isSuccess(exit)) return exit.value
    const e = effect.Cause.squash(exit.cause) as { message?: string; cause?: unknown }
    throw new Error(`${e.message ?? String(e)}${e.cause !== undefined ? `: ${String(e.cause)}` : ""}`)
  }
  return { ...effect, rt, run, q, sql }
}

const open = async (url: string): Promise<Session> => {
  const { Effect, Fiber, Option, rt, run, q, sql } = await runtime(url)
  return {
    enqueue: async (n) => {
      await run(q.enqueue(payload(n)))
    },
    enqueueInTx: async (ns) => {
      await run(sql.withTransaction(Effect.forEach(ns, (n) => q.enqueue(payload(n)), { discard: true })))
    },
    enqueueBatch: async (ns) => {
      await run(q.enqueueBatch(ns.map(payload)))
    },
    preload: async (count, from) => {
      for (let i = 0; i < count; i += 5_000) {
        await run(q.enqueueBatch(range(Math.min(5_000, count - i), from + i).map(payload)))
      }
    },
    startWorker: async (onJob) => {
      const fiber = rt.runFork(
        q.process(WORKER, (job) => Effect.sync(() => onJob((job.payload as { n: number }).n)), { concurrency: 1 })
      )
      return async () => {
        await rt.runPromise(Fiber.interrupt(fiber))
      }
    },
    claimAck: async () =>
      run(Effect.gen(function*() {
        const h = yield* q.claim(WORKER)
        if (Option.isNone(h)) return false
        yield* h.value.ack
        return true
      })),
    live: async () => {
      const st = await run(q.stats)
      return st.pending + st.claimed + st.scheduled
    },
    close: () => rt.dispose()
  }
}

export const contender: PgContender = {
  name: "alkstore-pg",
  label: "alkstore (PgStore)",
  packages: ["package.json", "node_modules/@effect/sql-pg/package.json", "node_modules/effect/package.json"],
  supports: supportsAll(),
  setup: async (url) => {
    // providing the layer once migrates the schema (untimed)
    const { rt } = await runtime(url)
    await rt.dispose()
  },
  open,
  notes: [
    "`PgStore.layer({ url })` with default settings (its pool, one LISTEN connection per process, the database clock); one `ManagedRuntime` per process",
    "enqueue = `queue.enqueue`; 100 / tx = 100 `enqueue` calls inside `sql.withTransaction`; batch = `enqueueBatch` of 100; preload = `enqueueBatch` of 5,000",
    "worker = `queue.process(worker, handler, { concurrency: 1 })`; claim rows = `claim` + `ack`; live = `stats` (pending + claimed + scheduled)"
  ]
}
