/**
 * Review of PersistedQueue and RateLimiter over alkstore (EffectStores) across the store's close: each test
 * is one defect against docs/effect-stores.md or what a careful user expects, and failed on the code before its fix.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import * as RateLimiter from "@effect/experimental/RateLimiter"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Context, Effect, Exit, Fiber, Layer, Option, Schema, Scope } from "effect"
import { EffectStores, Queues } from "../src/index.js"
import { freshFile, pgOwned, pgFromClient, sqliteFromClient } from "./contract/harness.js"

const Item = Schema.Struct({ n: Schema.Number })

const pqLayer = PersistedQueue.layer.pipe(
  Layer.provideMerge(EffectStores.layerPersistedQueueStore({ visibilityTimeout: "30 seconds" }))
)

const statsOf = (name: string) => Effect.flatMap(Effect.flatMap(Queues.Queues, (q) => q.queue(name)), (q) => q.stats)

const outcome = (exit: Exit.Exit<unknown, unknown>) => {
  if (Exit.isSuccess(exit)) return "success"
  if (Cause.isDie(exit.cause)) return "die"
  if (Cause.isInterruptedOnly(exit.cause)) return "interrupted"
  const error = Option.getOrUndefined(Cause.failureOption(exit.cause)) as { _tag?: string; reason?: string } | undefined
  return `fail: ${error?._tag}${error?.reason === undefined ? "" : `(${error.reason})`}`
}

// The engines whose close takes less than the prefetch sweep's event-loop turn (on SqliteStore.layer the
// close happens to outlast that turn, and the sweep gives the element back before the connection goes).
for (const engine of [sqliteFromClient, pgOwned, pgFromClient]) {
  describe(`PersistedQueue over EffectStores, the store closing before the PersistedQueue layer (review) — ${engine.name}`, () => {
    // docs/effect-stores.md, prefetch: "A held element leaves memory synchronously to exactly one of: a take, the
    // release at the turn's end, the store's close" and "Closing the store (its layer's scope) releases what it
    // holds"; src/internal/lifetime.ts: work that is not supervised "registers what it must give back with
    // `onClose`". When the alkstore store's scope closes first, the held element is released only later, from
    // the PersistedQueue layer's finalizer (or the sweep), on a closed connection: it stays claimed until its
    // lease lapses, and that claim then counts as an attempt for an element no handler ever saw (with
    // maxAttempts 1 it is buried unrun).
    it.live("an element held by prefetch when the store closes is given back by the store's close", () =>
      Effect.gen(function*() {
        const filename = freshFile("held-at-close")
        const storeScope = yield* Scope.make()
        const store = yield* Layer.buildWithScope(engine.store({ fallbackPoll: "1 hour", filename }), storeScope)
        const pqScope = yield* Scope.make()
        const pq = yield* Effect.provide(Layer.buildWithScope(pqLayer, pqScope), store)
        yield* Effect.gen(function*() {
          const queue = yield* PersistedQueue.make({ name: "held-at-close", schema: Item })
          for (let n = 0; n < 3; n++) yield* queue.offer({ n })
          yield* queue.take(() => Effect.void)
          yield* queue.take(() => Effect.void) // taken from the slot; its ack prefetches element 2
        }).pipe(Effect.scoped, Effect.provide(Context.merge(store, pq)))
        yield* Scope.close(storeScope, Exit.void)
        yield* Scope.close(pqScope, Exit.void)
        const stats = yield* Effect.scoped(Effect.provide(statsOf("held-at-close"), engine.store({ fallbackPoll: "1 hour", filename })))
        expect(stats).toMatchObject({ claimed: 0, pending: 1 })
      }), 20_000)
  })
}

describe(`RateLimiter over EffectStores, consumes in flight as the store closes (review) — ${pgOwned.name}`, () => {
  // A careful user expects an operation in flight when its store closes to end (succeed, or fail with the
  // store's typed error, as a consume after the close does: RateLimitStoreError), never to hang. On
  // PgStore.layer (whose pool the store owns) a consume waiting for a pool connection when the store closes is
  // never answered: pg-pool's `end()` drops its queue of pending acquisitions without calling them back.
  it.live("consumes started just before the store's close all end (success or RateLimitStoreError), none hangs", () =>
    Effect.gen(function*() {
      const storeScope = yield* Scope.make()
      const store = yield* Layer.buildWithScope(pgOwned.store({ fallbackPoll: "1 hour" }), storeScope)
      const limiter = yield* RateLimiter.make.pipe(Effect.provide(EffectStores.layerRateLimiterStore), Effect.provide(store))
      yield* limiter.consume({ key: "warm", limit: 1000, window: "1 minute" })
      const consumes = yield* Effect.forEach(Array.from({ length: 20 }, (_, i) => i), (i) =>
        Effect.fork(Effect.exit(limiter.consume({
          key: `closing-${i % 3}`,
          limit: 1000,
          window: "1 minute",
          algorithm: i % 2 === 0 ? "fixed-window" : "token-bucket"
        }))))
      yield* Effect.yieldNow()
      yield* Scope.close(storeScope, Exit.void)
      const exits = yield* Fiber.joinAll(consumes).pipe(Effect.timeout("3 seconds"), Effect.option)
      const outcomes = Option.match(exits, { onNone: () => ["hang"], onSome: (all) => [...new Set(all.map(outcome))] })
      expect(outcomes.filter((o) => o !== "success" && o !== "fail: RateLimiterError(StoreError)")).toEqual([])
    }), 20_000)
})
