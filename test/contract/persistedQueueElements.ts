/**
 * PersistedQueue over EffectStores, its elements and their takes: a take's
 * `maxAttempts` is checked before anything is claimed; the taking store's
 * `visibilityTimeout` governs a claim's lease (whatever the offering store
 * stamped); an encoded element's `undefined` object properties are left
 * out, as JSON leaves them out.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Deferred, type Duration, Effect, Fiber, Layer, Option, Schema, type Scope } from "effect"
import { EffectStores, type Queues } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"
import { notDelivered, settle, stats } from "./persistedQueue.js"
import { advance } from "./support.js"

/** The lease ends of the queue's claimed elements. */
const leaseEnds = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ claimed_until: number | string }>`SELECT claimed_until FROM __alkstore_jobs WHERE queue = ${name} AND state = 'claimed'`,
      (rows) => rows.map((row) => Number(row.claimed_until))
    ))

const Item = Schema.Struct({ n: Schema.Number })

/**
 * An element offered through another PersistedQueueStore over the same
 * database (with `producerTimeout` stamped on it), taken by this store's
 * queue: its take is held in its handler until `release` is completed.
 */
const takenFromProducer = (name: string, producerTimeout: Duration.DurationInput) =>
  Effect.gen(function*() {
    const producer = yield* EffectStores.makePersistedQueueStore({ visibilityTimeout: producerTimeout })
    yield* producer.offer({ name, id: `${name}-1`, element: { n: 1 }, isCustomId: true })
    const queue = yield* PersistedQueue.make({ name, schema: Item })
    const taken = yield* Deferred.make<void>()
    const release = yield* Deferred.make<void>()
    const first = yield* Effect.fork(queue.take(() => Effect.zipRight(Deferred.succeed(taken, undefined), Deferred.await(release))))
    yield* Deferred.await(taken)
    const claimedAt = yield* Clock.currentTimeMillis
    yield* settle
    return { claimedAt, first, queue, release }
  })

