/**
 * Edge cases of PersistedQueue over EffectStores, with Effect's own memory
 * store as the oracle where the interfaces' behaviour is in question.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { describe, expect, it } from "@effect/vitest"
import * as RateLimiter from "@effect/experimental/RateLimiter"
import { Cause, Context, Deferred, Duration, Effect, Either, Exit, Fiber, Layer, Option, Schema, Scope, TestClock } from "effect"
import { EffectStores, Queues } from "../src/index.js"
import { engines, type EngineUnderTest } from "./contract/harness.js"
import { notDelivered, settle, stats } from "./contract/persistedQueue.js"

const Item = Schema.Struct({ n: Schema.Number })

const memory = { name: "memory (oracle)", layer: () => PersistedQueue.layer.pipe(Layer.provideMerge(PersistedQueue.layerStoreMemory)) }

type Services = PersistedQueue.PersistedQueueFactory | PersistedQueue.PersistedQueueStore

/** Scenarios whose outcome is compared with the memory store's. */
const scenarios: Record<string, (name: string) => Effect.Effect<unknown, unknown, Services>> = {
  "a defect counts as a failed attempt, an interruption does not": (name) =>
    Effect.gen(function*() {
      const queue = yield* PersistedQueue.make({ name, schema: Item })
      yield* queue.offer({ n: 0 })
      const seen: Array<[number, number]> = []
      yield* queue.take((value, { attempts }) => Effect.suspend(() => {
        seen.push([value.n, attempts])
        return Effect.die("defect")
      })).pipe(Effect.exit)
      const started = yield* Deferred.make<void>()
      const fiber = yield* Effect.fork(queue.take((value, { attempts }) => Effect.suspend(() => {
        seen.push([value.n, attempts])
        return Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)
      })))
      yield* Deferred.await(started)
      yield* Fiber.interrupt(fiber)
      yield* queue.take((value, { attempts }) => Effect.sync(() => seen.push([value.n, attempts])))
      return seen
    }),
  "the same custom id offered by 20 concurrent fibers is one element": (name) =>
    Effect.gen(function*() {
      const queue = yield* PersistedQueue.make({ name, schema: Item })
      yield* Effect.forEach(Array.from({ length: 20 }, (_, n) => n), (n) => queue.offer({ n }, { id: `${name}:dup` }), {
        concurrency: "unbounded",
        discard: true
      })
      yield* queue.offer({ n: 100 })
      const seen: Array<string> = []
      for (let i = 0; i < 2; i++) yield* queue.take((_, { id }) => Effect.sync(() => seen.push(id === `${name}:dup` ? "dup" : "other")))
      return seen
    })
}

const oracle = new Map<string, unknown>()

describe("PersistedQueue edges — memory store (oracle)", () => {
  for (const [title, scenario] of Object.entries(scenarios)) {
    it.effect(title, () =>
      Effect.scoped(Effect.provide(Effect.map(scenario("q"), (result) => {
        oracle.set(title, result)
      }), memory.layer())))
  }
})

const storeLayer = (engine: EngineUnderTest) =>
  PersistedQueue.layer.pipe(
    Layer.provideMerge(EffectStores.layerPersistedQueueStore()),
    Layer.provideMerge(engine.store({ fallbackPoll: "1 hour" }))
  )

