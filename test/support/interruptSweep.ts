/**
 * The interruption sweeps' steps (test/interrupt-sweep-review.test.ts, test/interrupt-sweep2-review.test.ts):
 * an operation run under a small op budget and interrupted after k yields of the test fiber, for every k.
 */
import { expect } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Option } from "effect"
import { eventually } from "../contract/support.js"

/** Runs `op` stepwise and interrupts it after `k` yields of this fiber: its exit, and whether it had ended first. */
export const interruptAfter = <X, E, R>(op: Effect.Effect<X, E, R>, k: number, budget = 10) =>
  Effect.gen(function*() {
    const fiber = yield* Effect.fork(Effect.withMaxOpsBeforeYield(op, budget))
    for (let i = 0; i < k; i++) yield* Effect.yieldNow()
    const done = Option.isSome(yield* Fiber.poll(fiber))
    const exit = yield* Fiber.interrupt(fiber)
    if (Exit.isFailure(exit)) expect({ k, defect: Cause.isDie(exit.cause) }).toEqual({ k, defect: false })
    return { exit, done }
  })

/** For k = 0, 1, 2, … until the operation ended before its interruption three times (at most `max`). */
export const sweep = <R>(max: number, body: (k: number) => Effect.Effect<boolean, unknown, R>) =>
  Effect.gen(function*() {
    let completed = 0
    for (let k = 0; k <= max && completed < 3; k++) if (yield* body(k)) completed++
  })

/** Whether `cond` holds within `seconds` of real time (polled). */
export const holdsWithin = <R>(cond: Effect.Effect<boolean, unknown, R>, seconds: number) =>
  Effect.map(Effect.exit(eventually(Effect.flatMap(cond, (ok) => (ok ? Effect.void : Effect.fail("not yet"))), seconds)), Exit.isSuccess)
