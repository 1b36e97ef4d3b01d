import { Deferred, type Duration, Effect, Fiber } from "effect"

/**
 * `Effect.raceFirst` without a window in which an interruption hangs it.
 *
 * Effect 3's races (`raceFibersWith`, under `race`, `raceFirst`, `raceWith`
 * and `timeout`) make both fibers in one step and start them in the next,
 * inside the `async` that waits for them. A fiber that yields to the
 * scheduler between the two steps (its op budget ran out exactly there) and
 * is interrupted meanwhile never runs the second: it ends, and as it ends it
 * interrupts and awaits its children — two fibers never started, which no
 * interruption reaches. It waits for them for good. With Effect's default
 * budget of 2,048 steps the window is one step in 2,048 and needs the
 * interruption to arrive during that hop; at small budgets it is hit at once
 * (`Effect.raceFirst(Effect.never, Effect.never)` under
 * `withMaxOpsBeforeYield(10)`, interrupted after 7 yields; docs/decisions.md).
 *
 * Here both sides are forked — made and started in the same step — from an
 * uninterruptible region, each running its effect with the caller's
 * interruptibility; the caller awaits the first exit where it can be
 * interrupted, and whatever ends the wait interrupts both sides and awaits
 * them, as `raceFirst` does with its loser.
 */
export const raceFirst = <A, E, R, A2, E2, R2>(
  self: Effect.Effect<A, E, R>,
  that: Effect.Effect<A2, E2, R2>
): Effect.Effect<A | A2, E | E2, R | R2> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(Deferred.make<A | A2, E | E2>(), (first) => {
      let winner: Fiber.RuntimeFiber<unknown, unknown> | undefined
      const side = <X extends A | A2, Y extends E | E2, Z>(effect: Effect.Effect<X, Y, Z>) =>
        Effect.withFiberRuntime<void, never, Z>((fiber) =>
          Effect.flatMap(Effect.exit(restore(effect)), (exit) =>
            Effect.map(Deferred.done(first, exit), (won) => {
              if (won) winner = fiber
            }))
        )
      return Effect.flatMap(Effect.fork(side(self)), (left) =>
        Effect.flatMap(Effect.fork(side(that)), (right) =>
          Effect.exit(restore(Deferred.await(first))).pipe(
            Effect.ensuring(Fiber.interruptAll([left, right])),
            // As `raceFirst` does: the winner's fiber refs (log annotations, a `FiberRef.set` in it) carry on.
            Effect.tap(() => (winner === undefined ? Effect.void : Fiber.inheritAll(winner))),
            Effect.flatten
          )))
    })
  )

/** `Effect.timeoutFail` over `raceFirst` above (Effect's own races through the same window). */
export const timeoutFail = <A, E, R, E2>(
  effect: Effect.Effect<A, E, R>,
  options: { readonly duration: Duration.DurationInput; readonly onTimeout: () => E2 }
): Effect.Effect<A, E | E2, R> =>
  raceFirst(effect, Effect.flatMap(Effect.sleep(options.duration), () => Effect.fail(options.onTimeout())))

/**
 * `Effect.all(Array(n).fill(effect), { concurrency: "unbounded", discard: true })` for effects that never
 * succeed (a queue's workers), without the same kind of window: Effect 3's concurrent `forEach` forks its
 * processing fiber but only schedules its start, and an interruption that arrives first empties its work list,
 * so that fiber never starts a worker nor ends, and the interrupted caller awaits it for good (reproduced with
 * `Effect.all([Effect.never], { concurrency: "unbounded", discard: true })` under `withMaxOpsBeforeYield(32)`,
 * interrupted at once). Here each copy is forked (made and started in one step) from an uninterruptible
 * region, interruptible itself; the first failure stops the others and is the caller's, and an interruption
 * of the caller stops them all and awaits them.
 */
export const untilFirstFailure = <E, R>(effect: Effect.Effect<never, E, R>, copies: number): Effect.Effect<never, E, R> =>
  copies === 1 ? effect : Effect.uninterruptibleMask((restore) =>
    Effect.flatMap(Deferred.make<never, E>(), (failed) =>
      Effect.flatMap(
        Effect.forEach(
          Array.from({ length: copies }),
          () => Effect.fork(Effect.onExit(Effect.interruptible(effect), (exit) => Deferred.done(failed, exit)))
        ),
        (fibers) => Effect.ensuring(restore(Deferred.await(failed)), Fiber.interruptAll(fibers))
      ))
  )