for (const engine of engines) {
  describe(`PersistedQueue edges — ${engine.name}`, () => {
    let i = 0
    for (const [title, scenario] of Object.entries(scenarios)) {
      it.effect(`${title} (as the memory store)`, () =>
        Effect.scoped(Effect.provide(Effect.map(scenario(`edge-${i++}`), (result) => {
          expect(result).toEqual(oracle.get(title))
        }), storeLayer(engine))))
    }

    it.effect("a failed element is retried behind the elements offered a millisecond or more before its retry", () =>
      Effect.scoped(Effect.provide(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "retry-after-tick", schema: Item })
        for (let n = 0; n < 3; n++) yield* queue.offer({ n })
        yield* TestClock.adjust(1)
        const seen: Array<number> = []
        yield* queue.take((value) => Effect.sync(() => seen.push(value.n)).pipe(Effect.zipRight(Effect.fail("boom")))).pipe(Effect.ignore)
        for (let i = 0; i < 3; i++) yield* queue.take((value) => Effect.sync(() => seen.push(value.n)))
        expect(seen).toEqual([0, 1, 2, 0])
      }), storeLayer(engine))))

    it.effect("maxAttempts 3: the element is dead after its third failure, nothing pending or claimed", () =>
      Effect.scoped(Effect.provide(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "dead-after-3", schema: Item })
        yield* queue.offer({ n: 0 })
        let runs = 0
        for (let k = 0; k < 3; k++) {
          yield* queue.take(() => Effect.sync(() => runs++).pipe(Effect.zipRight(Effect.fail("boom"))), { maxAttempts: 3 }).pipe(Effect.ignore)
        }
        expect(runs).toBe(3)
        yield* settle
        expect(yield* stats("dead-after-3")).toMatchObject({ pending: 0, claimed: 0, dead: 1 })
        const next = yield* Effect.fork(queue.take(() => Effect.sync(() => runs++), { maxAttempts: 3 }))
        yield* notDelivered(next)
        yield* Fiber.interrupt(next)
        expect(runs).toBe(3)
      }), storeLayer(engine))))

    it.live("an offer and a take after the store layer closed fail with a PersistedQueueError (no defect, no hang)", () =>
      Effect.gen(function*() {
        const scope = yield* Scope.make()
        const context = yield* Layer.buildWithScope(storeLayer(engine), scope)
        const store = Context.get(context, PersistedQueue.PersistedQueueStore)
        yield* store.offer({ name: "closed", id: "closed-1", element: { n: 1 }, isCustomId: true })
        yield* Scope.close(scope, Exit.void)
        const offered = yield* Effect.exit(store.offer({ name: "closed", id: "closed-2", element: { n: 2 }, isCustomId: true }))
        expect(Exit.isFailure(offered) && Cause.failureOption(offered.cause)._tag === "Some", `offer: ${String(Exit.isFailure(offered) ? Cause.pretty(offered.cause) : "success")}`).toBe(true)
        const taken = yield* Effect.exit(Effect.scoped(store.take({ name: "closed", maxAttempts: 10 })).pipe(Effect.timeoutFail({ duration: "3 seconds", onTimeout: () => "hung" })))
        expect(Exit.isFailure(taken) && Cause.failureOption(taken.cause)._tag === "Some", `take: ${String(Exit.isFailure(taken) ? Cause.pretty(taken.cause) : "success")}`).toBe(true)
        if (Exit.isFailure(taken)) expect(Cause.failureOption(taken.cause).pipe(Option.getOrUndefined)).toBeInstanceOf(PersistedQueue.PersistedQueueError)
      }))

    it.effect("generated ids: re-offering the id offer returned as a custom id adds a second element (documented: generated ids are not recorded; memory and @effect/sql dedupe it)", () =>
      Effect.scoped(Effect.provide(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "generated-reoffer", schema: Item })
        const id = yield* queue.offer({ n: 1 })
        yield* queue.offer({ n: 1 }, { id })
        expect(yield* stats("generated-reoffer")).toMatchObject({ pending: 2 })
      }), storeLayer(engine))))

    it.effect("RateLimiter at a real-world epoch (TestClock at ~2025) agrees with the memory store over a pseudo-random sequence", () =>
      Effect.scoped(Effect.provide(Effect.gen(function*() {
        yield* TestClock.setTime(1_764_000_000_123)
        const ours = yield* RateLimiter.RateLimiter
        const oracleLimiter = yield* Effect.provide(RateLimiter.make, RateLimiter.layerStoreMemory)
        const outcome = (effect: Effect.Effect<RateLimiter.ConsumeResult, RateLimiter.RateLimiterError>) =>
          Effect.map(Effect.either(effect), Either.match({
            onLeft: (error) => error.reason === "Exceeded" ? { retryAfter: Duration.toMillis(error.retryAfter), remaining: error.remaining } : { storeError: error.message },
            onRight: (r) => ({ delay: Duration.toMillis(r.delay), remaining: r.remaining, resetAfter: Duration.toMillis(r.resetAfter) })
          }))
        let seed = 12345
        const rnd = (n: number) => {
          seed = (seed * 1103515245 + 12345) % 2147483648
          return seed % n
        }
        const windows = [999, 1_000, 7_000, 60_000]
        const limits = [1, 3, 2.5, 7]
        const tokens = [0, 1, 1, 2, 0.5, 3]
        const steps: Array<string> = []
        for (let k = 0; k < 150; k++) {
          if (rnd(3) === 0) {
            const by = [1, 333, 999, 1_001, 8_571][rnd(5)]!
            steps.push(`+${by}`)
            yield* TestClock.adjust(by)
            continue
          }
          const options = {
            algorithm: rnd(2) === 0 ? "fixed-window" as const : "token-bucket" as const,
            onExceeded: rnd(2) === 0 ? "delay" as const : "fail" as const,
            window: windows[rnd(windows.length)]!,
            limit: limits[rnd(limits.length)]!,
            tokens: tokens[rnd(tokens.length)]!,
            key: `epoch:${rnd(2)}`
          }
          steps.push(JSON.stringify(options))
          expect(yield* outcome(ours.consume(options)), steps.join(" → ")).toEqual(yield* outcome(oracleLimiter.consume(options)))
        }
      }), RateLimiter.layer.pipe(Layer.provideMerge(EffectStores.layerRateLimiterStore), Layer.provideMerge(engine.store({ fallbackPoll: "1 hour" }))))))
  })
}
void Queues
