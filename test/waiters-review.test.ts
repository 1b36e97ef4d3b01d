/**
 * A review of waiters (CONTRACT §7; docs/waking.md): every waiter wakes exactly when it should, and no wake is
 * lost when several waiters wait on one queue. Each test here failed on the code before its fix.
 *
 * A signal from this process completes the longest-waiting ticket of the queue (`signal(topic, 1)`). When that
 * waiter is interrupted after its ticket was completed and before it ran on (a take's timeout or a shutdown landing as
 * a job arrives), the signal is gone with it: nothing passes it on (the baton is passed only by a
 * waiter that claimed), and the other waiter of the queue sleeps on until its fallback poll (5 s by default)
 * although the job was claimable the whole time. On SqliteStore.layer nothing else wakes it; the other engines
 * mask the loss with their cross-process feed, which echoes the store's own commit (PostgreSQL's NOTIFY; the
 * data_version watcher over an application's client, whose own commits it cannot tell apart), so the tests run
 * on SqliteStore.layer only.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Layer, Option, Schema } from "effect"
import { EffectStores } from "../src/index.js"
import { sqliteOwned } from "./contract/harness.js"
import { advance, queueOf, settle } from "./contract/support.js"

const engine = sqliteOwned
const waits = <A, E>(fiber: Fiber.Fiber<A, E>) => Effect.map(Fiber.poll(fiber), Option.isNone)

describe(`waiters review: an interrupted waiter absorbs another's wake — ${engine.name}`, () => {
  // docs/waking.md: "A ticket exists only for one round of a waiter (`withTicket`) and is given back however the
  // round ends: a waiter that [...] was interrupted [...] leaves no ticket behind that would absorb the next signal
  // meant for a live waiter." and "`signal(queue, n)` wakes the `n` longest-waiting tickets: a commit of one job
  // wakes one worker"; CONTRACT §7: every waiter wakes on "a commit in this process that concerns it (immediately)".
  it.effect("a take interrupted as an enqueue's signal reaches it leaves the other waiting take asleep until the fallback poll", () =>
    Effect.gen(function*() {
      const q = yield* queueOf("absorbed-take")
      const first = yield* Effect.fork(q.take("first")) // the longest-waiting ticket
      yield* settle
      const second = yield* Effect.fork(q.take("second"))
      yield* settle
      // The enqueue signals `first`'s ticket; `first` is stopped (a timeout, a shutdown) before it runs on.
      yield* Effect.zipRight(q.enqueue("job"), Fiber.interrupt(first))
      yield* settle
      // Expected: `second` takes the job at once (no time passes). Observed: it waits for its fallback poll.
      const tookAtOnce = !(yield* waits(second))
      yield* advance("5 seconds")
      expect(Option.isSome(yield* Fiber.poll(second)), "the fallback poll delivers it").toBe(true)
      expect(tookAtOnce, "the second take got the job at once").toBe(true)
    }).pipe(Effect.provide(engine.store({ fallbackPoll: "5 seconds" }))))

  // docs/effect-stores.md: "`take`. Claims at once when an element is there; otherwise waits with alkstore's
  // waking: a commit in this process wakes it at once [...] there is no 1-second poll."
  it.effect("a PersistedQueue take interrupted as an offer's signal reaches it leaves the other waiting take asleep until the fallback poll", () =>
    Effect.gen(function*() {
      const pq = yield* PersistedQueue.make({ name: "absorbed-pq", schema: Schema.Number })
      const first = yield* Effect.fork(Effect.scoped(pq.take((n) => Effect.succeed(n))))
      yield* settle
      const second = yield* Effect.fork(Effect.scoped(pq.take((n) => Effect.succeed(n))))
      yield* settle
      yield* Effect.zipRight(pq.offer(1), Fiber.interrupt(first))
      yield* settle
      const tookAtOnce = !(yield* waits(second))
      yield* advance("5 seconds")
      expect(Option.isSome(yield* Fiber.poll(second)), "the fallback poll delivers it").toBe(true)
      expect(tookAtOnce, "the second take got the element at once").toBe(true)
    }).pipe(Effect.provide(PersistedQueue.layer.pipe(
      Layer.provideMerge(EffectStores.layerPersistedQueueStore()),
      Layer.provideMerge(engine.store({ fallbackPoll: "5 seconds" }))
    ))))
})
