/**
 * The group commit behind EffectStores' PersistedQueue store, engine-free:
 * requests submitted together are served by one batch, those submitted while
 * a batch runs by the next one, each gets its own outcome, and a lone
 * request runs directly.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber } from "effect"
import { makeGroupCommit } from "../src/internal/effectStores/groupCommit.js"

const recorder = (gate?: Deferred.Deferred<void>) => {
  const batches: Array<ReadonlyArray<number>> = []
  const serve = (inputs: ReadonlyArray<number>) =>
    Effect.gen(function*() {
      batches.push(inputs)
      if (gate !== undefined && batches.length === 1) yield* Deferred.await(gate)
      // odd inputs fail: each outcome belongs to its own request
      return inputs.map((n) => (n % 2 === 0 ? Exit.succeed(n * 10) : Exit.fail(`odd ${n}`)))
    })
  return { batches, serve }
}

describe("group commit (EffectStores' claim coalescing and settle batching)", () => {
  it.effect("concurrent requests are served by one batch, each with its own outcome", () =>
    Effect.gen(function*() {
      const { batches, serve } = recorder()
      const group = makeGroupCommit(serve, 100, { othersAround: () => true, probeEvery: 16 })
      const exits = yield* Effect.forEach(Array.from({ length: 50 }, (_, i) => i), (n) => Effect.exit(group.submit(n)), {
        concurrency: "unbounded"
      })
      expect(batches.map((b) => b.length)).toEqual([50])
      exits.forEach((exit, n) => expect(exit).toEqual(n % 2 === 0 ? Exit.succeed(n * 10) : Exit.fail(`odd ${n}`)))
    }))

  it.effect("requests submitted while a batch runs are served together by the next one; batches are capped", () =>
    Effect.gen(function*() {
      const gate = yield* Deferred.make<void>()
      const { batches, serve } = recorder(gate)
      const group = makeGroupCommit(serve, 4, { othersAround: () => true, probeEvery: 16 })
      const first = yield* Effect.fork(group.submit(0))
      yield* Effect.yieldNow()
      yield* Effect.yieldNow()
      expect(batches).toEqual([[0]])
      const later = yield* Effect.forEach([2, 4, 6, 8, 10, 12], (n) => Effect.fork(group.submit(n)))
      yield* Effect.yieldNow()
      expect(batches).toEqual([[0]])
      yield* Deferred.succeed(gate, undefined)
      expect(yield* Fiber.join(first)).toBe(0)
      expect(yield* Fiber.joinAll(later)).toEqual([20, 40, 60, 80, 100, 120])
      expect(batches).toEqual([[0], [2, 4, 6, 8], [10, 12]])
    }))

  it.effect("a lone request with nobody around runs its direct effect; the probe still gathers now and then", () =>
    Effect.gen(function*() {
      const { batches, serve } = recorder()
      const group = makeGroupCommit(serve, 100, { othersAround: () => false, probeEvery: 4 })
      const results: Array<number> = []
      for (let n = 0; n < 8; n += 2) results.push(yield* group.submit(n, Effect.succeed(-n)))
      // every 4th lone request gathers (served by a batch of its own), the others run directly
      expect(results).toEqual([-0, -2, -4, 60])
      expect(batches).toEqual([[6]])
    }))

  it.effect("a serve that dies fails every request of its batch, and the group goes on", () =>
    Effect.gen(function*() {
      let calls = 0
      const group = makeGroupCommit(
        (inputs: ReadonlyArray<number>) => (calls++ === 0 ? Effect.die("boom") : Effect.succeed(inputs.map((n) => Exit.succeed(n)))),
        100,
        { othersAround: () => true, probeEvery: 16 }
      )
      const exits = yield* Effect.forEach([1, 2, 3], (n) => Effect.exit(group.submit(n)), { concurrency: "unbounded" })
      expect(exits.every((exit) => Exit.isFailure(exit))).toBe(true)
      expect(yield* group.submit(4)).toBe(4)
    }))
})
