/**
 * Review of bad input on the public entry points (CONTRACT §2 "Names and errors", docs/contract.md §2): every
 * test here failed on the code it was written against, each for a defect of its own.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Option } from "effect"
import * as fs from "node:fs"
import { Admin, EffectStores, Locks, Outbox, PgStore, Queues, Scheduler, SqliteStore } from "../src/index.js"
import { freshFile, pgOwned, sqliteOwned } from "./contract/harness.js"
import { jobCount, lockCount, type StoreServices } from "./contract/support.js"
import { outcome } from "./support/outcome.js"


/** A job's state and attempts as stored (`"absent"` once gone). */
const jobState = (queue: Queues.Queue<unknown>, id: number) =>
  Effect.map(queue.getJob(id), Option.match({ onNone: () => "absent", onSome: (job) => `${job.state}/${job.attempts}` }))

for (const engine of [sqliteOwned, pgOwned]) {
  describe(`bad input review — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    // Queues.ts TSDoc of `ackAll`: "A handle claimed from another queue is an `InvalidOptions` (`"handles"`), and
    // nothing is acked." CONTRACT §2: "No mechanism throws". Anything that is not a claim handle of this queue
    // (a `Job` handed over instead of its handle, `{}`, `null`, a non-iterable, an iterable that throws) died
    // with a TypeError instead: src/internal/queue.ts builds the InvalidOptions' reason from `handle.job.id`,
    // which is what throws for every value that is not a handle.
    it.live("ackAll given anything but this queue's claim handles is InvalidOptions on handles, never a defect", () =>
      run(Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("ack-bad")
        const id = yield* queue.enqueue({ n: 1 })
        const handle = Option.getOrThrow(yield* queue.claim("w"))
        function* throwing() {
          yield handle
          throw new Error("the handle source failed")
        }
        const attempts: ReadonlyArray<readonly [string, () => Effect.Effect<unknown, unknown>]> = [
          ["a Job instead of its handle", () => queue.ackAll([handle.job as never])],
          ["{}", () => queue.ackAll([{} as never])],
          ["null element", () => queue.ackAll([null as never])],
          ["a handle and a Job", () => queue.ackAll([handle, handle.job as never])],
          ["null", () => queue.ackAll(null as never)],
          ["a throwing iterable", () => queue.ackAll(throwing())]
        ]
        const outcomes: Record<string, string> = {}
        for (const [label, attempt] of attempts) outcomes[label] = yield* outcome(attempt)
        expect({ outcomes, job: yield* jobState(queue, id) }).toEqual({
          outcomes: Object.fromEntries(attempts.map(([label]) => [label, "InvalidOptions:handles"])),
          job: "claimed/1"
        })
      })))

    // docs/contract.md §2: "Options given as `null` are no options." (docs/decisions.md: "`null` as an options
    // object | No options … | It died with a `TypeError`.") Admin.jobs(null), Locks.acquire(name, null) and
    // EffectStores.makePersistedQueueStore(null) still die reading a field of null (`filter = {}` and
    // `options = {}` defaults cover `undefined` only; `acquire` reads `opts.ttl`); PgStore.importSqlite(null)
    // throws out of the call itself (`options.schema` read before any Effect exists).
    it.live("null as the options object of Admin.jobs, Locks.acquire and makePersistedQueueStore is no options, never a defect", () =>
      run(Effect.gen(function*() {
        const admin = yield* Admin.Admin
        const locks = yield* Locks.Locks
        const outcomes = {
          "Admin.jobs(null)": yield* outcome(() => admin.jobs(null as never)),
          // no options: the required ttl is missing
          "Locks.acquire(name, null)": yield* outcome(() => locks.acquire("null-opts", null as never)),
          "makePersistedQueueStore(null)": yield* outcome(() =>
            Effect.scoped(EffectStores.makePersistedQueueStore(null as never))
          ),
          // no options: the required filename is missing (it read `options.schema` eagerly: a throw out of the call)
          ...(engine.capabilities.postgres
            ? { "PgStore.importSqlite(null)": yield* outcome(() => PgStore.importSqlite(null as never)) }
            : {})
        }
        expect({ outcomes, locks: yield* lockCount }).toEqual({
          outcomes: {
            "Admin.jobs(null)": "ok",
            "Locks.acquire(name, null)": "InvalidOptions:ttl",
            "makePersistedQueueStore(null)": "ok",
            ...(engine.capabilities.postgres ? { "PgStore.importSqlite(null)": "InvalidOptions:filename" } : {})
          },
          locks: 0
        })
      })))

    // docs/contract.md §2: "Bad input is rejected with a typed error in the error channel before anything is
    // written"; CONTRACT §2: "No mechanism throws". A `schema` that is not an Effect Schema (a zod schema, `{}`,
    // `null` from a JS caller) died in `Schema.encodeEither` (src/internal/queues.ts: `schemaCodec(opts.schema)`
    // with no check) instead of failing with InvalidOptions on "schema".
    it.live("a queue schema that is not an Effect Schema is InvalidOptions on schema, not a defect", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const notSchemas: ReadonlyArray<readonly [string, unknown]> = [
          ["{}", {}],
          ["null", null],
          ["a zod-like object", { parse: (x: unknown) => x, safeParse: (x: unknown) => ({ success: true, data: x }) }],
          ["a string", "Struct"]
        ]
        const outcomes: Record<string, string> = {}
        for (const [label, schema] of notSchemas) {
          outcomes[label] = yield* outcome(() => queues.queue("schema-bad", { schema: schema as never }))
        }
        expect(outcomes).toEqual(Object.fromEntries(notSchemas.map(([label]) => [label, "InvalidOptions:schema"])))
      })))

    // docs/contract.md §2: "Bad input is rejected with a typed error in the error channel before anything is
    // written." An outbox `runOnce`/`run` or a queue `process` given a deliver/handler that is not a function
    // claimed a real job first and then "delivered" it: the TypeError became the job's failure, so the
    // job's attempt was spent (with maxAttempts 1 it is dead, unrun) — a JS caller's slip dead-letters work.
    it.live("a deliver or handler that is not a function is InvalidOptions before any job is claimed", () =>
      run(Effect.gen(function*() {
        const outboxes = yield* Outbox.Outbox
        const queues = yield* Queues.Queues
        const once = yield* outboxes.outbox("deliver-once", { maxAttempts: 1 })
        const running = yield* outboxes.outbox("deliver-run", { maxAttempts: 1 })
        const queue = yield* queues.queue("handler-bad", { maxAttempts: 1 })
        const ids = {
          runOnce: yield* once.enqueue({ n: 1 }),
          run: yield* running.enqueue({ n: 1 }),
          process: yield* queue.enqueue({ n: 1 })
        }
        // `run` and `process` run until interrupted: the guard ends them (a fixed version fails at once).
        const outcomes = {
          runOnce: yield* outcome(() => once.runOnce("w", undefined as never)),
          run: yield* outcome(() => running.run("w", "deliver" as never), "500 millis"),
          process: yield* outcome(() => queue.process("w", undefined as never), "500 millis")
        }
        const jobs = {
          runOnce: yield* jobState(once as never, ids.runOnce),
          run: yield* jobState(running as never, ids.run),
          process: yield* jobState(queue, ids.process)
        }
        expect({ outcomes, jobs }).toEqual({
          outcomes: {
            runOnce: expect.stringMatching(/^InvalidOptions:/),
            run: expect.stringMatching(/^InvalidOptions:/),
            process: expect.stringMatching(/^InvalidOptions:/)
          },
          jobs: { runOnce: "pending/0", run: "pending/0", process: "pending/0" }
        })
      })))

    // docs/contract.md §2: "Bad input is rejected with a typed error in the error channel before anything is
    // written." `withLock` given a body that is not an Effect (a thunk `() => effect`, a common JS slip) took
    // the lock first — a tenure written, its fencing token spent — then died with "Not a valid effect".
    it.live("withLock given a body that is not an Effect is a typed error, and no lock is taken", () =>
      run(Effect.gen(function*() {
        const locks = yield* Locks.Locks
        const result = yield* outcome(() => locks.withLock("body-bad", "10 seconds", (() => Effect.void) as never))
        expect({ result, locks: yield* lockCount }).toEqual({ result: expect.stringMatching(/^InvalidOptions:/), locks: 0 })
      })))

    // CONTRACT §2: "No mechanism throws"; docs/contract.md §2: a bad name is InvalidName (a bad spec
    // InvalidSpec). A name (or spec) that is not a string and has no string form (`Object.create(null)`) made `checkName` throw in `String(name)` (src/internal/
    // names.ts; Admin's `checkQueue` likewise): a defect — and where the name is checked eagerly (`outbox`,
    // `limits`, Admin's `purgeDead`), an exception thrown out of the call itself, before any Effect exists.
    it.live("a name with no string form is InvalidName at every entry point, never a throw or a defect", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const locks = yield* Locks.Locks
        const scheduler = yield* Scheduler.Scheduler
        const outboxes = yield* Outbox.Outbox
        const admin = yield* Admin.Admin
        const bad = Object.create(null) as string
        const attempts: ReadonlyArray<readonly [string, () => Effect.Effect<unknown, unknown>]> = [
          ["queue", () => queues.queue(bad)],
          ["setLimits", () => queues.setLimits(bad, { concurrency: 1 })],
          ["limits", () => queues.limits(bad)],
          ["clearLimits", () => queues.clearLimits(bad)],
          ["outbox", () => outboxes.outbox(bad)],
          ["schedule name", () => scheduler.schedule(bad, "@every 1m", "q", 1)],
          ["schedule queue", () => scheduler.schedule("s", "@every 1m", bad, 1)],
          ["schedule spec (InvalidSpec)", () => scheduler.schedule("s", bad, "q", 1)],
          ["unschedule", () => scheduler.unschedule(bad)],
          ["acquire", () => locks.acquire(bad, { ttl: "1 second" })],
          ["withLock", () => locks.withLock(bad, "1 second", Effect.void)],
          ["Admin.jobs", () => admin.jobs({ queue: bad })],
          ["Admin.purgeDead", () => admin.purgeDead(bad)]
        ]
        const outcomes: Record<string, string> = {}
        for (const [label, attempt] of attempts) outcomes[label] = yield* outcome(attempt)
        expect({ outcomes, jobs: yield* jobCount, locks: yield* lockCount }).toEqual({
          outcomes: Object.fromEntries(
            attempts.map(([label]) => [label, label.endsWith("(InvalidSpec)") ? "InvalidSpec:" : "InvalidName:"])
          ),
          jobs: 0,
          locks: 0
        })
      })))

    // CONTRACT §2: "No mechanism throws"; docs/contract.md §2: bad input is a typed error in the error channel.
    // A throwing getter in a payload is InvalidPayload ("Never a defect: the payload is the caller's",
    // src/internal/payload.ts), but the same getter in an options object is a defect — and in `dead`'s
    // options (read eagerly: `opts?.limit` outside any Effect) an exception thrown out of the call itself.
    it.live("an options object whose getter throws is a typed failure, never a synchronous throw or a defect", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const queue = yield* queues.queue("getter-opts")
        const locks = yield* Locks.Locks
        const scheduler = yield* Scheduler.Scheduler
        const throwing = (field: string) =>
          Object.defineProperty({}, field, {
            enumerable: true,
            get() {
              throw new Error(`${field} getter`)
            }
          })
        const attempts: ReadonlyArray<readonly [string, () => Effect.Effect<unknown, unknown>]> = [
          ["dead({ limit })", () => queue.dead(throwing("limit") as never)],
          ["enqueue({ delay })", () => queue.enqueue(1, throwing("delay") as never)],
          ["queue({ visibilityTimeout })", () => queues.queue("q", throwing("visibilityTimeout") as never)],
          ["acquire({ ttl })", () => locks.acquire("l", throwing("ttl") as never)],
          ["schedule({ priority })", () => scheduler.schedule("s", "@every 1m", "q", 1, throwing("priority") as never)]
        ]
        const outcomes: Record<string, string> = {}
        for (const [label, attempt] of attempts) outcomes[label] = yield* outcome(attempt)
        expect({ outcomes, jobs: yield* jobCount, locks: yield* lockCount }).toEqual({
          outcomes: Object.fromEntries(attempts.map(([label]) => [label, expect.stringMatching(/^InvalidOptions:/)])),
          jobs: 0,
          locks: 0
        })
      })))
  })
}

describe("bad input review — SqliteStore.layer", () => {
  /** How building `layer` ended (as `outcome`). */
  const built = <ROut, E>(make: () => Layer.Layer<ROut, E, never>) =>
    outcome(() => Effect.scoped(Layer.build(make())))

  // docs/contract.md §2: "Options given as `null` are no options" — and bad input is a typed error: with no
  // options the required `filename` is missing (InvalidOptions on "filename"). `layer(null)` and
  // `layer(undefined)` died reading `options.busyPatience` (src/internal/sqlite/store.ts `resolveSettings`).
  it.live("SqliteStore.layer(null) and layer(undefined) are InvalidOptions on filename, not a defect", () =>
    Effect.gen(function*() {
      expect({
        null: yield* built(() => SqliteStore.layer(null as never)),
        undefined: yield* built(() => SqliteStore.layer(undefined as never))
      }).toEqual({ null: "InvalidOptions:filename", undefined: "InvalidOptions:filename" })
    }))

  // docs/contract.md §2: "Bad input is rejected with a typed error in the error channel before anything is
  // written." A filename with a NUL is cut at the NUL by SQLite's C API: `layer({ filename: "<dir>/app.db\0.bak" })`
  // silently created, migrated and used `<dir>/app.db` — another file than the one named (Node's own `fs`
  // refuses such paths for that reason). Expected: a typed error, and no file created.
  it.live("a filename with a NUL is a typed error, never a store on the file cut at the NUL", () =>
    Effect.gen(function*() {
      const truncated = freshFile("nul")
      const result = yield* built(() => SqliteStore.layer({ filename: `${truncated}\u0000.bak` }))
      expect({ result, created: fs.existsSync(truncated) }).toEqual({
        result: expect.stringMatching(/^(InvalidOptions|SqlError):/),
        created: false
      })
    }))
})
