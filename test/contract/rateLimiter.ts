/**
 * alkstore behind `@effect/experimental`'s RateLimiter
 * (EffectStores.layerRateLimiterStore). The first four scenarios are the
 * ones Effect tests its own store with (packages/experimental/test/
 * RateLimiter.test.ts: fixed-window and token-bucket, each with onExceeded
 * "delay" and "fail"); then random sequences against Effect's in-memory
 * store as the oracle (every result, delay, remaining and resetAfter equal),
 * the store's own rules, and bad input.
 */
import * as RateLimiter from "@effect/experimental/RateLimiter"
import { describe, expect, it } from "@effect/vitest"
import { fc } from "@fast-check/vitest"
import { Duration, Effect, Either, Layer, Runtime, TestClock } from "effect"
import { EffectStores } from "../../src/index.js"
import { fcParams } from "../properties/settings.js"
import type { EngineUnderTest } from "./harness.js"

type Consume = Parameters<RateLimiter.RateLimiter["consume"]>[0]

const outcome = (effect: Effect.Effect<RateLimiter.ConsumeResult, RateLimiter.RateLimiterError>) =>
  Effect.map(Effect.either(effect), Either.match({
    onLeft: (error) => error.reason === "Exceeded"
      ? { exceeded: { retryAfter: Duration.toMillis(error.retryAfter), limit: error.limit, remaining: error.remaining } }
      : { storeError: error.message },
    onRight: (result) => ({
      delay: Duration.toMillis(result.delay),
      limit: result.limit,
      remaining: result.remaining,
      resetAfter: Duration.toMillis(result.resetAfter)
    })
  }))

interface Op {
  readonly consume?: Omit<Consume, "key"> & { readonly key: "a" | "b" }
  readonly advance?: number
}

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.record({
      consume: fc.record({
        algorithm: fc.constantFrom("fixed-window" as const, "token-bucket" as const),
        onExceeded: fc.constantFrom("delay" as const, "fail" as const),
        window: fc.constantFrom(1_000, 60_000, 10_000, 7_000, 999),
        limit: fc.constantFrom(1, 3, 5, 2.5, 10),
        tokens: fc.constantFrom(0, 1, 1, 2, 6, 0.5, 2.5),
        key: fc.constantFrom("a" as const, "b" as const)
      })
    })
  },
  { weight: 1, arbitrary: fc.record({ advance: fc.constantFrom(1, 333, 999, 1_000, 1_001, 8_571, 12_000, 60_000) }) }
)

let runs = 0

