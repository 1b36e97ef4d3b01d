/**
 * The Effect floor on PostgreSQL (not a peer: a reference, as raw-effect is
 * on SQLite): the raw baseline's own table, connection and named enqueue
 * statement (contenders/raw.ts), each call one `ManagedRuntime.runPromise` of
 * an `Effect.promise` around the driver's query — what the harness pays to
 * call any library with an Effect API, before the library does anything.
 * Its ratio to raw bounds what such a library (alkstore's PgStore is one)
 * can reach on the per-call enqueue rows. Only those rows are measured.
 */
import type { PgContender, Session } from "../workloads.js"
import { payload, QUEUE, supportsAll } from "../workloads.js"
import { contender as raw, INSERT_TEXT } from "./raw.js"

const open = async (url: string): Promise<Session> => {
  const { Effect, Layer, ManagedRuntime } = await import("effect")
  const { default: pgm } = await import("pg")
  const c = new pgm.Client({ connectionString: url })
  await c.connect()
  const rt = ManagedRuntime.make(Layer.empty)
  const statement = { name: "raw_insert", text: INSERT_TEXT }
  const insert = (n: number) => Effect.promise(() => c.query({ ...statement, values: [QUEUE, JSON.stringify(payload(n))] }))
  const unsupported = () => Promise.reject(new Error("effect-floor-pg measures the enqueue rows only"))
  return {
    enqueue: async (n) => {
      await rt.runPromise(insert(n))
    },
    enqueueInTx: async (ns) => {
      await rt.runPromise(Effect.acquireUseRelease(
        Effect.promise(() => c.query("BEGIN")),
        () => Effect.forEach(ns, insert, { discard: true }),
        (_, exit) => Effect.promise(() => c.query(exit._tag === "Success" ? "COMMIT" : "ROLLBACK"))
      ))
    },
    enqueueBatch: unsupported,
    preload: unsupported,
    startWorker: unsupported,
    live: async () => Number((await c.query<{ c: string }>("SELECT count(*) AS c FROM jobs")).rows[0]!.c),
    close: async () => {
      await rt.dispose()
      await c.end()
    }
  }
}

const ENQUEUE_ONLY = "a reference for the per-call enqueue rows only"

export const contender: PgContender = {
  name: "effect-floor-pg",
  label: "Effect floor (runPromise + raw pg)",
  packages: ["node_modules/effect/package.json", "bench/node_modules/pg/package.json"],
  supports: supportsAll({
    "enqueue-batch100": ENQUEUE_ONLY,
    "drain-1": ENQUEUE_ONLY,
    "drain-4": ENQUEUE_ONLY,
    "wake-inprocess": ENQUEUE_ONLY,
    "wake-crossprocess": ENQUEUE_ONLY,
    "claim-1k": ENQUEUE_ONLY,
    "claim-1m": ENQUEUE_ONLY
  }),
  reference: true,
  setup: raw.setup,
  open,
  notes: [
    "not a peer: raw's table, connection and named enqueue statement, each call one `ManagedRuntime.runPromise(Effect.promise(query))` — the tax of calling through Effect at all, which bounds any library with an Effect API on the per-call rows"
  ]
}
