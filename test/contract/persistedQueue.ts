/**
 * alkstore behind `@effect/experimental`'s PersistedQueue
 * (EffectStores.layerPersistedQueueStore). The first four scenarios are the
 * ones Effect tests its own stores with (packages/experimental/test/
 * PersistedQueue.test.ts and packages/sql/test/SqlPersistedQueueTest.ts:
 * "offer + take", "interrupt", "failure", "idempotent offer"), then those of
 * Effect 4's shared suite that hold for the 0.61 interface, then alkstore's
 * own promises (waking on commit, leases, transactions, bad input).
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Deferred, Duration, Effect, Exit, Fiber, Layer, Option, Schema } from "effect"
import { EffectStores, Queues } from "../../src/index.js"
import type { EngineUnderTest, TestStoreSettings } from "./harness.js"
import { advance, eventually, settle as settleStore } from "./support.js"

const Item = Schema.Struct({ n: Schema.BigInt })

const realClock = Clock.make()
export const settle = Effect.gen(function*() {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
  yield* Effect.sleep(Duration.millis(20)).pipe(Effect.withClock(realClock))
  yield* settleStore
})

/** The take is still waiting after the store had every chance to deliver (a second of TestClock, real time to settle). */
export const notDelivered = <A, E>(fiber: Fiber.Fiber<A, E>) =>
  Effect.gen(function*() {
    yield* settle
    yield* advance("1 second")
    yield* settle
    expect(Option.isNone(yield* Fiber.poll(fiber)), "the take must still wait").toBe(true)
  })

const queueOf = (name: string) => PersistedQueue.make({ name, schema: Item })

export const stats = (name: string) => Effect.flatMap(Effect.flatMap(Queues.Queues, (q) => q.queue(name)), (q) => q.stats)

