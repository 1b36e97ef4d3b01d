import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import type { SqlError } from "@effect/sql/SqlError"
import { Cause, Clock, Duration, Effect, Exit, FiberRef, Schedule, Scope } from "effect"
import type * as Q from "../../Queues.js"
import { Queues } from "../../Queues.js"
import { InvalidOptions } from "../../StoreError.js"
import { checkOptionalDuration, isInvalid } from "../duration.js"
import { checkText } from "../options.js"
import { claimWithin, type ClaimOne, type QueueInternals, type Restore, takeWithin } from "../queue.js"
import { Backing, type BackingShape } from "./backing.js"
import { inTransaction } from "../transactionOwner.js"
import { type GroupCommit, makeGroupCommit } from "./groupCommit.js"

export interface PersistedQueueStoreOptions {
  /**
   * The lease of a taken element: while its take's scope is open it is
   * renewed every third of this; when the process dies, the element is
   * taken again this long after the last renewal. Default 2 minutes (as
   * `@effect/sql`'s store's lock expiration).
   */
  readonly visibilityTimeout?: Duration.DurationInput
}

/** What each element's job carries: the element's id (PersistedQueue hands it to `take`) and the element. */
interface Stored {
  readonly id: string
  readonly element: unknown
}

const isStored = (payload: unknown): payload is Stored =>
  typeof payload === "object" && payload !== null && typeof (payload as Stored).id === "string" &&
  "element" in payload

/**
 * The job's own attempts count every claim; PersistedQueue's count the
 * failures before this take. A take's `maxAttempts` (not a number stamped at
 * offer time) decides when an element is spent, so jobs are stamped with no
 * limit of their own.
 */
const unlimited = Number.MAX_SAFE_INTEGER

const failure = (message: string) => (cause: unknown) => new PersistedQueue.PersistedQueueError({ message, cause })

/**
 * `@effect/experimental`'s `PersistedQueueStore` over alkstore's queues.
 * Each PersistedQueue name is the alkstore queue of that name (visible to
 * `Queues`, `Admin`, the CLI and the dashboard); an element is a job whose
 * payload is `{ id, element }`.
 *
 * - `offer`: a custom id is remembered for good in the same transaction as
 *   the enqueue, and an id seen before (pending, in flight, processed or
 *   dead) enqueues nothing — what `@effect/sql`'s store does with its unique
 *   index over every row it ever took. Generated ids are fresh UUIDs, which
 *   nobody else can know, so they are not recorded.
 * - `take` waits with the queue's own waking (a commit wakes it; no poll),
 *   claims the element, and settles it when the take's scope closes:
 *   success acks (the job is deleted; its id stays remembered), an
 *   interruption releases it (no attempt spent), another failure retries it
 *   at once behind what is already due, or buries it (dead, with the cause)
 *   once `maxAttempts` failures are spent. The lease is renewed while the
 *   scope is open (one renewal loop per store, in the layer's scope).
 */