export const rateLimiterContract = (engine: EngineUnderTest) =>
  describe(`RateLimiter over EffectStores — ${engine.name}`, () => {
    const layer = () =>
      RateLimiter.layer.pipe(
        Layer.provideMerge(EffectStores.layerRateLimiterStore),
        Layer.provideMerge(engine.store())
      )
    const run = <A, E>(effect: Effect.Effect<A, E, RateLimiter.RateLimiter | RateLimiter.RateLimiterStore>) =>
      Effect.provide(effect, layer())
    const consumer = (options: Consume) => Effect.map(RateLimiter.RateLimiter, (limiter) => limiter.consume(options))

    describe("Effect's own scenarios", () => {
      it.effect("fixed-window, onExceeded delay: past the limit each request waits one more window", () =>
        run(Effect.gen(function*() {
          const consume = yield* consumer({ algorithm: "fixed-window", onExceeded: "delay", window: "1 minute", limit: 5, key: "a" })
          yield* Effect.repeatN(consume, 3)
          expect((yield* consume).delay).toEqual(Duration.zero) // 5
          expect((yield* consume).delay).toEqual(Duration.minutes(1)) // 6
          yield* Effect.repeatN(consume, 2) // 7, 8, 9
          expect((yield* consume).delay).toEqual(Duration.minutes(1)) // 10
          expect((yield* consume).delay).toEqual(Duration.minutes(2)) // 11
        })))

      it.effect("fixed-window, onExceeded fail: RateLimitExceeded with retryAfter the window's rest, then a new window", () =>
        run(Effect.gen(function*() {
          const consume = yield* consumer({ algorithm: "fixed-window", onExceeded: "fail", window: "1 minute", limit: 5, key: "a" })
          yield* Effect.repeatN(consume, 3)
          expect((yield* consume).delay).toEqual(Duration.zero)
          let error = yield* Effect.flip(consume)
          expect(error.reason).toBe("Exceeded")
          expect(error).toMatchObject({ retryAfter: Duration.minutes(1), remaining: 0, limit: 5, key: "a" })
          yield* TestClock.adjust("30 seconds")
          error = yield* Effect.flip(consume)
          expect(error).toMatchObject({ reason: "Exceeded", retryAfter: Duration.seconds(30), remaining: 0 })
          yield* TestClock.adjust("30 seconds")
          const result = yield* consume
          expect(result.delay).toEqual(Duration.zero)
          expect(result.remaining).toBe(4)
        })))

      it.effect("token-bucket, onExceeded delay: one refill interval more per request past the bucket, refilled by time", () =>
        run(Effect.gen(function*() {
          const consume = yield* consumer({ algorithm: "token-bucket", onExceeded: "delay", window: "1 minute", limit: 5, key: "a" })
          const refill = Duration.unsafeDivide(Duration.minutes(1), 5)
          yield* Effect.repeatN(consume, 3)
          expect((yield* consume).delay).toEqual(Duration.zero) // 5
          expect((yield* consume).delay).toEqual(refill) // 6
          expect((yield* consume).delay).toEqual(Duration.times(refill, 2)) // 7
          yield* TestClock.adjust("1 minute")
          const result = yield* consume
          expect(result.delay).toEqual(Duration.zero)
          expect(result.remaining).toBe(2)
        })))

      it.effect("token-bucket, onExceeded fail: retryAfter one refill interval; refilled tokens are taken again", () =>
        run(Effect.gen(function*() {
          const consume = yield* consumer({ algorithm: "token-bucket", onExceeded: "fail", window: "1 minute", limit: 5, key: "a" })
          const refill = Duration.unsafeDivide(Duration.minutes(1), 5)
          yield* Effect.repeatN(consume, 3)
          expect((yield* consume).delay).toEqual(Duration.zero)
          const error = yield* Effect.flip(consume)
          expect(error).toMatchObject({ reason: "Exceeded", retryAfter: Duration.seconds(12), remaining: 0 })
          yield* TestClock.adjust(Duration.times(refill, 3))
          const result = yield* consume
          expect(result.delay).toEqual(Duration.zero)
          expect(result.remaining).toBe(2)
        })))
    })

    it.effect("random sequences agree with Effect's in-memory store: every result, error and duration (TestClock)", () =>
      run(Effect.gen(function*() {
        const ours = yield* RateLimiter.RateLimiter
        const oracle = yield* Effect.provide(RateLimiter.make, RateLimiter.layerStoreMemory)
        const runtime = Runtime.runPromise(yield* Effect.runtime<never>())
        const execute = (ops: ReadonlyArray<Op>) =>
          Effect.gen(function*() {
            const prefix = `run${++runs}:`
            const steps: Array<string> = []
            for (const step of ops) {
              steps.push(JSON.stringify(step))
              if (step.advance !== undefined) {
                yield* TestClock.adjust(step.advance)
                continue
              }
              const options = { ...step.consume!, key: prefix + step.consume!.key }
              const got = yield* outcome(ours.consume(options))
              const want = yield* outcome(oracle.consume(options))
              expect(got, steps.join(" → ")).toEqual(want)
            }
          })
        yield* Effect.promise(() =>
          fc.assert(fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 30 }), (ops) => runtime(execute(ops))), fcParams(60))
        )
      })), 120_000)

    describe("the store's rules", () => {
      it.effect("fixedWindow: a take over the limit is not counted and leaves the TTL; without a limit it always counts", () =>
        run(Effect.gen(function*() {
          const store = yield* RateLimiter.RateLimiterStore
          const take = (tokens: number, limit: number | undefined) =>
            store.fixedWindow({ key: "w", tokens, refillRate: Duration.seconds(10), limit })
          expect(yield* take(2, 3)).toEqual([2, 20_000])
          expect(yield* take(2, 3)).toEqual([4, 20_000]) // refused: count shows the overflow, TTL unchanged
          expect(yield* take(1, 3)).toEqual([3, 30_000])
          expect(yield* take(5, undefined)).toEqual([8, 80_000])
          yield* TestClock.adjust("80 seconds")
          expect(yield* take(1, 3)).toEqual([1, 10_000]) // lapsed: a new window from now
        })))

      it.effect("tokenBucket: a refused take stores nothing below zero; with overflow the debt is kept and refilled", () =>
        run(Effect.gen(function*() {
          const store = yield* RateLimiter.RateLimiterStore
          const take = (tokens: number, allowOverflow: boolean) =>
            store.tokenBucket({ key: "b", tokens, limit: 4, refillRate: Duration.seconds(1), allowOverflow })
          expect(yield* take(3, false)).toBe(1)
          expect(yield* take(3, false)).toBe(-2) // refused: 1 left
          expect(yield* take(3, true)).toBe(-2) // taken into debt
          yield* TestClock.adjust("2500 millis") // two whole refills; the half stays for later
          expect(yield* take(0, false)).toBe(0)
          yield* TestClock.adjust("500 millis")
          expect(yield* take(0, false)).toBe(1)
          yield* TestClock.adjust("1 hour")
          expect(yield* take(0, false)).toBe(4) // never past the limit
        })))

      it.effect("keys, and the two algorithms, are independent", () =>
        run(Effect.gen(function*() {
          const store = yield* RateLimiter.RateLimiterStore
          expect(yield* store.fixedWindow({ key: "k", tokens: 1, refillRate: Duration.seconds(1), limit: 1 })).toEqual([1, 1000])
          expect(yield* store.fixedWindow({ key: "k2", tokens: 1, refillRate: Duration.seconds(1), limit: 1 })).toEqual([1, 1000])
          expect(yield* store.tokenBucket({ key: "k", tokens: 1, limit: 1, refillRate: Duration.seconds(1), allowOverflow: false }))
            .toBe(0)
        })))

      it.effect("bad input is a RateLimitStoreError before anything is written", () =>
        run(Effect.gen(function*() {
          const store = yield* RateLimiter.RateLimiterStore
          const cases: ReadonlyArray<Effect.Effect<unknown, RateLimiter.RateLimiterError>> = [
            store.fixedWindow({ key: "", tokens: 1, refillRate: Duration.seconds(1), limit: 1 }),
            store.fixedWindow({ key: "x\u0000", tokens: 1, refillRate: Duration.seconds(1), limit: 1 }),
            store.fixedWindow({ key: "x", tokens: Number.NaN, refillRate: Duration.seconds(1), limit: 1 }),
            store.fixedWindow({ key: "x", tokens: -1, refillRate: Duration.seconds(1), limit: 1 }),
            store.tokenBucket({ key: "x", tokens: 1, refillRate: Duration.zero, limit: 1, allowOverflow: false }),
            store.tokenBucket({ key: "x", tokens: 1, refillRate: Duration.infinity, limit: 1, allowOverflow: false }),
            store.tokenBucket({ key: "x", tokens: 1, refillRate: Duration.seconds(1), limit: Number.POSITIVE_INFINITY, allowOverflow: false })
          ]
          for (const attempt of cases) {
            const error = yield* Effect.flip(attempt)
            expect(error).toBeInstanceOf(RateLimiter.RateLimitStoreError)
            expect(error.cause).toMatchObject({ _tag: "InvalidOptions" })
          }
          // nothing was written for "x": a first take sees a fresh window and a full bucket
          expect(yield* store.fixedWindow({ key: "x", tokens: 1, refillRate: Duration.seconds(1), limit: 1 })).toEqual([1, 1000])
          expect(yield* store.tokenBucket({ key: "x", tokens: 1, limit: 1, refillRate: Duration.seconds(1), allowOverflow: false }))
            .toBe(0)
        })))
    })
  })
