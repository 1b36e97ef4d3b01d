/**
 * PersistedQueue over alkstore: an interrupted take never strands its
 * element. An interruption may land at any point of a take — while it
 * waits, while its claim is in flight (the claim's write may already have
 * committed), while the handler runs — and whichever it is, the element is
 * claimable again at once when the take is gone: released, never left
 * claimed until its lease lapses.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Duration, Effect, Fiber, Layer, Schema } from "effect"
import { EffectStores, Queues } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"

const Item = Schema.Struct({ n: Schema.Number })
const realClock = Clock.make()

const stats = (name: string) => Effect.flatMap(Effect.flatMap(Queues.Queues, (q) => q.queue(name)), (q) => q.stats)

/** Where round `round` interrupts its takes: after a sweep of scheduler yields, and on an asynchronous engine a little real time. */
const pause = (round: number) =>
  Effect.gen(function*() {
    for (let i = 0; i < round % 13; i++) yield* Effect.yieldNow()
    if (round % 3 !== 0) yield* Effect.sleep(Duration.micros(BigInt((round * 337) % 1500))).pipe(Effect.withClock(realClock))
  })

export const persistedQueueInterruptionContract = (engine: EngineUnderTest) =>
  describe(`PersistedQueue over EffectStores, interrupted takes — ${engine.name}`, () => {
    const layer = PersistedQueue.layer.pipe(
      Layer.provideMerge(EffectStores.layerPersistedQueueStore()),
      Layer.provideMerge(engine.store({ fallbackPoll: "1 hour" }))
    )

    it.effect("takes interrupted at any point leave every element claimable at once (no lease lapse)", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* PersistedQueue.make({ name: "interrupted", schema: Item })
        const rounds = 120
        for (let round = 0; round < rounds; round++) {
          // Handlers that never end: each take ends by its interruption, wherever that lands.
          const takers = yield* Effect.forEach([0, 1, 2], () => Effect.fork(queue.take(() => Effect.never)))
          // The offer's transaction yields before its commit, so a claim it wakes may wait for the connection.
          yield* sql.withTransaction(Effect.zipLeft(queue.offer({ n: round }), Effect.yieldNow()))
          yield* pause(round)
          yield* Fiber.interruptAll(takers)
        }
        // No time has passed on the TestClock: no lease can have lapsed.
        expect(yield* stats("interrupted"), "every element is claimable again").toMatchObject({ pending: rounds, claimed: 0 })
        const taken = yield* Effect.forEach(
          Array.from({ length: rounds }),
          () => queue.take((value, { attempts }) => Effect.succeed({ n: value.n, attempts }))
        )
        expect(taken.map(({ n }) => n).sort((a, b) => a - b)).toEqual(Array.from({ length: rounds }, (_, i) => i))
        // an interruption spends no attempt
        expect(taken.every(({ attempts }) => attempts === 0)).toBe(true)
        expect(yield* stats("interrupted")).toMatchObject({ pending: 0, claimed: 0, dead: 0 })
      }).pipe(Effect.scoped, Effect.provide(layer)), 60_000)
  })