export const make = (
  options: PersistedQueueStoreOptions = {}
): Effect.Effect<PersistedQueue.PersistedQueueStore["Type"], InvalidOptions, Queues | Backing | Scope.Scope> =>
  Effect.gen(function*() {
    const visibility = checkOptionalDuration("visibilityTimeout", options.visibilityTimeout, true)
    if (isInvalid(visibility)) return yield* visibility
    const visibilityTimeout = Duration.millis(visibility ?? 120_000)
    const queues = yield* Queues
    const backing = yield* Backing
    const workerId = `persisted-queue:${crypto.randomUUID()}`
    const open = new Set<Q.JobHandle<Stored>>()
    yield* renewEvery(open, Math.max(1, Duration.toMillis(visibilityTimeout) / 3))

    // Takes holding an element: whether a claim or a settle may have company (others would settle soon).
    const othersHolding = () => open.size > 0
    const settles = settleGroup(backing, othersHolding)
    const handles = new Map<string, Q.Queue<Stored>>()
    // Per queue: the claim of one element every waiting take makes, coalesced (one claim of up to 100 rows).
    const claims = new Map<string, ClaimOne<Stored> | undefined>()
    const queueOf = (name: string): Effect.Effect<Q.Queue<Stored>, PersistedQueue.PersistedQueueError> => {
      const known = handles.get(name)
      if (known !== undefined) return Effect.succeed(known)
      return queues.queue(name, { visibilityTimeout, maxAttempts: unlimited }).pipe(
        Effect.map((queue) => {
          handles.set(name, queue as Q.Queue<Stored>)
          claims.set(name, coalescedClaim(queue as Q.Queue<Stored>, workerId, othersHolding))
          return queue as Q.Queue<Stored>
        }),
        Effect.mapError(failure(`invalid persisted queue name ${JSON.stringify(name)}`))
      )
    }

    const offer = ({ element, id, isCustomId, name }: Parameters<PersistedQueue.PersistedQueueStore["Type"]["offer"]>[0]) =>
      Effect.gen(function*() {
        const queue = yield* queueOf(name)
        const payload: Stored = { id, element }
        if (!isCustomId) return yield* queue.enqueue(payload)
        const invalid = checkText("id", id)
        if (invalid !== undefined) return yield* invalid
        const now = yield* Clock.currentTimeMillis
        yield* backing.transaction(Effect.gen(function*() {
          if (yield* backing.persistedQueue.rememberId(id, name, now)) yield* queue.enqueue(payload)
        }))
      }).pipe(
        Effect.asVoid,
        Effect.catchAll((cause) =>
          cause instanceof PersistedQueue.PersistedQueueError
            ? Effect.fail(cause)
            : Effect.fail(failure("Failed to offer element to persisted queue")(cause))
        )
      )

    const take = ({ maxAttempts, name }: { readonly name: string; readonly maxAttempts: number }) =>
      Effect.checkInterruptible((callerInterruptible) => Effect.uninterruptibleMask((restore) =>
        Effect.gen(function*() {
          const queue = yield* queueOf(name)
          while (true) {
            // Only the wait is interruptible: from the claim's commit to the finalizer below, nothing can interrupt.
            const handle = yield* takeUnder(queue, workerId, restore, claims.get(name)).pipe(
              Effect.mapError(failure("Failed to take element from persisted queue"))
            )
            const attempts = handle.job.attempts - 1
            const payload = handle.job.payload
            if (!isStored(payload)) {
              yield* bury(settles, handle, "not a PersistedQueue element: its payload is not { id, element }")
              continue
            }
            if (attempts >= maxAttempts) {
              // Claims that never settled (a process died holding them) spent attempts too.
              yield* bury(settles, handle, `max attempts (${maxAttempts}) exceeded`)
              continue
            }
            // PersistedQueue.take runs this take under its own `restore` and closes the take's scope only
            // when the take returned there: an interruption already pending lands as this mask ends, and the
            // scope (with the finalizer below) would never close. Give the element back now instead.
            if (callerInterruptible && (yield* interruptPending)) {
              yield* settled("releasing")(grouped(settles, handle.release))
              return yield* Effect.interrupt
            }
            open.add(handle)
            // On the scope itself: `Effect.addFinalizer` captures and diffs every FiberRef (the whole context
            // included) to replay them in the finalizer, which cost more than the claim; settling needs none.
            // A settle that fails fails the closing scope: PersistedQueue.take then fails with that
            // PersistedQueueError (finalizers are typed infallible; Scope.close returns their failures).
            yield* Scope.addFinalizerExit(
              yield* Effect.scope,
              (exit) =>
                Effect.zipRight(
                  Effect.sync(() => open.delete(handle)),
                  settle(settles, handle, exit, maxAttempts)
                ) as Effect.Effect<void>
            )
            return { id: payload.id, attempts, element: payload.element }
          }
        })
      ))

    return PersistedQueue.PersistedQueueStore.of({ offer, take })
  })

