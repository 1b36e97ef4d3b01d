import { Duration, Effect, Exit, Fiber, FiberRef, Runtime } from "effect"
import type { Restore } from "./queueInternals.js"
import { realClock } from "./realClock.js"
import { inTransactionOf } from "./transactionOwner.js"

/** How long an interrupted caller waits for its claim's answer, and the give-back, before leaving them to the background. */
export const answerWaitMillis = 250

/**
 * A take's claim whose statements can wait on the server (PostgreSQL: a row
 * or table lock another session holds — an application's open transaction
 * on a queue's limits row, an index build — or a pool with no connection
 * free) for as long as that lasts, made stoppable: the take sets
 * `statementStop` around its claim (a worker passes the same stop to its
 * fused ack + claim after a job, whose ack then lands in the background),
 * and each statement that can wait stops on its own
 * (`PgExecutor.allStoppable` for one sent on the store's kept connection,
 * `stoppableApart` for one through the pool and for a limited queue's flow
 * walk). An interruption ends the caller's wait for the answer. The
 * statement itself is not cut off — an answer lost after it committed would
 * leave its jobs claimed, an attempt spent, until their lease lapsed — but
 * finishes in the background (`inBackground`: the store's close waits for
 * it), and whatever it claimed is given back (no attempt spent). An answer
 * is usually a round trip away: the interrupted caller waits up to
 * `answerWaitMillis` (real time) for that give-back, so a stopped worker or
 * a timed-out take has given its claim back as it ends, and leaves it to
 * the background only when the statement is stuck.
 *
 * The claim itself runs in the caller's fiber: a fiber per claim cost a
 * woken PostgreSQL worker ~0.2 ms of its wake (docs/performance-pg.md, "The
 * woken worker's claim").
 *
 * Inside a transaction a statement runs as it is, in the caller's fiber: it
 * belongs to that transaction's connection, which a fiber left running
 * after the caller moved on must not use (the transaction may have ended,
 * the connection gone back to the pool), and a give-back there belongs in
 * the same transaction.
 */
export interface StatementStop {
  readonly restore: Restore
  readonly inBackground: (effect: Effect.Effect<void>) => Effect.Effect<Fiber.Fiber<void>>
}

export const statementStop: FiberRef.FiberRef<StatementStop | undefined> = FiberRef.unsafeMake<StatementStop | undefined>(
  undefined
)

/**
 * `statement` in a fiber of its own, started at once (`Runtime.runFork`'s
 * immediate start: a forked fiber would first wait for the scheduler's next
 * turn, and a prefetched element, held for one event-loop turn, would be
 * given back before the take that came for it looked), which its caller
 * awaits through `restore` (run this where the caller cannot be interrupted
 * otherwise: the fiber and its handler are put in place in one step). When
 * an interruption ends that wait, `onStopped` gets the statement's fiber,
 * never interrupted by the stop itself.
 */
export const runApart = <A, E>(
  statement: Effect.Effect<A, E>,
  restore: Restore,
  onStopped: (fiber: Fiber.RuntimeFiber<A, E>) => Effect.Effect<void>
): Effect.Effect<A, E> =>
  Effect.flatMap(Effect.runtime<never>(), (runtime) => {
    const fiber = Runtime.runFork(runtime)(statement)
    // `await`, not `join`: a join merges the statement fiber's FiberRefs back into the caller's, ~20 µs a claim.
    return Effect.onInterrupt(Effect.flatMap(restore(Fiber.await(fiber)), (exit) => exit), () => onStopped(fiber))
  })

/**
 * What a stopped caller does with its statement's answer (`answer`: its
 * outcome, come already or still to come): the give-back of what it claimed
 * goes to the background, and the caller waits for it up to
 * `answerWaitMillis` (real time), leaving it there when the statement is stuck.
 */
export const giveBackAfterStop = <A, E>(
  stop: StatementStop,
  answer: Effect.Effect<Exit.Exit<A, E>>,
  giveBack: (a: A) => Effect.Effect<void>
): Effect.Effect<void> =>
  Effect.flatMap(
    stop.inBackground(Effect.flatMap(answer, (exit) => (Exit.isSuccess(exit) ? giveBack(exit.value) : Effect.void))),
    (givingBack) =>
      Effect.interruptible(Fiber.await(givingBack)).pipe(
        Effect.timeout(Duration.millis(answerWaitMillis)),
        Effect.withClock(realClock),
        Effect.ignore
      )
  )

/**
 * `effect` (statements that can wait on the server) stoppable where
 * `statementStop` is set outside a transaction: in a fiber of its own
 * (`runApart`), with what it claimed given back after a stop. As it is
 * elsewhere.
 */
export const stoppableApart = <A, E>(
  effect: Effect.Effect<A, E>,
  giveBack: (a: A) => Effect.Effect<void>,
  /** The stop to use instead of the fiber's `statementStop`. */
  given?: StatementStop
): Effect.Effect<A, E> =>
  Effect.withFiberRuntime((fiber) => {
    const stop = given ?? fiber.getFiberRef(statementStop)
    if (stop === undefined || inTransactionOf(fiber)) return effect
    // The fork and the stop's handler in one step; the fiber's own statements are not stopped again (nobody
    // interrupts it).
    return Effect.uninterruptible(runApart(Effect.locally(effect, statementStop, undefined), stop.restore, (apart) =>
      giveBackAfterStop(stop, Fiber.await(apart), giveBack)))
  })
