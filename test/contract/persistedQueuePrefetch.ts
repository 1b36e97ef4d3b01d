/**
 * PersistedQueue over alkstore, one take after another: a take that found
 * its element at once acks it and claims the next in one transaction,
 * holding that element for the queue's next take (prefetch.ts). What is
 * held and not taken within a turn of the event loop is given back with no
 * attempt spent; the store's close gives back what it holds; a take inside
 * the application's transaction never takes a held element; no element is
 * handed to two takes, and one take after another still sees offer order.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Duration, Effect, Fiber, Layer, Option, Schema } from "effect"
import { EffectStores, Queues } from "../../src/index.js"
import { freshFile, type EngineUnderTest } from "./harness.js"
import { eventually, settle } from "./support.js"

const Item = Schema.Struct({ n: Schema.Number })
const lease = Duration.toMillis("30 seconds")
const realClock = Clock.make()

const stats = (name: string) => Effect.flatMap(Effect.flatMap(Queues.Queues, (q) => q.queue(name)), (q) => q.stats)
const eventuallyStats = (name: string, expected: Record<string, number>) =>
  eventually(Effect.flatMap(stats(name), (s) => Effect.sync(() => expect(s).toMatchObject(expected))))

/** Offers `0 … count-1` in one transaction. */
const offerAll = (queue: PersistedQueue.PersistedQueue<typeof Item.Type>, count: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(Effect.forEach(Array.from({ length: count }, (_, n) => n), (n) => queue.offer({ n }), { discard: true })))

/** The lease ends of the queue's claimed elements (a claim's lease runs from the instant it was made). */
const leaseEnds = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ claimed_until: number | string }>`SELECT claimed_until FROM __alkstore_jobs WHERE queue = ${name} AND state = 'claimed'`,
      (rows) => rows.map((row) => Number(row.claimed_until))
    ))

/** A clock stopped at `millis` (sleeps never end): a take run under it claims at that instant. */
const stoppedAt = (millis: number): Clock.Clock => ({
  [Clock.ClockTypeId]: Clock.ClockTypeId,
  unsafeCurrentTimeMillis: () => millis,
  currentTimeMillis: Effect.succeed(millis),
  unsafeCurrentTimeNanos: () => BigInt(millis) * 1_000_000n,
  currentTimeNanos: Effect.succeed(BigInt(millis) * 1_000_000n),
  sleep: () => Effect.never
})

