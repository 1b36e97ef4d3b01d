import { Deferred, Effect, Exit, FiberId } from "effect"

/**
 * The store connection's one permit: held by a transaction (or a reserved
 * connection) for its whole length, so nobody else's statement lands inside
 * it. Taking a free gate is synchronous — an Effect `Semaphore` costs several
 * fiber operations per take, which every transaction pays.
 */
export interface Gate {
  /** Whether somebody holds the gate now. */
  readonly held: () => boolean
  /** Takes the gate, waiting (interruptibly) in FIFO order; yields its release. */
  readonly take: Effect.Effect<Effect.Effect<void>>
  /** Takes the gate now if it is free, returning its (synchronous) release. */
  readonly tryTake: () => (() => void) | undefined
}

export const makeGate = (): Gate => {
  let locked = false
  const waiters: Array<Deferred.Deferred<void>> = []
  const releaseNow = () => {
    const next = waiters.shift()
    // Handing over keeps `locked`: the next holder owns it from here.
    if (next !== undefined) Deferred.unsafeDone(next, Exit.void)
    else locked = false
  }
  const release: Effect.Effect<void> = Effect.sync(releaseNow)
  const take: Effect.Effect<Effect.Effect<void>> = Effect.suspend(() => {
    if (!locked) {
      locked = true
      return Effect.succeed(release)
    }
    const turn = Deferred.unsafeMake<void>(FiberId.none)
    waiters.push(turn)
    return Deferred.await(turn).pipe(
      Effect.as(release),
      Effect.onInterrupt(() =>
        Effect.suspend(() => {
          const index = waiters.indexOf(turn)
          if (index >= 0) {
            waiters.splice(index, 1)
            return Effect.void
          }
          // Interrupted after the gate was handed over: pass it on.
          return release
        })
      )
    )
  })
  const tryTake = () => {
    if (locked) return undefined
    locked = true
    return releaseNow
  }
  return { held: () => locked, take, tryTake }
}