export const persistedQueueElementsContract = (engine: EngineUnderTest) =>
  describe(`PersistedQueue over EffectStores, elements and their takes — ${engine.name}`, () => {
    const layer = (options?: EffectStores.PersistedQueueStoreOptions) =>
      PersistedQueue.layer.pipe(
        Layer.provideMerge(EffectStores.layerPersistedQueueStore(options)),
        Layer.provideMerge(engine.store({ fallbackPoll: "1 hour" }))
      )
    type Services =
      | PersistedQueue.PersistedQueueFactory
      | PersistedQueue.PersistedQueueStore
      | Queues.Queues
      | SqlClient.SqlClient
      | EffectStores.Backing
      | Scope.Scope
    const run = <A, E>(effect: Effect.Effect<A, E, Services>, options?: EffectStores.PersistedQueueStoreOptions) =>
      Effect.scoped(Effect.provide(effect, layer(options)))

    it.effect("a take whose maxAttempts is not a whole number of at least 1 (nor Infinity) fails with InvalidOptions, claiming nothing", () =>
      run(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "max-attempts", schema: Item })
        for (let n = 0; n < 3; n++) yield* queue.offer({ n })
        let handled = 0
        for (const maxAttempts of [0, -1, 1.5, Number.NaN, Number.NEGATIVE_INFINITY]) {
          const taker = yield* Effect.fork(Effect.flip(queue.take(() => Effect.sync(() => handled++), { maxAttempts })))
          yield* settle
          expect(yield* stats("max-attempts"), `maxAttempts ${maxAttempts}`).toMatchObject({ pending: 3, claimed: 0, dead: 0 })
          const outcome = yield* Fiber.poll(taker)
          expect(Option.isSome(outcome), `the take with maxAttempts ${maxAttempts} must have failed`).toBe(true)
          const error = yield* Fiber.join(taker)
          expect(error).toBeInstanceOf(PersistedQueue.PersistedQueueError)
          expect((error as PersistedQueue.PersistedQueueError).cause).toMatchObject({ _tag: "InvalidOptions", field: "maxAttempts" })
        }
        expect(handled).toBe(0)
        // Infinity is accepted (Effect's memory store then retries for ever), as is any whole number of at least 1.
        expect(yield* queue.take((value, { attempts }) => Effect.succeed({ value, attempts }), { maxAttempts: Infinity }))
          .toEqual({ value: { n: 0 }, attempts: 0 })
        expect(yield* queue.take(Effect.succeed, { maxAttempts: 1 })).toEqual({ n: 1 })
      })))

    it.effect("an element offered by a store with a shorter visibilityTimeout keeps its lease under the taking store's (no second take meanwhile)", () =>
      run(Effect.gen(function*() {
        // The producer: another PersistedQueueStore over the same database, with a 1-second lease stamped on its elements.
        const { claimedAt, first, queue, release } = yield* takenFromProducer("mismatch", "1 second")
        // The first take's handler ran once (the helper waited for it); a second take must not run at all.
        let handled = 1
        // Extended at once to the taking store's 30 seconds.
        expect(yield* leaseEnds("mismatch")).toEqual([claimedAt + 30_000])
        const second = yield* Effect.fork(queue.take(() => Effect.sync(() => handled++)))
        // Past the producer's lease, then past several of the consumer's renewals (every 10 s).
        yield* advance("5 seconds")
        yield* notDelivered(second)
        yield* advance("1 minute")
        yield* notDelivered(second)
        expect(handled).toBe(1)
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(first)
        yield* notDelivered(second)
        yield* Fiber.interrupt(second)
        expect(handled).toBe(1)
      }), { visibilityTimeout: "30 seconds" }))

    it.effect("renewals extend a claim by the taking store's visibilityTimeout, not the one its element was offered with", () =>
      run(Effect.gen(function*() {
        const { claimedAt, first, release } = yield* takenFromProducer("renewed", "10 minutes")
        // The claim's own lease (longer than this store's: nothing to extend).
        expect(yield* leaseEnds("renewed")).toEqual([claimedAt + 600_000])
        // This store renews every 10 s (a third of 30 s), to 30 s from then.
        yield* advance("10 seconds")
        yield* settle
        expect(yield* leaseEnds("renewed")).toEqual([claimedAt + 10_000 + 30_000])
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(first)
      }), { visibilityTimeout: "30 seconds" }))

    it.effect("a take whose store closes while its handler runs ends under a TestClock nobody moves (its settle waits real time)", () =>
      Effect.gen(function*() {
        const taken = yield* Deferred.make<void>()
        // The store's scope closes with the take in its handler (as when a test's assertion fails):
        // the store goes first, then the take is interrupted and its release fails and is retried.
        const closing = Effect.scoped(Effect.gen(function*() {
          const queue = yield* PersistedQueue.make({ name: "closing", schema: Item })
          yield* queue.offer({ n: 1 })
          yield* Effect.fork(queue.take(() => Effect.zipRight(Deferred.succeed(taken, undefined), Effect.never)))
          yield* Deferred.await(taken)
        }).pipe(Effect.provide(layer())))
        const outcome = yield* Effect.raceFirst(
          Effect.disconnect(Effect.as(closing, "closed" as const)),
          Effect.as(Effect.withClock(Effect.sleep("10 seconds"), Clock.make()), "hung" as const)
        )
        // Before: the release's retries slept on the TestClock, and the close never ended.
        expect(outcome).toBe("closed")
      }))

    it.effect("an encoded element's undefined object properties are left out, at any depth, as JSON leaves them out", () =>
      run(Effect.gen(function*() {
        const Mail = Schema.Struct({
          to: Schema.String,
          cc: Schema.optional(Schema.String),
          parts: Schema.Array(Schema.Struct({ body: Schema.String, type: Schema.optional(Schema.String) }))
        })
        const mail = yield* PersistedQueue.make({ name: "mail", schema: Mail })
        const value = { to: "ada", cc: undefined, parts: [{ body: "hi", type: undefined }, { body: "bye", type: "text" }] }
        yield* mail.offer(value)
        expect(value).toHaveProperty("cc")
        expect(yield* mail.take(Effect.succeed)).toStrictEqual({ to: "ada", parts: [{ body: "hi" }, { body: "bye", type: "text" }] })
        // Through the store itself: the stored element is what JSON keeps of it.
        const store = yield* PersistedQueue.PersistedQueueStore
        yield* store.offer({ name: "raw", id: "raw-1", element: { a: undefined, b: { c: undefined, d: [1, { e: undefined }] } }, isCustomId: true })
        const raw = yield* PersistedQueue.make({ name: "raw", schema: Schema.Unknown })
        expect(yield* raw.take(Effect.succeed)).toStrictEqual({ b: { d: [1, {}] } })
        // The codec's other rules stand: NaN, undefined as an array element or as the element itself.
        for (const element of [{ n: Number.NaN }, [undefined], undefined]) {
          const error = yield* Effect.flip(store.offer({ name: "raw", id: crypto.randomUUID(), element, isCustomId: false }))
          expect(error).toBeInstanceOf(PersistedQueue.PersistedQueueError)
          expect(error.cause).toMatchObject({ _tag: "InvalidPayload" })
        }
        expect(yield* stats("raw")).toMatchObject({ pending: 0, claimed: 0, dead: 0 })
      })))
  })
