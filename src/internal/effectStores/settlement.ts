import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import type { SqlError } from "@effect/sql/SqlError"
import { Cause, Duration, Effect, Exit } from "effect"
import type * as Q from "../../Queues.js"
import type { InvalidOptions } from "../../StoreError.js"
import { realClock } from "../realClock.js"
import { inTransactionOf } from "../transactionOwner.js"
import type { BackingShape } from "./backing.js"
import { type GroupCommit, makeGroupCommit } from "./groupCommit.js"
import { claimsFor, gatherProbe, type Held, holdAll, type QueuePrefetch, type Stored } from "./queueClaims.js"

/*
 * How the PersistedQueue store settles a taken element when its take's scope
 * closes (ack, release, retry, bury), through one group commit per store,
 * and how a settle that fails is retried and reported.
 */

/**
 * A claim's settlement: ack, release, retry or bury (`settle`); `alone`,
 * when given, is what it runs instead when it is served alone (an ack fused
 * with the prefetch of the next element: never inside a shared transaction).
 */
export interface Settlement {
  readonly settle: Effect.Effect<unknown, InvalidOptions | SqlError>
  readonly alone?: Effect.Effect<unknown, InvalidOptions | SqlError> | undefined
  /** The queue an ack prefetches for, when it shares a transaction with others (see `claimsFor`). */
  readonly prefetch?: QueuePrefetch | undefined
}

/**
 * Group commit of settlements: those asked for while a settle transaction
 * runs are committed together by the next one (one per store: every queue's
 * settles share it). A lone one runs as its own statement. When a shared
 * transaction fails, each of its settlements runs again by itself, so one
 * that cannot commit fails only its own take.
 */
export const settleGroup = (backing: BackingShape, othersAround: () => boolean): GroupCommit<Settlement, unknown, InvalidOptions | SqlError> =>
  makeGroupCommit<Settlement, unknown, InvalidOptions | SqlError>(
    (settlements) => {
      if (settlements.length === 1) return Effect.map(Effect.exit(settlements[0]!.alone ?? settlements[0]!.settle), (exit) => [exit])
      const settled = Effect.forEach(settlements, (settlement) => settlement.settle)
      const next = claimsFor(settlements.map((settlement) => settlement.prefetch))
      return (next === undefined
        ? Effect.map(backing.transaction(settled), (results) => results.map(Exit.succeed))
        : Effect.flatMap(
          backing.transaction(Effect.zip(settled, next)),
          ([results, claimed]) => Effect.as(holdAll(claimed), results.map(Exit.succeed))
        )).pipe(Effect.catchAll(() => Effect.forEach(settlements, (settlement) => Effect.exit(settlement.settle))))
    },
    256,
    { othersAround, probeEvery: gatherProbe }
  )

/**
 * `effect`, tried again 50, 100 and 200 ms after each failure (four tries in
 * all). Real time, whatever `Clock` the take runs under: the waits pace a
 * storage failure, not contract time, and under a `TestClock` nobody moves
 * they would never end (a take interrupted after its store closed hung its
 * scope's close). Only the waits: the settle itself reads the caller's clock.
 */
const retriedOnRealTime = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  [50, 100, 200].reduce(
    (tried, millis) => Effect.catchAll(tried, () => Effect.zipRight(Effect.withClock(Effect.sleep(millis), realClock), effect)),
    effect
  )

/**
 * The settlement of a take's own element, when its scope closes: a failure
 * that outlived the retries is the take's `PersistedQueueError` (the lease
 * brings the element back). A failed group commit is retried by itself (the
 * retry's schedule only then: building it costs more than an ack). Its value
 * is the finalizer's, which nobody reads.
 */
const reported = (settles: GroupCommit<Settlement, unknown, InvalidOptions | SqlError>, what: string) =>
(settlement: Settlement) =>
  Effect.catchAll(
    grouped(settles, settlement),
    () =>
      Effect.mapError(
        retriedOnRealTime(settlement.settle),
        (cause) =>
          new PersistedQueue.PersistedQueueError({
            message: `Failed ${what} a persisted queue element; it is taken again when its lease lapses`,
            cause
          })
      )
  )