/** Whether this fiber was interrupted while uninterruptible (the interruption lands at its next interruptible step). */
const interruptPending = Effect.map(FiberRef.get(FiberRef.interruptedCause), (cause) => !Cause.isEmpty(cause))

/**
 * The queue's take under this mask's `restore` (`takeWithin`). A `Queues`
 * that is not alkstore's own has no such take: its public one, restored,
 * leaves the gap between its claim and the finalizer (an interruption there
 * strands the element until its lease lapses).
 */
const takeUnder = (queue: Q.Queue<Stored>, workerId: string, restore: Restore, claimOne: ClaimOne<Stored> | undefined) => {
  const within = (queue as Partial<QueueInternals<Stored>>)[takeWithin]
  return within === undefined ? restore(queue.take(workerId)) : within(workerId, restore, claimOne)
}

/** A lone claim or settle yields to gather others every this many times, when no other take is known around. */
const gatherProbe = 32

/**
 * `own` where the fiber is inside a transaction (a take run in the
 * application's `sql.withTransaction`), `shared` otherwise. A shared batch
 * runs in its leader's fiber: led from inside a transaction, the other
 * takes' claims and acks would commit or roll back with the application's
 * work (and on SQLite, waiting behind it for the connection, deadlock).
 * Inside one, a take's claim and settle join that transaction, as ever.
 */
const ownTransactionOr = <A, E>(own: Effect.Effect<A, E>, shared: Effect.Effect<A, E>): Effect.Effect<A, E> =>
  Effect.flatMap(inTransaction, (open) => (open ? own : shared))

/** At most this many rows per coalesced claim (as `@effect/sql`'s poller claims up to 100 at once). */
const claimBatchMax = 100

/**
 * Claim coalescing: the takes of one queue that look for an element at the
 * same time are served by one claim of up to `claimBatchMax` rows (one write
 * transaction), one element each, in claim order; those the claim found
 * nothing for get none and wait as ever. The claim's group commit is
 * uninterruptible, so every claimed element reaches the one take it was
 * claimed for, and a take interrupted meanwhile releases its element at
 * once (the `interruptPending` check in `take`). Undefined for a `Queues`
 * that is not alkstore's own (its takes claim one by one).
 */
const coalescedClaim = (
  queue: Q.Queue<Stored>,
  workerId: string,
  othersAround: () => boolean
): ClaimOne<Stored> | undefined => {
  const claimUpTo = (queue as Partial<QueueInternals<Stored>>)[claimWithin]
  if (claimUpTo === undefined) return undefined
  const none: ReadonlyArray<Q.JobHandle<Stored>> = []
  const group = makeGroupCommit<void, ReadonlyArray<Q.JobHandle<Stored>>, SqlError>(
    (takes) =>
      Effect.map(
        Effect.exit(claimUpTo(workerId, takes.length)),
        (claimed) =>
          takes.map((_, i) =>
            Exit.isSuccess(claimed)
              ? Exit.succeed(i < claimed.value.length ? [claimed.value[i]!] : none)
              : Exit.failCause(claimed.cause)
          )
      ),
    claimBatchMax,
    { othersAround, probeEvery: gatherProbe }
  )
  const alone = claimUpTo(workerId, 1)
  return ownTransactionOr(alone, group.submit(undefined, alone))
}

/** A claim's settlement: ack, release, retry or bury. */
type Settlement = Effect.Effect<unknown, InvalidOptions | SqlError>

/**
 * Group commit of settlements: those asked for while a settle transaction
 * runs are committed together by the next one (one per store: every queue's
 * settles share it). A lone one runs as its own statement. When a shared
 * transaction fails, each of its settlements runs again by itself, so one
 * that cannot commit fails only its own take.
 */
const settleGroup = (backing: BackingShape, othersAround: () => boolean): GroupCommit<Settlement, unknown, InvalidOptions | SqlError> =>
  makeGroupCommit<Settlement, unknown, InvalidOptions | SqlError>(
    (settlements) =>
      settlements.length === 1
        ? Effect.map(Effect.exit(settlements[0]!), (exit) => [exit])
        : backing.transaction(Effect.forEach(settlements, (settlement) => settlement)).pipe(
          Effect.map((results) => results.map(Exit.succeed)),
          Effect.catchAll(() => Effect.forEach(settlements, (settlement) => Effect.exit(settlement)))
        ),
    256,
    { othersAround, probeEvery: gatherProbe }
  )

