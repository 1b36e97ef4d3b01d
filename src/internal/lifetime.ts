import { SqlError } from "@effect/sql/SqlError"
import { Deferred, Effect, Exit, FiberId } from "effect"
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
  const closing = Deferred.unsafeMake<void>(FiberId.none)
  const running = new Set<Deferred.Deferred<void>>()
  let closed = false
  const stopped = Effect.zipRight(Deferred.await(closing), Effect.fail(storeClosedError()))
  return {
    supervise: (effect) =>
      Effect.suspend(() => {
        if (closed) return Effect.fail(storeClosedError())
        const done = Deferred.unsafeMake<void>(FiberId.none)
        running.add(done)
        // `raceFirst` interrupts the loser and waits for it: `done` completes once `effect`'s finalizers ran.
        return Effect.ensuring(
          Effect.raceFirst(effect, stopped),
          Effect.sync(() => {
            running.delete(done)
            Deferred.unsafeDone(done, Exit.void)
          })
        )
      }),
    close: Effect.suspend(() => {
      closed = true
      Deferred.unsafeDone(closing, Exit.void)
      return Effect.forEach([...running], Deferred.await, { discard: true })
    }).pipe(Effect.zipRight(Effect.sync(() => wake.fail(storeClosedError()))))
  }
}
