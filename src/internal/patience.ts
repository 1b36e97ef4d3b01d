import { Cause, Effect, Exit, Fiber, FiberRef } from "effect"
import { inTransactionOf } from "./transactionOwner.js"

/**
 * At most this many (real) milliseconds of waiting for the database per
 * statement in the fiber, whatever the store's own patience: for a
 * best-effort write in a finalizer (a lease release, which lapses with its
 * ttl anyway), so a stop is not held up by another connection's lock.
 * Unbounded (the store's patience) unless set with `Effect.locally`. The
 * SQLite engine applies it to its waits on a busy file (`sqlite/busy.ts`);
 * PostgreSQL's statements do not wait on a file lock, and ignore it.
 */
export const patienceCapMillis: FiberRef.FiberRef<number> = FiberRef.unsafeMake(Number.POSITIVE_INFINITY)

/**
 * How long (real time) the release of a lease by a stopping holder (the
 * scheduler's runner, `withLock`) waits out a busy SQLite file before leaving
 * the lease to lapse with its ttl: a release is best effort, a stop is not.
 */
export const releasePatienceMillis = 1_000

/**
 * How long (real time) a stopping holder waits for its give-back write at
 * all, on any engine: a connection that stopped answering (a partitioned
 * server, a half-open TCP connection) would hold a stop, the store's close
 * included, for as long as TCP takes to notice — minutes.
 */
export const stopPatienceMillis = 2_000

/**
 * A best-effort give-back made while stopping (a claim released, a lock or
 * the leadership lease let go): a busy SQLite file is waited out for at most
 * `releasePatienceMillis`, and the write itself for at most
 * `stopPatienceMillis` of real time (under any `Clock`); past that it is
 * cut off in the background, `givenUp` is the answer, and what it gave back
 * lapses with its lease, as after a crash. Only a stop's give-backs: a
 * release after work that simply ended waits as long as it takes.
 */
export const givingBack = <A, E, R>(write: Effect.Effect<A, E, R>, givenUp: A, what: string): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => {
    const capped = Effect.locally(write, patienceCapMillis, releasePatienceMillis)
    // Inside a transaction the write is that transaction's: never left running on its connection.
    if (inTransactionOf(fiber)) return capped
    // The write runs in a fiber of its own — not a child: a stop's interruption is passed on to a fiber's
    // children even in its uninterruptible region, and a second signal (a nested `withLock`, the store's close
    // and the caller's own) cut a racing write off. The wait for it is a plain callback with a real timer.
    // Interruptible in its own fiber (a stop's region is not): only the give-up below interrupts it.
    return Effect.flatMap(Effect.forkDaemon(Effect.interruptible(capped)), (writing) =>
      Effect.async<A, E>((resume) => {
        let done = false
        const timer = setTimeout(() => {
          if (done) return
          done = true
          // Given up: the write is cut off in the background (a statement stuck on a dead connection would
          // otherwise hold its connection, and the pool's end, for as long as TCP takes to notice).
          resume(Effect.zipRight(
            Effect.logWarning(`alkstore: giving back ${what} got no answer in ${stopPatienceMillis} ms; it lapses with its lease`),
            Effect.as(Fiber.interruptFork(writing), givenUp)
          ))
        }, stopPatienceMillis)
        writing.addObserver((exit) => {
          clearTimeout(timer)
          if (done) return
          done = true
          resume(exit)
        })
        return Effect.sync(() => clearTimeout(timer))
      }))
  })

/**
 * Whether the fiber's waits on a busy database end at once on interruption
 * even inside an uninterruptible region. Set around a claim (`takeUpTo`):
 * a take or a worker runs its claim uninterruptibly, so that a claim whose
 * write committed always reaches a handle, but while it waits out another
 * connection's write lock nothing has been written yet, and a stop must not
 * sit out the store's whole patience there. The SQLite engine applies it to
 * the pauses between its busy attempts (`sqlite/busy.ts`) and to the wait
 * for its connection (`writeFreeWait`), never to an attempt itself;
 * PostgreSQL's statements ignore it.
 */
export const busyWaitsInterruptible: FiberRef.FiberRef<boolean> = FiberRef.unsafeMake(false)

/**
 * A wait before a statement wrote anything (for the store's connection, held
 * by another fiber's transaction; for a pause between busy attempts):
 * interruptible where `busyWaitsInterruptible` is set, else as `restore`
 * makes it (the caller's region). A claim interrupted while the application's
 * transaction holds the connection would otherwise wait for that transaction
 * to end, however long, and its caller with it (one that awaits the claim
 * before ending its transaction: never).
 */
export const writeFreeWait = <A, E, R>(
  wait: Effect.Effect<A, E, R>,
  restore: <X, Y, Z>(effect: Effect.Effect<X, Y, Z>) => Effect.Effect<X, Y, Z>
): Effect.Effect<A, E, R> =>
  Effect.flatMap(FiberRef.get(busyWaitsInterruptible), (anywhere) => anywhere ? Effect.interruptible(wait) : restore(wait))

/**
 * `write`, and `onCut` when an interruption ended it: the write may have
 * committed before the interruption was seen, and the wake it owed (a step
 * of `write` after its statement) was skipped — a waiter held back by a
 * limit then slept with work claimable. A wake too many only costs a waiter
 * a read. Nothing about the write's own interruptibility changes (its waits
 * stay as the caller's region makes them).
 */
export const tellingIfCut = <A, E, R>(write: Effect.Effect<A, E, R>, onCut: Effect.Effect<void, unknown>): Effect.Effect<A, E, R> =>
  Effect.onExit(write, (exit) => (Exit.isFailure(exit) && Cause.isInterrupted(exit.cause) ? Effect.ignore(onCut) : Effect.void))

/** `write`, then `wake` when it says it changed something — and `wake` when an interruption cut it off (`tellingIfCut`). */
export const wakingAfter = <E, R, E2>(write: Effect.Effect<boolean, E, R>, wake: Effect.Effect<void, E2>): Effect.Effect<boolean, E | E2, R> =>
  tellingIfCut(Effect.tap(write, (done) => (done ? wake : Effect.void)), wake)