export const persistedQueueContract = (engine: EngineUnderTest) =>
  describe(`PersistedQueue over EffectStores — ${engine.name}`, () => {
    const layer = (settings?: TestStoreSettings, options?: EffectStores.PersistedQueueStoreOptions) =>
      PersistedQueue.layer.pipe(
        Layer.provideMerge(EffectStores.layerPersistedQueueStore(options)),
        Layer.provideMerge(engine.store({ fallbackPoll: "1 hour", ...settings }))
      )
    const run = <A, E>(
      effect: Effect.Effect<
        A,
        E,
        PersistedQueue.PersistedQueueFactory | PersistedQueue.PersistedQueueStore | Queues.Queues | SqlClient.SqlClient
      >,
      options?: EffectStores.PersistedQueueStoreOptions
    ) => Effect.scoped(Effect.provide(effect, layer(undefined, options)))

    describe("Effect's own scenarios", () => {
      it.effect("offer + take", () =>
        run(Effect.gen(function*() {
          const queue = yield* queueOf("test-queue-a")
          const id = yield* queue.offer({ n: 42n })
          const seen = yield* queue.take((value, metadata) => Effect.succeed({ value, metadata }))
          expect(seen).toEqual({ value: { n: 42n }, metadata: { id, attempts: 0 } })
          // acked: the job is gone
          expect(yield* stats("test-queue-a")).toMatchObject({ pending: 0, claimed: 0, dead: 0 })
        })))

      it.effect("interrupt: a second take waits while the first holds the element, and gets it once the first is interrupted", () =>
        run(Effect.gen(function*() {
          const queue = yield* queueOf("test-queue-b")
          yield* queue.offer({ n: 42n })
          const taken = yield* Deferred.make<void>()
          const first = yield* Effect.fork(queue.take(() => Effect.zipRight(Deferred.succeed(taken, undefined), Effect.never)))
          yield* Deferred.await(taken)
          const second = yield* Effect.fork(queue.take((value, metadata) => Effect.succeed({ value, metadata })))
          yield* notDelivered(second)
          yield* Fiber.interrupt(first)
          // the interruption released the claim without spending an attempt
          const got = yield* Fiber.join(second)
          expect(got).toMatchObject({ value: { n: 42n }, metadata: { attempts: 0 } })
        })))

      it.effect("failure: the take fails with the handler's error and the next take sees attempts 1", () =>
        run(Effect.gen(function*() {
          const queue = yield* queueOf("test-queue-c")
          yield* queue.offer({ n: 42n })
          const error = yield* Effect.flip(queue.take(() => Effect.fail("boom")))
          expect(error).toBe("boom")
          const value = yield* queue.take((value, { attempts }) => Effect.succeed({ value, attempts }))
          expect(value).toEqual({ value: { n: 42n }, attempts: 1 })
        })))

      it.effect("idempotent offer: the same custom id twice is one element", () =>
        run(Effect.gen(function*() {
          const queue = yield* queueOf("idempotent-offer")
          expect(yield* queue.offer({ n: 42n }, { id: "custom-id" })).toBe("custom-id")
          expect(yield* queue.offer({ n: 43n }, { id: "custom-id" })).toBe("custom-id")
          const first = yield* queue.take((value, { id }) => Effect.succeed({ value, id }))
          expect(first).toEqual({ value: { n: 42n }, id: "custom-id" })
          const second = yield* Effect.fork(queue.take(Effect.succeed))
          yield* notDelivered(second)
        })))
    })

    describe("Effect 4's shared suite, where it holds for the 0.61 interface", () => {
      it.effect("does not redeliver an element in flight, nor after it succeeded", () =>
        run(Effect.gen(function*() {
          const queue = yield* queueOf("in-flight")
          yield* queue.offer({ n: 42n })
          const taken = yield* Deferred.make<void>()
          const release = yield* Deferred.make<void>()
          const first = yield* Effect.fork(queue.take(() => Effect.zipRight(Deferred.succeed(taken, undefined), Deferred.await(release))))
          yield* Deferred.await(taken)
          const second = yield* Effect.fork(queue.take(Effect.succeed))
          // past several lease renewals: the lease is kept while the take's scope is open
          yield* advance("5 minutes")
          yield* notDelivered(second)
          yield* Deferred.succeed(release, undefined)
          yield* Fiber.join(first)
          yield* notDelivered(second)
          yield* Fiber.interrupt(second)
        })))

      it.effect("stops delivering when maxAttempts is spent: the element is dead, with the cause", () =>
        run(Effect.gen(function*() {
          const queue = yield* queueOf("exhausted")
          yield* queue.offer({ n: 42n })
          expect(yield* Effect.flip(queue.take(() => Effect.fail("boom"), { maxAttempts: 1 }))).toBe("boom")
          const next = yield* Effect.fork(queue.take(Effect.succeed, { maxAttempts: 1 }))
          yield* notDelivered(next)
          const dead = yield* Effect.flatMap(Effect.flatMap(Queues.Queues, (q) => q.queue("exhausted")), (q) => q.dead())
          expect(dead).toHaveLength(1)
          expect(Option.getOrThrow(dead[0]!.lastError)).toContain("boom")
        })))

      it.effect("an element that fails to decode fails its takes and is dead after maxAttempts (0.61 decodes inside the take)", () =>
        run(Effect.gen(function*() {
          const store = yield* PersistedQueue.PersistedQueueStore
          const queue = yield* queueOf("poison")
          yield* store.offer({ name: "poison", id: "poison", element: { n: null }, isCustomId: true })
          yield* queue.offer({ n: 42n })
          // a retry is due at once, behind what was due before it (at the same instant, offer order decides)
          const outcomes = []
          for (let i = 0; i < 3; i++) {
            const exit = yield* Effect.exit(queue.take(Effect.succeed, { maxAttempts: 2 }))
            outcomes.push(Exit.isSuccess(exit) ? exit.value : (exit.cause as { error?: { _tag?: string } }).error?._tag)
          }
          expect(outcomes.filter((o) => o === "ParseError")).toHaveLength(2)
          expect(outcomes).toContainEqual({ n: 42n })
          expect(yield* stats("poison")).toMatchObject({ pending: 0, claimed: 0, dead: 1 })
          const next = yield* Effect.fork(queue.take(Effect.succeed, { maxAttempts: 2 }))
          yield* notDelivered(next)
        })))
    })

    describe("offer ids as @effect/sql's store keeps them", () => {
      it.effect("a custom id already processed is never enqueued again", () =>
        run(Effect.gen(function*() {
          const queue = yield* queueOf("processed")
          yield* queue.offer({ n: 1n }, { id: "once" })
          yield* queue.take(Effect.succeed)
          yield* queue.offer({ n: 2n }, { id: "once" })
          const next = yield* Effect.fork(queue.take(Effect.succeed))
          yield* notDelivered(next)
        })))

      it.effect("ids are one namespace across queue names (0.61: one unique index over every queue)", () =>
        run(Effect.gen(function*() {
          const first = yield* queueOf("ids-first")
          const second = yield* queueOf("ids-second")
          yield* first.offer({ n: 1n }, { id: "shared" })
          yield* second.offer({ n: 2n }, { id: "shared" })
          expect(yield* stats("ids-second")).toMatchObject({ pending: 0 })
          expect(yield* first.take(Effect.succeed)).toEqual({ n: 1n })
        })))

      it.effect("a generated id is a fresh UUID per offer", () =>
        run(Effect.gen(function*() {
          const queue = yield* queueOf("generated")
          const a = yield* queue.offer({ n: 1n })
          const b = yield* queue.offer({ n: 1n })
          expect(a).not.toBe(b)
          expect(yield* stats("generated")).toMatchObject({ pending: 2 })
        })))
    })

    describe("alkstore's promises behind the interface", () => {
      it.effect("a waiting take wakes on the offer's commit, with no time passing (no poll)", () =>
        run(Effect.gen(function*() {
          const queue = yield* queueOf("wake")
          const taker = yield* Effect.fork(queue.take(Effect.succeed))
          yield* settle
          expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
          const before = yield* Clock.currentTimeMillis
          yield* queue.offer({ n: 7n })
          expect(yield* eventually(Fiber.join(taker))).toEqual({ n: 7n })
          expect(yield* Clock.currentTimeMillis).toBe(before)
        })))

      it.effect("an offer inside a transaction that rolls back is nothing, and its custom id stays free", () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const queue = yield* queueOf("tx")
          const taker = yield* Effect.fork(queue.take(Effect.succeed))
          yield* settle
          const exit = yield* Effect.exit(sql.withTransaction(Effect.zipRight(queue.offer({ n: 1n }, { id: "tx-id" }), Effect.fail("abort"))))
          expect(Exit.isFailure(exit)).toBe(true)
          yield* notDelivered(taker)
          yield* sql.withTransaction(queue.offer({ n: 2n }, { id: "tx-id" }))
          expect(yield* eventually(Fiber.join(taker))).toEqual({ n: 2n })
        })))

      it.effect("interrupting a waiting take leaves nothing claimed", () =>
        run(Effect.gen(function*() {
          const queue = yield* queueOf("waiting")
          const taker = yield* Effect.fork(queue.take(Effect.succeed))
          yield* settle
          yield* Fiber.interrupt(taker)
          yield* queue.offer({ n: 1n })
          expect(yield* stats("waiting")).toMatchObject({ pending: 1, claimed: 0 })
          expect(yield* queue.take(Effect.succeed)).toEqual({ n: 1n })
        })))

      it.effect("a claim whose process died comes back after the visibility timeout, counted as an attempt", () =>
        Effect.gen(function*() {
          // one store (the same database) seen by a "dead" process's queue and a live one
          const queue = yield* queueOf("crash")
          yield* queue.offer({ n: 1n })
          const alkQueue = yield* Effect.flatMap(Queues.Queues, (q) => q.queue("crash"))
          // the dead process: claimed with the element's own lease and never settled
          const claimed = yield* alkQueue.claim("crashed-process")
          expect(Option.isSome(claimed)).toBe(true)
          const taker = yield* Effect.fork(queue.take((value, { attempts }) => Effect.succeed({ value, attempts })))
          yield* notDelivered(taker)
          yield* advance("10 seconds")
          expect(yield* eventually(Fiber.join(taker))).toEqual({ value: { n: 1n }, attempts: 1 })
        }).pipe(Effect.scoped, Effect.provide(layer(undefined, { visibilityTimeout: "10 seconds" }))))

      it.effect("bad input is a PersistedQueueError before anything is written", () =>
        run(Effect.gen(function*() {
          const queue = yield* queueOf("bad-input")
          const badId = yield* Effect.flip(queue.offer({ n: 1n }, { id: "nul\u0000" }))
          expect(badId).toBeInstanceOf(PersistedQueue.PersistedQueueError)
          expect(badId.cause).toMatchObject({ _tag: "InvalidOptions", field: "id" })
          const reserved = yield* Effect.flip((yield* queueOf("__alkstore_mine")).offer({ n: 1n }))
          expect(reserved).toBeInstanceOf(PersistedQueue.PersistedQueueError)
          expect(reserved.cause).toMatchObject({ _tag: "ReservedName" })
          const empty = yield* Effect.flip((yield* queueOf("")).take(Effect.succeed))
          expect(empty).toBeInstanceOf(PersistedQueue.PersistedQueueError)
          expect(yield* stats("bad-input")).toMatchObject({ pending: 0 })
        })))

      it.effect("a bad visibilityTimeout fails the layer with InvalidOptions", () =>
        Effect.gen(function*() {
          const exit = yield* Effect.exit(Effect.provide(PersistedQueue.PersistedQueueStore, layer(undefined, { visibilityTimeout: -1 })))
          expect(exit).toMatchObject({ _tag: "Failure" })
          expect(Exit.isFailure(exit) && JSON.stringify(exit.cause)).toContain("visibilityTimeout")
        }))
    })
  })
