import { SqlError } from "@effect/sql/SqlError"
import { Cause, Effect, Fiber, type Scope } from "effect"
import type { WakeHub } from "./wake.js"

/**
 * What a store's long-lived work does when the store closes under it.
 *
 * A worker (`process`, an outbox's `run`), a scheduler runner and a
 * `withLock` body are often forked by the application (`Effect.fork`), and a
 * forked fiber is interrupted only when its parent ends — after `provide`
 * has closed the store's scope. Their finalizers (give a claim back, release
 * the leadership lease or the lock) would then run on a closed connection and
 * fail: an attempt spent and the job stuck until its lease lapses, a lease
 * and a lock held to their TTL. So the store stops them itself, first, while
 * its connection still works, and waits until they gave back what they hold;
 * then it fails every waiter left (a `take`), which nobody would wake again.
 * Work that is not an effect to supervise (a `stream`, pulled by whoever
 * consumes it) registers what it must give back with `onClose` instead.
 */
export interface Lifetime {
  /** Runs `effect` until it ends or the store closes: then it is interrupted, and fails with `storeClosedError`. */
  readonly supervise: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>
  /** Runs `effect` in a fiber of its own, which the close waits for (never interrupts) before the connection closes. */
  readonly background: (effect: Effect.Effect<void>) => Effect.Effect<Fiber.Fiber<void>>
  /**
   * Registers `cleanup` for the store's close while `scope` lasts: the close runs it after the supervised work
   * stopped and the waiters failed, and waits for it. Nothing is registered once the store closed.
   */
  readonly onClose: (cleanup: Effect.Effect<void>) => Effect.Effect<void, never, Scope.Scope>
  /**
   * Stops the supervised work (every fiber told at once, then each awaited: one stuck handler does not keep
   * the others running), waits for its finalizers and the background work, fails the waiters, runs the
   * registered cleanups. Run before the connection closes.
   */
  readonly close: Effect.Effect<void>
}

/** What work and waits of a closed store fail with. */
export const storeClosedError = (): SqlError =>
  new SqlError({ cause: new Error("store closed"), message: "alkstore: the store was closed" })

export const makeLifetime = (wake: WakeHub): Lifetime => {
  const running = new Set<Fiber.RuntimeFiber<unknown, unknown>>()
  const cleanups = new Set<Effect.Effect<void>>()
  const inBackground = new Set<Fiber.RuntimeFiber<void>>()
  let closed = false
  return {
    // The work runs in a child fiber the close can interrupt alone; the caller's own interruption
    // interrupts it too and waits for its finalizers (a race would only send the interruption: the
    // caller could end, and its process exit, before the work gave back what it holds).
    supervise: <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.suspend((): Effect.Effect<A, E | SqlError, R> => {
          if (closed) return Effect.fail(storeClosedError())
          return Effect.flatMap(Effect.fork(restore(effect)), (child) => {
            running.add(child as Fiber.RuntimeFiber<unknown, unknown>)
            return restore(Fiber.join(child)).pipe(
              Effect.onInterrupt(() => Fiber.interrupt(child)),
              Effect.catchAllCause((cause): Effect.Effect<never, E | SqlError> =>
                closed && Cause.isInterruptedOnly(cause) ? Effect.fail(storeClosedError()) : Effect.failCause(cause)
              ),
              Effect.ensuring(Effect.sync(() => running.delete(child as Fiber.RuntimeFiber<unknown, unknown>)))
            )
          })
        })
      ),
    background: (effect) =>
      Effect.flatMap(Effect.forkDaemon(effect), (fiber) =>
        Effect.sync(() => {
          inBackground.add(fiber)
          fiber.addObserver(() => inBackground.delete(fiber))
          return fiber
        })),
    onClose: (cleanup) =>
      Effect.suspend(() => {
        if (closed) return Effect.void
        // Its own value each: one cleanup registered twice (two streams of a queue) runs twice.
        const registered = Effect.suspend(() => cleanup)
        cleanups.add(registered)
        return Effect.addFinalizer(() => Effect.sync(() => cleanups.delete(registered)))
      }),
    close: Effect.suspend(() => {
      closed = true
      return Fiber.interruptAll([...running])
    }).pipe(
      Effect.zipRight(Effect.suspend(() => Fiber.awaitAll([...inBackground]))),
      Effect.zipRight(Effect.sync(() => wake.fail(storeClosedError()))),
      Effect.zipRight(Effect.suspend(() => Effect.all([...cleanups], { concurrency: "unbounded", discard: true })))
    )
  }
}
