import { Context } from "effect"
import type { EngineShape, PersistedQueueStorage, RateLimiterStorage } from "../engine.js"

/**
 * What every store layer gives the stores of Effect's own interfaces
 * (`EffectStores`) beyond the public services: the engine's storage for
 * what the queue mechanism lacks, and its write transaction. Opaque to
 * users: they only pass it on, by providing a store layer.
 */
export interface BackingShape {
  readonly persistedQueue: PersistedQueueStorage
  readonly rateLimiter: RateLimiterStorage
  readonly transaction: EngineShape["transaction"]
  /** Registers what the store's close must give back while its connection works (`Lifetime.onClose`). */
  readonly onStoreClose: EngineShape["lifetime"]["onClose"]
}

export class Backing extends Context.Tag("alkstore/EffectStores/Backing")<Backing, BackingShape>() {}

export const backingOf = (engine: EngineShape): BackingShape => ({
  persistedQueue: engine.persistedQueue,
  rateLimiter: engine.rateLimiter,
  transaction: engine.transaction,
  onStoreClose: engine.lifetime.onClose
})
