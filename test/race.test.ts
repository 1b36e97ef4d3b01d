/**
 * src/internal/race.ts: a race that an interruption cannot hang. Effect 3's own races make both fibers in one
 * step and start them in the next; a fiber interrupted while it yields between the two awaits, as it ends, two
 * children that never started, for good. A small op budget hits that step at once (at Effect's default of
 * 2,048 it is one step in 2,048); `withLock` (a body racing its renewals) and the scheduler's leadership hung
 * so in the interruption sweeps (docs/decisions.md, "A race interrupted between its two steps").
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, Exit, Fiber, FiberRef } from "effect"
import { raceFirst, timeoutFail } from "../src/internal/race.js"

const realClock = Clock.make()

/** The (budget, k) points at which `make()`, interrupted after k yields under `budget`, never ends (2 s of real time). */
const hangs = (make: () => Effect.Effect<unknown, unknown>, budgets: ReadonlyArray<number>, ks: number) =>
  Effect.gen(function*() {
    const hung: Array<string> = []
    for (const budget of budgets) {
      for (let k = 0; k < ks; k++) {
        const fiber = yield* Effect.fork(Effect.withMaxOpsBeforeYield(make(), budget))
        for (let i = 0; i < k; i++) yield* Effect.yieldNow()
        const interrupting = yield* Effect.fork(Fiber.interrupt(fiber))
        const ended = yield* Effect.race(
          Effect.as(Fiber.await(interrupting), true),
          Effect.as(Effect.withClock(Effect.sleep(2_000), realClock), false)
        )
        if (!ended) {
          hung.push(`${budget}:${k}`)
          break // that fiber stays hung: the next budget
        }
      }
    }
    return hung
  })

describe("raceFirst (src/internal/race.ts)", () => {
  it.effect("interrupted at any step under any op budget from 10 up, it ends", () =>
    Effect.gen(function*() {
      // `Effect.raceFirst(Effect.never, Effect.never)` hangs here at 10:7, 11:3 and 13:1 (not run: a hung fiber
      // of the runtime's race keeps the scheduler busy for the rest of the file)
      const budgets = [10, 11, 12, 13, 16]
      expect(yield* hangs(() => raceFirst(Effect.never, Effect.never), budgets, 40)).toEqual([])
      expect(yield* hangs(() => timeoutFail(Effect.never, { duration: "1 hour", onTimeout: () => "late" }), budgets, 40))
        .toEqual([])
    }), { timeout: 60_000 })

  it.effect("the first side to end wins, success or failure; the other is interrupted and awaited", () =>
    Effect.gen(function*() {
      let stopped = false
      const loser = Effect.onInterrupt(Effect.never, () => Effect.sync(() => (stopped = true)))
      expect(yield* raceFirst(Effect.succeed(1), loser)).toBe(1)
      expect(stopped).toBe(true)
      stopped = false
      const failed = yield* Effect.exit(raceFirst(loser, Effect.fail("boom")))
      expect(failed).toEqual(Exit.fail("boom"))
      expect(stopped).toBe(true)
      expect(yield* Effect.exit(timeoutFail(Effect.never, { duration: "1 second", onTimeout: () => "late" })).pipe(
        Effect.fork,
        Effect.tap(() => Effect.sleep("1 second").pipe(Effect.withClock(realClock))),
        Effect.flatMap(Fiber.join)
      )).toEqual(Exit.fail("late"))
    }).pipe(Effect.withClock(realClock)))

  it.effect("the winner's fiber refs carry on, as with Effect.raceFirst", () =>
    Effect.gen(function*() {
      const ref = FiberRef.unsafeMake(0)
      const won = yield* raceFirst(Effect.as(Effect.never, "slow"), Effect.as(FiberRef.set(ref, 7), "fast"))
      expect({ won, ref: yield* FiberRef.get(ref) }).toEqual({ won: "fast", ref: 7 })
    }))

  it.effect("interrupting the caller interrupts both sides and waits for them", () =>
    Effect.gen(function*() {
      const stopped: Array<string> = []
      const side = (name: string) => Effect.onInterrupt(Effect.never, () => Effect.sync(() => stopped.push(name)))
      const fiber = yield* Effect.fork(raceFirst(side("a"), side("b")))
      yield* Effect.yieldNow()
      yield* Fiber.interrupt(fiber)
      expect(stopped.sort()).toEqual(["a", "b"])
    }))
})
