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
  /**
   * Takes the gate, waiting in FIFO order; yields its release. Run it in an
   * uninterruptible region: only its wait runs inside `wait` (the caller's
   * `restore`, where the caller may be stopped), so a gate taken always
   * reaches the caller, and a wait stopped leaves the queue or, handed the
   * gate meanwhile, passes it on. (A take interruptible throughout could be
   * stopped between taking the gate and returning its release: the gate
   * would stay held for good, and every statement on the connection wait.)
   */
  readonly take: (wait: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>) => Effect.Effect<Effect.Effect<void>>
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
  const take: Gate["take"] = (wait) =>
    Effect.suspend(() => {
      if (!locked) {
        locked = true
        return Effect.succeed(release)
      }
      const turn = Deferred.unsafeMake<void>(FiberId.none)
      waiters.push(turn)
      return Effect.flatMap(Effect.exit(wait(Deferred.await(turn))), (waited) => {
        if (Exit.isSuccess(waited)) return Effect.succeed(release)
        const index = waiters.indexOf(turn)
        if (index >= 0) {
          waiters.splice(index, 1)
          return Effect.failCause(waited.cause)
        }
        // Stopped after the gate was handed over: pass it on.
        return Effect.zipRight(release, Effect.failCause(waited.cause))
      })
    })
  const tryTake = () => {
    if (locked) return undefined
    locked = true
    return releaseNow
  }
  return { held: () => locked, take, tryTake }
}
