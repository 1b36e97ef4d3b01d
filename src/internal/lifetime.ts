import { SqlError } from "@effect/sql/SqlError"
import { Cause, Effect, Fiber } from "effect"
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
 */
export interface Lifetime {
  /** Runs `effect` until it ends or the store closes: then it is interrupted, and fails with `storeClosedError`. */
  readonly supervise: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>
  /** Stops the supervised work, waits for its finalizers, fails the waiters. Run before the connection closes. */
  readonly close: Effect.Effect<void>
}

/** What work and waits of a closed store fail with. */
export const storeClosedError = (): SqlError =>
  new SqlError({ cause: new Error("store closed"), message: "alkstore: the store was closed" })

export const makeLifetime = (wake: WakeHub): Lifetime => {
  const running = new Set<Fiber.RuntimeFiber<unknown, unknown>>()
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
    close: Effect.suspend(() => {
      closed = true
      return Effect.forEach([...running], Fiber.interrupt, { discard: true })
    }).pipe(Effect.zipRight(Effect.sync(() => wake.fail(storeClosedError()))))
  }
}
