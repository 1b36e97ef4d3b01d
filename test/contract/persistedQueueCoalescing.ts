/**
 * PersistedQueue over alkstore with many takes at once: the claims of
 * concurrent takes are coalesced into shared claim transactions and their
 * settles into shared settle transactions (groupCommit.ts). Whatever is
 * shared, each element goes to one take, an element claimed for a take
 * interrupted meanwhile is released at once, and a settle that fails is
 * that take's own error.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Schema } from "effect"
import { EffectStores, Queues } from "../../src/index.js"
import { failing } from "./faults.js"
import type { EngineUnderTest } from "./harness.js"
import { advance, eventually, settle } from "./support.js"

const Item = Schema.Struct({ n: Schema.Number })

const stats = (name: string) => Effect.flatMap(Effect.flatMap(Queues.Queues, (q) => q.queue(name)), (q) => q.stats)

/** Offers `0 … count-1` in one transaction (one commit wakes every waiting take at once). */
const offerAll = (queue: PersistedQueue.PersistedQueue<typeof Item.Type>, count: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(Effect.forEach(Array.from({ length: count }, (_, n) => n), (n) => queue.offer({ n }), { discard: true })))

export const persistedQueueCoalescingContract = (engine: EngineUnderTest) =>
  describe(`PersistedQueue over EffectStores, concurrent takes — ${engine.name}`, () => {
    const layer = PersistedQueue.layer.pipe(
      Layer.provideMerge(EffectStores.layerPersistedQueueStore({ visibilityTimeout: "30 seconds" })),
      Layer.provideMerge(engine.store({ fallbackPoll: "1 hour" }))
    )
    const run = <A, E>(
      effect: Effect.Effect<A, E, PersistedQueue.PersistedQueueFactory | Queues.Queues | SqlClient.SqlClient>
    ) => Effect.scoped(Effect.provide(effect, layer))

    it.effect("many concurrent takes, waiting or not, each get a distinct element", () =>
      run(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "distinct", schema: Item })
        const count = 250
        const gate = yield* Deferred.make<void>()
        const seen: Array<number> = []
        // Half wait on an empty queue (woken by one commit), half come with the elements there.
        const hold = (value: { readonly n: number }) =>
          Effect.zipRight(Effect.sync(() => seen.push(value.n)), Deferred.await(gate))
        const waiting = yield* Effect.forEach(Array.from({ length: count / 2 }), () => Effect.fork(queue.take(hold)))
        yield* settle
        yield* offerAll(queue, count)
        const late = yield* Effect.forEach(Array.from({ length: count / 2 }), () => Effect.fork(queue.take(hold)))
        // Every take holds its element at once: all are claimed, none twice.
        yield* eventually(Effect.sync(() => expect(seen).toHaveLength(count)))
        expect(new Set(seen).size).toBe(count)
        expect(yield* stats("distinct")).toMatchObject({ pending: 0, claimed: count })
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.joinAll([...waiting, ...late])
        expect(yield* stats("distinct")).toMatchObject({ pending: 0, claimed: 0, dead: 0 })
      })), 60_000)

    it.effect("a take interrupted while its coalesced claim runs releases its element at once, with no attempt spent", () =>
      run(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "interrupted-batch", schema: Item })
        const count = 40
        const takers = yield* Effect.forEach(Array.from({ length: count }), () => Effect.fork(queue.take(() => Effect.never)))
        yield* settle
        // The commit wakes all; half are interrupted before their shared claim can have handed them anything.
        yield* offerAll(queue, count)
        yield* Fiber.interruptAll(takers.slice(0, count / 2))
        const kept = count / 2
        yield* eventually(Effect.flatMap(stats("interrupted-batch"), (s) => Effect.sync(() => expect(s).toMatchObject({ pending: count - kept, claimed: kept }))))
        // No time passes on the TestClock: the released elements are claimable now, not when a lease lapses.
        const again = yield* Effect.forEach(
          Array.from({ length: count - kept }),
          () => queue.take((value, { attempts }) => Effect.succeed({ n: value.n, attempts })),
          { concurrency: "unbounded" }
        )
        expect(again.every(({ attempts }) => attempts === 0)).toBe(true)
        expect(new Set(again.map(({ n }) => n)).size).toBe(count - kept)
        yield* Fiber.interruptAll(takers)
        expect(yield* stats("interrupted-batch")).toMatchObject({ pending: kept, claimed: 0, dead: 0 })
      })), 60_000)

    it.effect("a take inside the application's transaction never shares its claim or ack with other takes", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* PersistedQueue.make({ name: "in-transaction", schema: Item })
        yield* offerAll(queue, 2)
        const gate = yield* Deferred.make<void>()
        const heldOutside = yield* Deferred.make<void>()
        const heldInside = yield* Deferred.make<void>()
        const hold = (held: Deferred.Deferred<void>) => () => Effect.zipRight(Deferred.succeed(held, undefined), Deferred.await(gate))
        const outside = yield* Effect.fork(queue.take(hold(heldOutside)))
        yield* Deferred.await(heldOutside)
        const inside = yield* Effect.fork(
          sql.withTransaction(Effect.zipRight(queue.take(hold(heldInside)), Effect.fail("abort" as const)))
        )
        yield* Deferred.await(heldInside)
        // Both handlers end together. Shared, the outside take's ack would roll back with the transaction.
        yield* Deferred.succeed(gate, undefined)
        yield* Fiber.join(outside)
        expect(yield* Effect.flip(Fiber.join(inside))).toBe("abort")
        // The outside take's element is acked; the inside one's claim rolled back with its transaction. (The
        // outside take's ack may prefetch that element, given back within a turn of the event loop.)
        yield* eventually(Effect.flatMap(stats("in-transaction"), (s) => Effect.sync(() => expect(s).toMatchObject({ pending: 1, claimed: 0, dead: 0 }))))
      })), 30_000)

    it.effect("an ack that fails in a shared settle fails its own take with a PersistedQueueError; the others commit", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* PersistedQueue.make({ name: "settle-fault", schema: Item })
        const count = 5
        yield* offerAll(queue, count)
        const gate = yield* Deferred.make<void>()
        const takers = yield* Effect.forEach(
          Array.from({ length: count }),
          () => Effect.fork(queue.take((value) => Effect.as(Deferred.await(gate), value.n)))
        )
        yield* eventually(Effect.flatMap(stats("settle-fault"), (s) => Effect.sync(() => expect(s.claimed).toBe(count))))
        const rows = yield* sql<{ id: number | string }>`SELECT min(id) AS id FROM __alkstore_jobs WHERE queue = 'settle-fault'`
        const id = rows[0]!.id
        const fault = failing("__alkstore_jobs", "DELETE", `OLD.id = ${id}`)
        yield* fault.start
        // All handlers end together: their acks go in shared transactions, one of which cannot commit.
        yield* Deferred.succeed(gate, undefined)
        yield* settle
        yield* advance("10 seconds") // the failed ack's own retries back off on the clock
        const exits = yield* Effect.forEach(takers, Fiber.await)
        yield* fault.stop
        const failed = exits.filter(Exit.isFailure)
        expect(failed).toHaveLength(1)
        const error = Exit.isFailure(failed[0]!) ? (failed[0].cause as { error?: unknown }).error : undefined
        expect(error).toBeInstanceOf(PersistedQueue.PersistedQueueError)
        expect(String((error as PersistedQueue.PersistedQueueError).message)).toContain("acking")
        expect(exits.filter(Exit.isSuccess)).toHaveLength(count - 1)
        // The element whose ack failed is still claimed; it comes back when its lease lapses, that claim an attempt.
        expect(yield* stats("settle-fault")).toMatchObject({ pending: 0, claimed: 1 })
        const next = yield* Effect.fork(queue.take((_, { attempts }) => Effect.succeed(attempts)))
        yield* advance("31 seconds")
        expect(yield* eventually(Fiber.join(next))).toBe(1)
        expect(yield* stats("settle-fault")).toMatchObject({ pending: 0, claimed: 0, dead: 0 })
      })), 60_000)
  })
