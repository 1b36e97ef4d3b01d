import * as RateLimiter from "@effect/experimental/RateLimiter"
import { Duration, Effect } from "effect"
import { InvalidOptions } from "../../StoreError.js"
import { checkText } from "../options.js"
import { Backing } from "./backing.js"

const storeError = (message: string) => (cause: unknown) => new RateLimiter.RateLimitStoreError({ message, cause })

const invalid = (field: string, reason: string) =>
  Effect.fail(storeError(`invalid rate limit ${field}`)(new InvalidOptions({ field, reason })))

/** Bad input is a typed error before anything is written (a refill interval is the window over the limit). */
const checkInput = (options: {
  readonly key: string
  readonly tokens: number
  readonly refillRate: Duration.Duration
  readonly limit: number | undefined
}): Effect.Effect<number, RateLimiter.RateLimitStoreError> => {
  const keyError = checkText("key", options.key)
  if (keyError !== undefined) return Effect.fail(storeError("invalid rate limit key")(keyError))
  if (typeof options.tokens !== "number" || !Number.isFinite(options.tokens) || options.tokens < 0) {
    return invalid("tokens", "must be a finite number ≥ 0")
  }
  if (options.limit !== undefined && (typeof options.limit !== "number" || !Number.isFinite(options.limit))) {
    return invalid("limit", "must be a finite number")
  }
  if (!Duration.isDuration(options.refillRate)) return invalid("window", "is not a duration")
  const refillMillis = Duration.toMillis(options.refillRate)
  if (!Number.isFinite(refillMillis) || refillMillis <= 0) {
    return invalid("window", "must be positive and finite (the refill interval is window / limit)")
  }
  return Effect.succeed(refillMillis)
}

/**
 * `@effect/experimental`'s `RateLimiterStore` over the store's tables: a
 * take is one upsert (in a transaction where it must wait for its key:
 * the engines' rateLimiterStorage.ts), atomic across processes (and, on PostgreSQL, hosts),
 * with time from the fiber's `Clock` (on PostgreSQL by default the host
 * clock aligned with the server's, so hosts agree), read once the take holds
 * its key: a take that waited for another's is judged when it is made.
 */
export const make: Effect.Effect<RateLimiter.RateLimiterStore["Type"], never, Backing> = Effect.map(
  Backing,
  ({ rateLimiter: storage }) =>
    RateLimiter.RateLimiterStore.of({
      fixedWindow: (options) =>
        Effect.gen(function*() {
          const refillMillis = yield* checkInput(options)
          const { count, expiresAt, now } = yield* storage.fixedWindow({
            key: options.key,
            tokens: options.tokens,
            refillMillis,
            limit: options.limit,
            clock: yield* Effect.clock
          }).pipe(Effect.mapError(storeError("Failed to take from a fixed-window rate limit")))
          return [count, expiresAt - now] as const
        }),
      tokenBucket: (options) =>
        Effect.gen(function*() {
          const refillMillis = yield* checkInput(options)
          return yield* storage.tokenBucket({
            key: options.key,
            tokens: options.tokens,
            refillMillis,
            limit: options.limit,
            allowOverflow: options.allowOverflow,
            clock: yield* Effect.clock
          }).pipe(Effect.mapError(storeError("Failed to take from a token-bucket rate limit")))
        })
    })
)