/**
 * One renewal loop per store for every open take (as `@effect/sql`'s store
 * refreshes its locks): a fiber per take would cost more than the take.
 * Each claim's lease is pushed to now + its visibility timeout every third
 * of the store's; a claim found lost is dropped from the set.
 */
const renewEvery = (open: Set<Q.JobHandle<Stored>>, everyMillis: number) => {
  const renewAll = Effect.suspend(() =>
    Effect.forEach([...open], (handle) =>
      handle.heartbeat().pipe(
        Effect.tap((alive) => (alive ? Effect.void : Effect.sync(() => open.delete(handle)))),
        Effect.catchAll((error) => Effect.logWarning("alkstore: renewing a persisted queue claim failed", error))
      ), { discard: true })
  )
  return Effect.forkScoped(Effect.interruptible(Effect.repeat(Effect.delay(renewAll, everyMillis), Schedule.forever)))
}

/**
 * A settlement through the group commit, retried by itself when that failed
 * (the retry's schedule only then: building it costs more than an ack).
 */
const retried = (settles: GroupCommit<Settlement, unknown, InvalidOptions | SqlError>, settlement: Settlement) =>
  Effect.catchAll(
    grouped(settles, settlement),
    () => Effect.retry(settlement, { times: 3, schedule: Schedule.exponential(50) })
  )

/**
 * The settlement of a take's own element, when its scope closes: a failure
 * that outlived the retries is the take's `PersistedQueueError` (the lease
 * brings the element back).
 */
const reported = (settles: GroupCommit<Settlement, unknown, InvalidOptions | SqlError>, what: string) =>
(settlement: Settlement) =>
  retried(settles, settlement).pipe(
    Effect.mapError(
      (cause) =>
        new PersistedQueue.PersistedQueueError({
          message: `Failed ${what} a persisted queue element; it is taken again when its lease lapses`,
          cause
        })
    ),
    Effect.asVoid
  )

/** A settlement through the group commit (directly when it would be alone). */
const grouped = (settles: GroupCommit<Settlement, unknown, InvalidOptions | SqlError>, settlement: Settlement) =>
  ownTransactionOr(settlement, settles.submit(settlement, settlement))

/** A settlement that is not a take's own (burying on the way, a release for an interruption): a failure is logged. */
const settled = (what: string) => <A, E>(effect: Effect.Effect<A, E>) =>
  effect.pipe(
    Effect.catchAll(() => Effect.retry(effect, { times: 3, schedule: Schedule.exponential(50) })),
    Effect.catchAll((error) =>
      Effect.logWarning(`alkstore: ${what} a persisted queue element failed; it is taken again when its lease lapses`, error)
    ),
    Effect.asVoid
  )

const bury = (settles: GroupCommit<Settlement, unknown, InvalidOptions | SqlError>, handle: Q.JobHandle<Stored>, reason: string) =>
  settled("burying")(grouped(settles, handle.fail(reason)))

const settle = (
  settles: GroupCommit<Settlement, unknown, InvalidOptions | SqlError>,
  handle: Q.JobHandle<Stored>,
  exit: Exit.Exit<unknown, unknown>,
  maxAttempts: number
) => {
  if (Exit.isSuccess(exit)) return reported(settles, "acking")(handle.ack)
  if (Cause.isInterruptedOnly(exit.cause)) return reported(settles, "releasing")(handle.release)
  const error = Cause.pretty(exit.cause, { renderErrorCause: true })
  // `job.attempts` counts this claim: it is the failures so far, this one included.
  return handle.job.attempts >= maxAttempts
    ? reported(settles, "burying")(handle.fail(error))
    : reported(settles, "retrying")(handle.retry(error, Duration.zero))
}
