/**
 * Review of alkstore behind `@effect/experimental`'s PersistedQueue and
 * RateLimiter (EffectStores): each test is one defect against
 * docs/effect-stores.md, and failed on the code before its fix.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Layer, Schema } from "effect"
import { EffectStores } from "../src/index.js"
import { engines, type EngineUnderTest } from "./contract/harness.js"

const Item = Schema.Struct({ n: Schema.Number })

const layer = (engine: EngineUnderTest) =>
  PersistedQueue.layer.pipe(
    Layer.provideMerge(EffectStores.layerPersistedQueueStore()),
    Layer.provideMerge(engine.store({ fallbackPoll: "1 hour" }))
  )

for (const engine of engines) {
  describe(`PersistedQueue over EffectStores (review) — ${engine.name}`, () => {
    // docs/effect-stores.md: "A take's `maxAttempts` must be a whole number of at least 1, or `Infinity` …; `0`, a
    // negative or fractional number or `NaN` fails the take". 2^53 is a whole number of at least 1.
    it.effect("a take's maxAttempts may be any whole number of at least 1 (2^53 is accepted, not InvalidOptions)", () =>
      Effect.scoped(Effect.provide(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "big-max-attempts", schema: Item })
        yield* queue.offer({ n: 1 })
        const exit = yield* Effect.exit(queue.take(Effect.succeed, { maxAttempts: 2 ** 53 }))
        expect(Exit.isSuccess(exit), Exit.isFailure(exit) ? Cause.pretty(exit.cause) : "").toBe(true)
        expect(exit).toEqual(Exit.succeed({ n: 1 }))
      }), layer(engine))))
  })
}

// On SQLite a take runs in place, so the elements its predecessor's ack prefetched are still held when a take fails.
for (const engine of engines.filter((e) => e.capabilities.sqliteFile)) {
  describe(`PersistedQueue over EffectStores, prefetch (review) — ${engine.name}`, () => {
    // docs/effect-stores.md, take: "any other failure …: retried at once, due behind what was already due (… an
    // element offered in the same millisecond as the retry — every offer under a `TestClock` nobody moved — ties
    // on its due time and goes by id, so the older, retried element comes first)".
    it.effect("a failed element retried in the millisecond its successors were offered is taken before them, even when they were prefetched", () =>
      Effect.scoped(Effect.provide(Effect.gen(function*() {
        const queue = yield* PersistedQueue.make({ name: "retry-tie-prefetch", schema: Item })
        for (let n = 0; n < 6; n++) yield* queue.offer({ n })
        const seen: Array<number> = []
        let failed = false
        for (let i = 0; i < 6; i++) {
          yield* queue.take((value) =>
            Effect.suspend(() => {
              seen.push(value.n)
              if (value.n === 2 && !failed) {
                failed = true
                return Effect.fail("boom")
              }
              return Effect.void
            })
          ).pipe(Effect.ignore)
        }
        // 0 and 1 succeed (1 taken from the slot doubles the prefetch: 2 and 3 are held), 2 fails and is retried
        // at the same instant as 3 was offered: by the documented order, 2 (older id) is next, then 3.
        expect(seen).toEqual([0, 1, 2, 2, 3, 4])
      }), layer(engine))))
  })
}