/**
 * A settlement through the group commit (directly when it would be alone).
 * Inside the application's transaction it runs by itself, in that
 * transaction: a shared batch led from there would commit or roll back the
 * other takes' settles with the application's work (and on SQLite, whose
 * one connection the transaction holds, deadlock).
 */
export const grouped = (settles: GroupCommit<Settlement, unknown, InvalidOptions | SqlError>, settlement: Settlement) =>
  Effect.withFiberRuntime<unknown, InvalidOptions | SqlError>((fiber) =>
    inTransactionOf(fiber) ? settlement.settle : settles.submit(settlement, settlement.alone ?? settlement.settle)
  )

/** A settlement that is not a take's own (burying on the way, a release for an interruption): a failure is logged. */
export const settled = (what: string) => <A, E>(effect: Effect.Effect<A, E>) =>
  effect.pipe(
    Effect.catchAll(() => retriedOnRealTime(effect)),
    Effect.catchAll((error) =>
      Effect.logWarning(`alkstore: ${what} a persisted queue element failed; it is taken again when its lease lapses`, error)
    ),
    Effect.asVoid
  )

export const bury = (settles: GroupCommit<Settlement, unknown, InvalidOptions | SqlError>, handle: Q.JobHandle<Stored>, reason: string) =>
  settled("burying")(grouped(settles, { settle: handle.fail(reason) }))

export const settle = (
  settles: GroupCommit<Settlement, unknown, InvalidOptions | SqlError>,
  handle: Q.JobHandle<Stored>,
  exit: Exit.Exit<unknown, unknown>,
  maxAttempts: number,
  /** The queue's prefetch (none for a `Queues` not alkstore's own). */
  prefetch: QueuePrefetch | undefined,
  /** Whether the take found its element at once (a busy queue: an ack prefetches for the next take). */
  foundAtOnce: boolean
) => {
  if (Exit.isSuccess(exit)) {
    // Served alone (a lone take), the ack also claims the next element, held for the queue's next take.
    // Shared with other acks, that transaction claims the next element for this queue too.
    // Alone it claims as many as the queue's last prefetches showed are taken (`wants`), or none while
    // elements are still held (the next takes are served from memory); shared, one. None for a limited queue.
    const wanted = prefetch === undefined || !foundAtOnce || prefetch.limited() ? 0 : prefetch.slot.wants()
    if (wanted === 0) return reported(settles, "acking")({ settle: handle.ack })
    // The plain ack is built only when it runs (the handle builds each operation when asked).
    const ack = Effect.suspend(() => handle.ack)
    const alone = prefetch!.slot.handles.length > 0 ? ack : prefetch!.ackAndClaim(handle as Held, wanted)
    return reported(settles, "acking")({ settle: ack, alone, prefetch })
  }
  if (Cause.isInterruptedOnly(exit.cause)) return reported(settles, "releasing")({ settle: givingBackHeld(handle.release, prefetch) })
  const error = Cause.pretty(exit.cause, { renderErrorCause: true })
  // `job.attempts` counts this claim: it is the failures so far, this one included.
  return handle.job.attempts >= maxAttempts
    ? reported(settles, "burying")({ settle: handle.fail(error) })
    : reported(settles, "retrying")({ settle: givingBackHeld(handle.retry(error, Duration.zero), prefetch) })
}

/**
 * A release or retry that also gives back what the queue's slot holds: the
 * element returns to its place in line (its due time, its id) ahead of the
 * elements claimed after it and held for the next takes, which would
 * otherwise be handed out first.
 */
export const givingBackHeld = (
  settle: Effect.Effect<unknown, InvalidOptions | SqlError>,
  prefetch: QueuePrefetch | undefined
): Effect.Effect<unknown, InvalidOptions | SqlError> => {
  const held = prefetch?.takeHeld()
  if (held === undefined || held.length === 0) return settle
  return Effect.zipLeft(settle, Effect.forEach(held, (handle) => handle.release, { discard: true }))
}
