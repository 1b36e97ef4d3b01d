/**
 * Adversarial review of the code changed in 868dcd1 (ownOptions and where it is applied, outsideTransactions,
 * ackAll in its own module, importSqlite's filename check and setval). Each test failed on 868dcd1, before
 * its fix, because of a defect.
 */
import { describe, expect, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import { Cause, type Duration, Effect, Exit, Layer, Option, Redacted } from "effect"
import { PgStore, Queues, SqliteStore } from "../src/index.js"
import { pgDatabaseUrl } from "./contract/harness.js"

const memory = SqliteStore.layer({ filename: ":memory:" })

const outcome = (exit: Exit.Exit<unknown, unknown>) =>
  Exit.isSuccess(exit)
    ? "success"
    : Cause.isDie(exit.cause)
    ? `die: ${String(Cause.squash(exit.cause))}`
    : `fail: ${JSON.stringify(Cause.squash(exit.cause))}`

const boom = (): never => {
  throw new Error("boom")
}

describe("fresh code review 3", () => {
  // docs/contract.md §2: "An options object is read once, before anything is written: a getter that throws (an
  // accessor, a JS caller's Proxy) is `InvalidOptions` on `options`, never a defect." 868dcd1 reads setLimits'
  // argument through `ownOptions` (src/internal/limits.ts:29) — a shallow copy — but `checkLimits`
  // (src/internal/options.ts, `checkRate`) then reads the nested `rate` / `groupRate` objects' `limit` and `per`
  // in place, outside any try: a throwing getter there escapes as a defect.
  it.effect("setLimits: a throwing getter in a nested rate is InvalidOptions, never a defect", () =>
    Effect.gen(function*() {
      const queues = yield* Queues.Queues
      const rate = yield* Effect.exit(queues.setLimits("q", { rate: { get limit(): number { return boom() }, per: "1 second" } }))
      const groupRate = yield* Effect.exit(
        queues.setLimits("q", { groupRate: { limit: 1, get per(): Duration.DurationInput { return boom() } } })
      )
      // observed: "die: Error: boom" for both
      expect(outcome(rate)).toMatch(/^fail: .*InvalidOptions/)
      expect(outcome(groupRate)).toMatch(/^fail: .*InvalidOptions/)
      // Nothing was set.
      expect(yield* queues.limits("q")).toEqual(Option.none())
    }).pipe(Effect.provide(memory)))

  // docs/decisions.md (`ackAll(handles)`): "a handle of another queue is `InvalidOptions { field: "handles" }`
  // before anything is written". `makeAckAll` (src/internal/ackAll.ts) tells a handle of this queue by its
  // `queueName` alone: a claim handle of another store's queue of the same name (two stores open at once, e.g. a
  // migration) passes, and its fence `{ id, token }` — ids and first tokens start alike in every store — acks
  // this store's job, claimed by another worker that never finished it (lost work).
  it.effect("ackAll refuses a handle claimed from another store's queue of the same name", () =>
    Effect.gen(function*() {
      const a = yield* Layer.build(SqliteStore.layer({ filename: ":memory:" }))
      const b = yield* Layer.build(SqliteStore.layer({ filename: ":memory:" }))
      const queueIn = (ctx: typeof a) => Effect.provide(Effect.flatMap(Queues.Queues, (q) => q.queue("q")), ctx)
      const qa = yield* queueIn(a)
      const qb = yield* queueIn(b)
      yield* Effect.provide(qa.enqueue({ store: "a" }), a)
      yield* Effect.provide(qb.enqueue({ store: "b" }), b)
      const handleA = Option.getOrThrow(yield* Effect.provide(qa.claim("worker-a"), a))
      const handleB = Option.getOrThrow(yield* Effect.provide(qb.claim("worker-b"), b))
      const acked = yield* Effect.exit(Effect.provide(qa.ackAll([handleB]), a))
      // observed: Success([true]): store a's job, held by worker-a, was acked (deleted) by store b's handle
      expect(Exit.isSuccess(acked) ? JSON.stringify(acked.value) : outcome(acked)).toMatch(/^fail: (?=.*InvalidOptions)(?=.*"handles")/)
      expect(yield* Effect.provide(qa.stats, a)).toMatchObject({ claimed: 1 })
      expect(yield* Effect.provide(handleA.ack, a)).toBe(true)
    }).pipe(Effect.scoped))

  // src/PgStore.ts: `PgStoreOptions extends StoreSettings, PgClient.PgClientConfig` — the client's settings,
  // `transformQueryNames` included, are the layer's. Before 868dcd1 `PgStore.layer` handed the options object to
  // `PgClient.make` as given; now it hands over `ownOptions`' copy (src/internal/pg/store.ts:265), which on
  // purpose leaves out "its class's methods" (src/internal/options.ts). A settings class implementing
  // `PgStoreOptions` with a `transformQueryNames(name)` method — how a class provides a function-valued setting —
  // silently loses it: the application's SqlClient (the layer's) no longer transforms its names.
  it.live("PgStore.layer keeps a transformQueryNames given as a method of the options' class", () =>
    Effect.gen(function*() {
      const base = yield* Effect.promise(pgDatabaseUrl)
      class Settings {
        readonly url = Redacted.make(base)
        readonly schema = `fresh3_${process.pid}_transform`
        readonly fallbackPoll = "1 hour"
        transformQueryNames(name: string) {
          return name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`)
        }
      }
      const rows = yield* Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT 1 AS ${sql("fooBar")}`).pipe(
        Effect.provide(PgStore.layer(new Settings()))
      )
      // observed: [{ fooBar: 1 }] (a plain object's transformQueryNames gives [{ foo_bar: 1 }])
      expect(rows).toEqual([{ foo_bar: 1 }])
    }))
})
