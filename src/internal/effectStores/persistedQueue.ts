import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { Cause, Clock, Duration, Effect, Exit, FiberRef, Schedule, Scope } from "effect"
import type * as Q from "../../Queues.js"
import { Queues } from "../../Queues.js"
import { InvalidOptions } from "../../StoreError.js"
import { checkOptionalDuration, isInvalid } from "../duration.js"
import { checkText } from "../options.js"
import { type QueueInternals, type Restore, takeWithin } from "../queue.js"
import { Backing } from "./backing.js"

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

    const handles = new Map<string, Q.Queue<Stored>>()
    const queueOf = (name: string): Effect.Effect<Q.Queue<Stored>, PersistedQueue.PersistedQueueError> => {
      const known = handles.get(name)
      if (known !== undefined) return Effect.succeed(known)
      return queues.queue(name, { visibilityTimeout, maxAttempts: unlimited }).pipe(
        Effect.map((queue) => {
          handles.set(name, queue as Q.Queue<Stored>)
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
            const handle = yield* takeUnder(queue, workerId, restore).pipe(
              Effect.mapError(failure("Failed to take element from persisted queue"))
            )
            const attempts = handle.job.attempts - 1
            const payload = handle.job.payload
            if (!isStored(payload)) {
              yield* bury(handle, "not a PersistedQueue element: its payload is not { id, element }")
              continue
            }
            if (attempts >= maxAttempts) {
              // Claims that never settled (a process died holding them) spent attempts too.
              yield* bury(handle, `max attempts (${maxAttempts}) exceeded`)
              continue
            }
            // PersistedQueue.take runs this take under its own `restore` and closes the take's scope only
            // when the take returned there: an interruption already pending lands as this mask ends, and the
            // scope (with the finalizer below) would never close. Give the element back now instead.
            if (callerInterruptible && (yield* interruptPending)) {
              yield* settled("releasing")(handle.release)
              return yield* Effect.interrupt
            }
            open.add(handle)
            // On the scope itself: `Effect.addFinalizer` captures and diffs every FiberRef (the whole context
            // included) to replay them in the finalizer, which cost more than the claim; settling needs none.
            yield* Scope.addFinalizerExit(
              yield* Effect.scope,
              (exit) => Effect.zipRight(Effect.sync(() => open.delete(handle)), settle(handle, exit, maxAttempts))
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
const takeUnder = (queue: Q.Queue<Stored>, workerId: string, restore: Restore) => {
  const within = (queue as Partial<QueueInternals<Stored>>)[takeWithin]
  return within === undefined ? restore(queue.take(workerId)) : within(workerId, restore)
}

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

/** Settlement must not fail a closing scope: a storage failure is logged, and the lease brings the element back. */
const settled = (what: string) => <A, E>(effect: Effect.Effect<A, E>) =>
  effect.pipe(
    // The retry's schedule only once the first attempt failed: building it costs more than an ack.
    Effect.catchAll(() => Effect.retry(effect, { times: 3, schedule: Schedule.exponential(50) })),
    Effect.catchAll((error) =>
      Effect.logWarning(`alkstore: ${what} a persisted queue element failed; it is taken again when its lease lapses`, error)
    ),
    Effect.asVoid
  )

const bury = (handle: Q.JobHandle<Stored>, reason: string) => settled("burying")(handle.fail(reason))

const settle = (handle: Q.JobHandle<Stored>, exit: Exit.Exit<unknown, unknown>, maxAttempts: number) => {
  if (Exit.isSuccess(exit)) return settled("acking")(handle.ack)
  if (Cause.isInterruptedOnly(exit.cause)) return settled("releasing")(handle.release)
  const error = Cause.pretty(exit.cause, { renderErrorCause: true })
  // `job.attempts` counts this claim: it is the failures so far, this one included.
  return handle.job.attempts >= maxAttempts
    ? settled("burying")(handle.fail(error))
    : settled("retrying")(handle.retry(error, Duration.zero))
}