export const persistedQueuePrefetchContract = (engine: EngineUnderTest) =>
  describe(`PersistedQueue over EffectStores, prefetch — ${engine.name}`, () => {
    const pqLayer = PersistedQueue.layer.pipe(
      Layer.provideMerge(EffectStores.layerPersistedQueueStore({ visibilityTimeout: "30 seconds" }))
    )
    const layer = (filename = freshFile("prefetch")) =>
      pqLayer.pipe(Layer.provideMerge(engine.store({ fallbackPoll: "1 hour", filename })))
    const run = <A, E>(
      effect: Effect.Effect<A, E, PersistedQueue.PersistedQueueFactory | Queues.Queues | SqlClient.SqlClient>
    ) => Effect.scoped(Effect.provide(effect, layer()))

    it.effect("a take that found its element at once claims the next with its ack: the next take runs on that claim", () =>
      run(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "prefetched", schema: Item })
        yield* offerAll(queue, 2)
        // The first take (its claim and its ack) runs at instant T; the second at the TestClock's 0.
        const at = 1_000_000
        yield* queue.take(() => Effect.void).pipe(Effect.withClock(stoppedAt(at)))
        const [value, ends] = yield* queue.take((value) => Effect.map(leaseEnds("prefetched"), (ends) => [value, ends] as const))
        expect(value).toEqual({ n: 1 })
        // Claimed by the first take's ack, at T; a claim of its own would have run at 0.
        expect(ends).toEqual([at + lease])
        expect(yield* stats("prefetched")).toMatchObject({ pending: 0, claimed: 0, dead: 0 })
      })))

    it.effect("a take that waited for its element acks it alone (an idle queue's ack claims nothing)", () =>
      run(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "idle", schema: Item })
        const first = yield* Effect.fork(queue.take(() => Effect.void).pipe(Effect.withClock(stoppedAt(1_000_000))))
        yield* Effect.sleep("20 millis").pipe(Effect.withClock(realClock))
        yield* settle
        expect(Option.isNone(yield* Fiber.poll(first)), "the take waits").toBe(true)
        yield* offerAll(queue, 2)
        yield* Fiber.join(first)
        const ends = yield* queue.take(() => leaseEnds("idle"))
        expect(ends).toEqual([lease])
      })))

    it.effect("a prefetched element no take picks up is given back within a turn of the event loop, no attempt spent", () =>
      Effect.gen(function*() {
        const filename = freshFile("prefetch-shared")
        yield* Effect.gen(function*() {
          const queue = yield* PersistedQueue.make({ name: "untaken", schema: Item })
          yield* offerAll(queue, 2)
          yield* queue.take(() => Effect.void)
          // No time passes on the TestClock: given back, not lapsed.
          yield* eventuallyStats("untaken", { pending: 1, claimed: 0 })
          // Another store on the same database takes it at once; its own claim is the element's first.
          const other = yield* Effect.flatMap(Queues.Queues, (q) => q.queue("untaken")).pipe(
            Effect.flatMap((q) => q.claim("another-store")),
            Effect.provide(engine.store({ fallbackPoll: "1 hour", filename }))
          )
          const job = Option.getOrThrow(other).job
          expect(job.attempts).toBe(1)
          expect((job.payload as { element: unknown }).element).toEqual({ n: 1 })
        }).pipe(Effect.scoped, Effect.provide(layer(filename)))
      }))

    it.effect("the store's close gives back what it holds at once", () =>
      Effect.gen(function*() {
        yield* Effect.gen(function*() {
          const queue = yield* PersistedQueue.make({ name: "closing", schema: Item })
          yield* offerAll(queue, 2)
          yield* queue.take(() => Effect.void)
        }).pipe(Effect.scoped, Effect.provide(pqLayer))
        expect(yield* stats("closing")).toMatchObject({ pending: 1, claimed: 0 })
        const alkQueue = yield* Effect.flatMap(Queues.Queues, (q) => q.queue("closing"))
        expect(Option.getOrThrow(yield* alkQueue.claim("next")).job.attempts).toBe(1)
      }).pipe(Effect.scoped, Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))

    it.effect("a take inside the application's transaction never takes a held element; rolled back, it is pending again", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* PersistedQueue.make({ name: "in-transaction", schema: Item })
        yield* offerAll(queue, 2)
        yield* queue.take(() => Effect.void)
        // Right after the ack that claimed element 1. On SQLite the transaction holds the one connection: the
        // held element must be given back inside it for its take to find it, and after it when it rolls back.
        const inside = yield* Effect.flip(sql.withTransaction(
          Effect.zipRight(queue.take((value) => Effect.sync(() => expect(value).toEqual({ n: 1 }))), Effect.fail("abort" as const))
        ))
        expect(inside).toBe("abort")
        yield* eventuallyStats("in-transaction", { pending: 1, claimed: 0 })
        expect(yield* queue.take((value, { attempts }) => Effect.succeed({ value, attempts }))).toEqual({
          value: { n: 1 },
          attempts: 0
        })
      })), 30_000)

    it.effect("one take after another sees offer order, whether its element was held or given back meanwhile", () =>
      run(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "ordered", schema: Item })
        const count = 30
        yield* offerAll(queue, count)
        const seen: Array<{ n: number; attempts: number }> = []
        for (let i = 0; i < count; i++) {
          yield* queue.take((value, { attempts }) => Effect.sync(() => seen.push({ n: value.n, attempts })))
          // Every third take lets the event loop turn: the held element goes back, the next take claims it again.
          if (i % 3 === 2) yield* Effect.sleep("2 millis").pipe(Effect.withClock(realClock))
        }
        expect(seen).toEqual(Array.from({ length: count }, (_, n) => ({ n, attempts: 0 })))
        expect(yield* stats("ordered")).toMatchObject({ pending: 0, claimed: 0, dead: 0 })
      })), 30_000)

    it.effect("takes at every pace never get one element twice, nor lose one, nor spend an attempt", () =>
      run(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "paces", schema: Item })
        const count = 150
        yield* offerAll(queue, count)
        const inFlight = new Set<number>()
        const overlaps: Array<number> = []
        const seen: Array<{ n: number; attempts: number }> = []
        const handler = (pace: number) => (value: { readonly n: number }, { attempts }: { readonly attempts: number }) =>
          Effect.gen(function*() {
            if (inFlight.has(value.n)) overlaps.push(value.n)
            inFlight.add(value.n)
            seen.push({ n: value.n, attempts })
            if (pace === 1) yield* Effect.yieldNow()
            if (pace === 2 && value.n % 4 === 0) yield* Effect.sleep("1 millis").pipe(Effect.withClock(realClock))
            inFlight.delete(value.n)
          })
        // Three loops at different paces, one of them letting the event loop turn between takes.
        const loop = (pace: number) =>
          Effect.gen(function*() {
            for (let i = 0; i < count / 3; i++) {
              yield* queue.take(handler(pace))
              if (pace === 0 && i % 5 === 0) yield* Effect.sleep("1 millis").pipe(Effect.withClock(realClock))
            }
          })
        yield* Effect.all([loop(0), loop(1), loop(2)], { concurrency: "unbounded", discard: true })
        expect(overlaps).toEqual([])
        expect(seen.map(({ n }) => n).sort((a, b) => a - b)).toEqual(Array.from({ length: count }, (_, n) => n))
        expect(seen.filter(({ attempts }) => attempts !== 0)).toEqual([])
        yield* eventuallyStats("paces", { pending: 0, claimed: 0, dead: 0 })
      })), 60_000)

    it.effect("100 concurrent takes, round after round (shared acks claim the next round): each element once, none left held", () =>
      run(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "rounds", schema: Item })
        const count = 400
        yield* offerAll(queue, count)
        const seen: Array<{ n: number; attempts: number }> = []
        yield* Effect.forEach(
          Array.from({ length: count }),
          () => queue.take((value, { attempts }) => Effect.sync(() => seen.push({ n: value.n, attempts }))),
          { concurrency: 100, discard: true }
        )
        expect(seen.map(({ n }) => n).sort((a, b) => a - b)).toEqual(Array.from({ length: count }, (_, n) => n))
        expect(seen.filter(({ attempts }) => attempts !== 0)).toEqual([])
        // More takes than elements: the last ones wait; nothing is held for them nor left claimed.
        const late = yield* Effect.fork(queue.take(Effect.succeed))
        yield* eventuallyStats("rounds", { pending: 0, claimed: 0, dead: 0 })
        yield* queue.offer({ n: count })
        expect(yield* eventually(Fiber.join(late))).toEqual({ n: count })
      })), 60_000)

    it.effect("attempts and maxAttempts count as without prefetch: a failing element is dead after its attempts", () =>
      run(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "failing", schema: Item })
        yield* offerAll(queue, 6)
        const seen: Array<{ n: number; attempts: number }> = []
        // Element 2 always fails; the others succeed (and prefetch the next).
        for (let i = 0; i < 7; i++) {
          yield* Effect.exit(queue.take(
            (value, { attempts }) =>
              Effect.zipRight(Effect.sync(() => seen.push({ n: value.n, attempts })), value.n === 2 ? Effect.fail("boom") : Effect.void),
            { maxAttempts: 2 }
          ))
        }
        expect(seen.filter(({ n }) => n === 2).map(({ attempts }) => attempts)).toEqual([0, 1])
        expect(seen.filter(({ n }) => n !== 2)).toEqual([0, 1, 3, 4, 5].map((n) => ({ n, attempts: 0 })))
        yield* eventuallyStats("failing", { pending: 0, claimed: 0, dead: 1 })
      })), 30_000)
  })
