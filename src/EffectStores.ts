/**
 * alkstore behind Effect's own interfaces (`@effect/experimental`): a
 * `PersistedQueueStore` and a `RateLimiterStore` over the store's own
 * tables, so a program written against `PersistedQueue` or `RateLimiter`
 * swaps one layer and gets alkstore's pushed, fenced queues and fleet-wide
 * rate limits on SQLite or PostgreSQL, without Redis.
 *
 * Both layers are built from any store layer (`SqliteStore.layer`,
 * `SqliteStore.layerFromClient`, `PgStore.layer`, `PgStore.layerFromClient`):
 *
 * ```ts
 * PersistedQueue.layer.pipe(
 *   Layer.provide(EffectStores.layerPersistedQueueStore()),
 *   Layer.provide(SqliteStore.layer({ filename: "app.db" }))
 * )
 * ```
 *
 * See docs/effect-stores.md for the semantics and the decisions.
 *
 * @module
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import * as RateLimiter from "@effect/experimental/RateLimiter"
import { type Effect, Layer, type Scope } from "effect"
import { Backing as BackingTag } from "./internal/effectStores/backing.js"
import * as persistedQueue from "./internal/effectStores/persistedQueue.js"
import * as rateLimiter from "./internal/effectStores/rateLimiter.js"
import type { Queues } from "./Queues.js"
import type { InvalidOptions } from "./StoreError.js"

/** What every store layer provides for these stores (opaque: provide a store layer). */
export const Backing = BackingTag
export type Backing = BackingTag

/** `layerPersistedQueueStore`'s options: the lease of a taken element (`visibilityTimeout`, default 2 minutes). */
export type PersistedQueueStoreOptions = persistedQueue.PersistedQueueStoreOptions

/**
 * The `PersistedQueueStore` over the store's queues (validates `options`
 * first); its lease-renewal fiber lives in the scope.
 */
export const makePersistedQueueStore: (
  options?: PersistedQueueStoreOptions
) => Effect.Effect<PersistedQueue.PersistedQueueStore["Type"], InvalidOptions, Queues | Backing | Scope.Scope> =
  persistedQueue.make

/** `makePersistedQueueStore` as a layer: provide it to `PersistedQueue.layer`. */
export const layerPersistedQueueStore = (
  options?: PersistedQueueStoreOptions
): Layer.Layer<PersistedQueue.PersistedQueueStore, InvalidOptions, Queues | Backing> =>
  Layer.scoped(PersistedQueue.PersistedQueueStore, persistedQueue.make(options))

/** The `RateLimiterStore` over the store's tables. */
export const makeRateLimiterStore: Effect.Effect<RateLimiter.RateLimiterStore["Type"], never, Backing> = rateLimiter.make

/** `makeRateLimiterStore` as a layer: provide it to `RateLimiter.layer`. */
export const layerRateLimiterStore: Layer.Layer<RateLimiter.RateLimiterStore, never, Backing> = Layer.effect(
  RateLimiter.RateLimiterStore,
  rateLimiter.make
)
