/**
 * The queue contract (CONTRACT §2, §3): every invalid input is its typed
 * error, raised before storage — nothing is written on rejection.
 */
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Duration, Effect, Option, Schema } from "effect"
import { Queues, Scheduler } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"
import { jobCount, mustClaim, mustGet, queueOf, type StoreServices } from "./support.js"

class Point {
  constructor(readonly x: number) {}
}

class Points extends Array<number> {}

/** `depth` levels of `wrap` around a number. */
const nested = (depth: number, wrap: (inner: unknown) => unknown): unknown => {
  let value: unknown = 1
  for (let i = 0; i < depth; i++) value = wrap(value)
  return value
}

interface Tree {
  readonly child: Tree | null
}
const Tree: Schema.Schema<Tree> = Schema.Struct({
  child: Schema.NullOr(Schema.suspend((): Schema.Schema<Tree> => Tree))
})

export const queuesValidationContract = (engine: EngineUnderTest) =>
  describe(`queues: validation — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    it.effect("queue names: empty is InvalidName, the reserved prefix is ReservedName", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        expect(yield* Effect.flip(queues.queue(""))).toMatchObject({ _tag: "InvalidName", name: "" })
        for (const name of ["__alkstore", "__alkstore_jobs", "__alkstore_outbox:webhooks"]) {
          expect(yield* Effect.flip(queues.queue(name))).toMatchObject({ _tag: "ReservedName", name })
        }
        // the name is checked before the options
        expect((yield* Effect.flip(queues.queue("", { maxAttempts: 0 })))._tag).toBe("InvalidName")
        expect(yield* jobCount).toBe(0)
      })))

    it.effect("names have no charset rule, compare byte-exact and are never spliced into SQL", () =>
      run(Effect.gen(function*() {
        const names = ["Emails", "emails", "e'; DROP TABLE __alkstore_jobs; --", "ünï cødé", " ", "_alkstore", "x__alkstore"]
        const ids: Array<number> = []
        for (const name of names) ids.push(yield* (yield* queueOf(name)).enqueue(name))
        expect(yield* jobCount).toBe(names.length)
        for (const [i, name] of names.entries()) {
          const q = yield* queueOf(name)
          const handle = yield* mustClaim(q, "w")
          expect(handle.job).toMatchObject({ id: ids[i], queue: name, payload: name })
          expect(Option.isNone(yield* q.claim("w"))).toBe(true)
        }
      })))

    describe("queue options", () => {
      const cases: ReadonlyArray<readonly [string, Queues.QueueOpts]> = [
        ["visibilityTimeout", { visibilityTimeout: 0 }],
        ["visibilityTimeout", { visibilityTimeout: "0 seconds" }],
        ["visibilityTimeout", { visibilityTimeout: -1 }],
        ["visibilityTimeout", { visibilityTimeout: "-5 seconds" }],
        ["visibilityTimeout", { visibilityTimeout: Number.NaN }],
        ["visibilityTimeout", { visibilityTimeout: Number.POSITIVE_INFINITY }],
        ["visibilityTimeout", { visibilityTimeout: Duration.infinity }],
        ["visibilityTimeout", { visibilityTimeout: "soon" as Duration.DurationInput }],
        ["maxAttempts", { maxAttempts: 0 }],
        ["maxAttempts", { maxAttempts: 1.5 }],
        ["maxAttempts", { maxAttempts: -3 }],
        ["maxAttempts", { maxAttempts: Number.NaN }],
        ["maxAttempts", { maxAttempts: 2 ** 53 }],
        ["backoffBase", { backoffBase: -1 }],
        ["backoffBase", { backoffBase: "-5 seconds" }],
        ["backoffBase", { backoffBase: Number.NaN }],
        ["backoffBase", { backoffBase: "Infinity seconds" as Duration.DurationInput }],
        ["expires", { expires: 0 }],
        ["expires", { expires: "-1 minutes" }],
        ["expires", { expires: Number.NEGATIVE_INFINITY }],
        ["expires", { expires: [-1, 0] }]
      ]
      it.effect("each bad handle option is InvalidOptions with its own field", () =>
        run(Effect.gen(function*() {
          const queues = yield* Queues.Queues
          for (const [field, opts] of cases) {
            const error = yield* Effect.flip(queues.queue("q", opts))
            expect(error, JSON.stringify(opts)).toMatchObject({ _tag: "InvalidOptions", field })
          }
          expect(yield* jobCount).toBe(0)
        })))

      it.effect("boundary values that are valid are accepted", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("ok", {
            visibilityTimeout: 1,
            maxAttempts: 1,
            backoffBase: 0,
            expires: "1 millis"
          })
          const job = yield* mustGet(q, yield* q.enqueue("x"))
          expect(Duration.toMillis(job.visibilityTimeout)).toBe(1)
          expect(Duration.toMillis(job.backoffBase)).toBe(0)
          expect(job.maxAttempts).toBe(1)
        })))
    })

    describe("enqueue options", () => {
      const cases: ReadonlyArray<readonly [string, Queues.EnqueueOpts]> = [
        ["priority", { priority: 1.5 }],
        ["priority", { priority: Number.NaN }],
        ["priority", { priority: Number.POSITIVE_INFINITY }],
        ["priority", { priority: Number.MAX_SAFE_INTEGER + 1 }],
        ["priority", { priority: -(2 ** 60) }],
        ["maxAttempts", { maxAttempts: 0 }],
        ["maxAttempts", { maxAttempts: 1.5 }],
        ["maxAttempts", { maxAttempts: -1 }],
        ["expires", { expires: -1 }],
        ["expires", { expires: "-5 seconds" }],
        ["expires", { expires: Number.NaN }],
        ["expires", { expires: Number.POSITIVE_INFINITY }],
        ["delay", { delay: "-5 seconds" }],
        ["delay", { delay: -1 }],
        ["delay", { delay: Number.NaN }],
        ["delay", { delay: Number.POSITIVE_INFINITY }],
        ["delay", { delay: "NaN seconds" as Duration.DurationInput }],
        ["delay", { delay: [-5, 0] }],
        ["runAt", { runAt: new Date(Number.NaN) }],
        ["runAt", { runAt: Number.NaN }],
        ["runAt", { runAt: Number.POSITIVE_INFINITY }],
        ["runAt", { runAt: 1.5 }],
        ["runAt", { runAt: -1 }],
        // both given, even both valid: the field is "delay"
        ["delay", { delay: "1 second", runAt: 5_000 }],
        ["delay", { delay: 0, runAt: new Date(0) }],
        // the expiry ends at or before runAt
        ["expires", { expires: 0 }],
        ["expires", { expires: "10 seconds", delay: "10 seconds" }],
        ["expires", { expires: "10 seconds", delay: "1 minute" }],
        ["expires", { expires: "10 seconds", runAt: 60_000 }],
        ["key", { key: "" }]
      ]

      it.effect("each bad enqueue option is InvalidOptions with its own field, for enqueue and enqueueBatch", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("q")
          for (const [field, opts] of cases) {
            const error = yield* Effect.flip(q.enqueue("x", opts))
            expect(error, `${field}: ${String(Object.values(opts)[0])}`).toMatchObject({ _tag: "InvalidOptions", field })
            const batchError = yield* Effect.flip(q.enqueueBatch(["x", "y"], opts))
            expect(batchError).toMatchObject({ _tag: "InvalidOptions", field })
          }
          expect(yield* jobCount).toBe(0)
        })))

      it.effect("a handle expiry that ends at or before a delayed runAt is InvalidOptions on \"expires\"", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("q", { expires: "5 seconds" })
          expect(yield* Effect.flip(q.enqueue("x", { delay: "5 seconds" }))).toMatchObject({
            _tag: "InvalidOptions",
            field: "expires"
          })
          // the enqueue's own expiry wins over the handle's
          const id = yield* q.enqueue("x", { delay: "5 seconds", expires: "1 minute" })
          expect(yield* jobCount).toBe(1)
          expect(Option.map((yield* mustGet(q, id)).expiresAt, DateTime.toEpochMillis)).toEqual(Option.some(60_000))
        })))

      it.effect("the extreme safe priorities are accepted and stored exactly", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("q")
          const high = yield* q.enqueue("high", { priority: Number.MAX_SAFE_INTEGER })
          const low = yield* q.enqueue("low", { priority: Number.MIN_SAFE_INTEGER })
          expect((yield* mustGet(q, high)).priority).toBe(Number.MAX_SAFE_INTEGER)
          expect((yield* mustGet(q, low)).priority).toBe(Number.MIN_SAFE_INTEGER)
          expect((yield* mustClaim(q, "w")).job.id).toBe(high)
          expect((yield* mustClaim(q, "w")).job.id).toBe(low)
        })))
    })

    describe("payloads", () => {
      const cyclic: Record<string, unknown> = { a: 1 }
      cyclic["self"] = cyclic
      const cyclicList: Array<unknown> = [1]
      cyclicList.push({ back: cyclicList })
      const cases: ReadonlyArray<readonly [string, unknown]> = [
        ["cycle", cyclic],
        ["cycle through an array", cyclicList],
        ["BigInt", 10n],
        ["nested BigInt", { n: [1n] }],
        ["top-level undefined", undefined],
        ["nested undefined", { a: { b: undefined } }],
        ["undefined in an array", [1, undefined]],
        ["a hole in an array", [1, , 3]], // eslint-disable-line no-sparse-arrays
        ["function", () => 1],
        ["nested function", { f: function named() {} }],
        ["symbol", Symbol("s")],
        ["nested symbol", { s: Symbol.iterator }],
        ["symbol key", { [Symbol("k")]: 1 }],
        ["NaN", Number.NaN],
        ["nested NaN", { x: [0, Number.NaN] }],
        ["Infinity", Number.POSITIVE_INFINITY],
        ["-Infinity", { x: Number.NEGATIVE_INFINITY }],
        ["Date", new Date(0)],
        ["nested Date", { at: new Date(0) }],
        ["Map", new Map([["a", 1]])],
        ["Set", { s: new Set([1]) }],
        ["class instance", new Point(1)],
        ["nested class instance", { p: [new Point(2)] }],
        ["boxed string", { s: new String("x") }] // eslint-disable-line no-new-wrappers
      ]
      // JSON would change these silently: exact round-trip is the rule
      const changedByJson: ReadonlyArray<readonly [string, unknown]> = [
        ["-0", -0],
        ["nested -0", { x: [1, -0] }],
        ["an array with an extra property", Object.assign([1, 2], { extra: true })],
        ["a nested array with an extra property", { list: Object.assign([1], { note: "x" }) }],
        ["an array with a symbol key", Object.assign([1], { [Symbol("s")]: 1 })],
        ["an Array subclass", { list: Points.from([1, 2]) }]
      ]
      // nested past what a recursive check (or JSON.stringify) can walk
      const tooDeep: ReadonlyArray<readonly [string, unknown]> = [
        ["objects nested 5000 deep", nested(5000, (inner) => ({ a: inner }))],
        ["arrays nested 5000 deep", nested(5000, (inner) => [inner])],
        ["nested 100000 deep", nested(100_000, (inner) => [inner])]
      ]

      const rejectsAll = (payloads: ReadonlyArray<readonly [string, unknown]>) =>
        Effect.gen(function*() {
          const q = yield* queueOf("q")
          for (const [label, payload] of payloads) {
            const error = yield* Effect.flip(q.enqueue(payload))
            expect(error._tag, label).toBe("InvalidPayload")
            expect(typeof (error as { reason?: unknown }).reason, label).toBe("string")
            const batchError = yield* Effect.flip(q.enqueueBatch(["fine", payload]))
            expect(batchError._tag, label).toBe("InvalidPayload")
          }
          expect(yield* jobCount).toBe(0)
        })

      it.effect("every payload JSON cannot carry faithfully is InvalidPayload and writes nothing", () =>
        run(rejectsAll(cases)))

      it.effect("-0, arrays with extra properties or symbol keys and Array subclasses are InvalidPayload (exact round-trip)", () =>
        run(rejectsAll(changedByJson)))

      it.effect("a payload nested 5000 deep or more is InvalidPayload, not a RangeError, and writes nothing", () =>
        run(rejectsAll(tooDeep)))

      it.effect("a deep payload is InvalidPayload on schedule and on Schema-typed queues too, nothing written", () =>
        run(Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const deep = nested(5000, (inner) => ({ a: inner }))
          expect((yield* Effect.flip(scheduler.schedule("s", "@every 1s", "q", deep)))._tag).toBe("InvalidPayload")
          expect((yield* Effect.flip(scheduler.schedule("s", "@every 1s", "q", -0)))._tag).toBe("InvalidPayload")
          const unknown = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("typed", { schema: Schema.Unknown }))
          expect((yield* Effect.flip(unknown.enqueue(deep)))._tag).toBe("InvalidPayload")
          const trees = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("trees", { schema: Tree }))
          for (const depth of [5000, 100_000]) {
            const tree = nested(depth, (inner) => ({ child: inner })) as { child: unknown }
            let leaf = tree
            while (leaf.child !== 1) leaf = leaf.child as { child: unknown }
            leaf.child = null
            const error = yield* Effect.flip(trees.enqueue(tree as Tree))
            expect(error._tag, `depth ${depth}`).toBe("InvalidPayload")
          }
          expect(yield* jobCount).toBe(0)
          // a reasonably deep tree is fine, both ways
          const shallow = nested(50, (inner) => ({ child: inner })) as { child: unknown }
          let leaf = shallow
          while (leaf.child !== 1) leaf = leaf.child as { child: unknown }
          leaf.child = null
          yield* trees.enqueue(shallow as Tree)
          expect((yield* mustClaim(trees, "w")).job.payload).toEqual(shallow)
        })))

      it.effect("0, plain arrays and moderately nested payloads round-trip exactly", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("q")
          const payload = { zero: 0, list: [0, 1.5, -2], deep: nested(100, (inner) => [inner]) }
          const id = yield* q.enqueue(payload)
          const job = yield* mustGet(q, id)
          expect(job.payload).toEqual(payload)
          expect(Object.is((job.payload as { zero: number }).zero, 0)).toBe(true)
        })))

      it.effect("a shared (non-cyclic) reference is fine", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("q")
          const shared = { v: 1 }
          const id = yield* q.enqueue({ a: shared, b: shared, list: [shared, shared] })
          expect((yield* mustGet(q, id)).payload).toEqual({ a: { v: 1 }, b: { v: 1 }, list: [{ v: 1 }, { v: 1 }] })
        })))
    })

    describe("handle and inspection parameters", () => {
      it.effect("retry's delay, heartbeat's extend, dead's limit and purgeDead's olderThan are validated", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("q")
          const id = yield* q.enqueue("x")
          const handle = yield* mustClaim(q, "w")
          const before = yield* mustGet(q, id)
          for (const delay of [-1, "-5 seconds", Number.NaN, Number.POSITIVE_INFINITY] as const) {
            expect(yield* Effect.flip(handle.retry("e", delay))).toMatchObject({ _tag: "InvalidOptions", field: "delay" })
          }
          for (const extend of [0, -1, "-5 seconds", Number.NaN, Number.POSITIVE_INFINITY] as const) {
            expect(yield* Effect.flip(handle.heartbeat(extend))).toMatchObject({ _tag: "InvalidOptions", field: "extend" })
          }
          // nothing changed: the claim is intact
          expect(yield* mustGet(q, id)).toEqual(before)
          expect(yield* handle.fail("dead now")).toBe(true)
          for (const limit of [0, -1, 1.5]) {
            expect(yield* Effect.flip(q.dead({ limit }))).toMatchObject({ _tag: "InvalidOptions", field: "limit" })
          }
          for (const olderThan of [-1, "-5 seconds", Number.NaN] as const) {
            expect(yield* Effect.flip(q.purgeDead(olderThan))).toMatchObject({
              _tag: "InvalidOptions",
              field: "olderThan"
            })
          }
          expect((yield* mustGet(q, id)).state).toBe("dead")
          expect(yield* jobCount).toBe(1)
        })))
    })
  })
