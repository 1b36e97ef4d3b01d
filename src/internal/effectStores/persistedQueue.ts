import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import type { SqlError } from "@effect/sql/SqlError"
import { Cause, Clock, Context, Duration, Effect, Exit, type Fiber, FiberRef, Runtime, Schedule, Scope } from "effect"
import type * as Q from "../../Queues.js"
import { Queues } from "../../Queues.js"
import { InvalidOptions } from "../../StoreError.js"
import { checkOptionalDuration, fromChecked, isInvalid, maxRenewalMillis } from "../duration.js"
import { checkText, ownOptions } from "../options.js"
import { jsonProblem } from "../payload.js"
import { type ClaimOne, type QueueInternals, type Restore, takeWithin } from "../queueInternals.js"
import { Backing, type BackingShape } from "./backing.js"
import { bury, givingBackHeld, grouped, settle, settled, settleGroup } from "./settlement.js"
import { makePrefetch } from "./prefetch.js"
import { inTransactionOf } from "../transactionOwner.js"
import { type Held, type Known, knownQueue, type Stored } from "./queueClaims.js"

export interface PersistedQueueStoreOptions {
  /**
   * The lease of a taken element: while its take's scope is open it is
   * renewed every third of this, to this long from then; when the process
   * dies, the element is taken again this long after the last renewal.
   * Default 2 minutes (as `@effect/sql`'s store's lock expiration). The
   * taking store's value governs a claim: an element offered by a store
   * with a shorter one is extended to this at once when taken.
   */
  readonly visibilityTimeout?: Duration.DurationInput
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
 * A take's `maxAttempts`: a whole number of at least 1, or `Infinity` (Effect's
 * memory store retries for ever then; a whole number past 2^53, as `1e20`,
 * compares as exactly as any). Anything else (0 would bury every
 * element as it is claimed) fails the take before anything is claimed.
 */
const isMaxAttempts = (maxAttempts: number) =>
  Number.isInteger(maxAttempts) ? maxAttempts >= 1 : maxAttempts === Number.POSITIVE_INFINITY

const invalidMaxAttempts = (maxAttempts: unknown) =>
  Effect.fail(failure(`invalid maxAttempts ${String(maxAttempts)}`)(
    new InvalidOptions({ field: "maxAttempts", reason: "must be a whole number of at least 1, or Infinity" })
  ))

/**
 * The element as JSON keeps it. Effect's stores take an encoded element
 * whose object properties are `undefined` (the memory store keeps them,
 * `@effect/sql`'s stringifies them away), which the payload codec refuses:
 * such an element is stored without them. Any other element is passed on
 * as it is (no copy), for the codec to take or refuse (`undefined` in an
 * array or as the element, `NaN`, instances, cycles).
 */
const storedElement = (element: unknown): unknown => {
  try {
    return jsonProblem(element) === undefined || jsonProblem(element, { dropUndefinedProperties: true }) !== undefined
      ? element
      : JSON.parse(JSON.stringify(element))
  } catch {
    // A throwing getter: the codec reports it.
    return element
  }
}

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
 * - A take that found its element at once acks it and claims the queue's
 *   next element in one transaction, held for the next take (prefetch.ts,
 *   queueClaims.ts); concurrent takes' claims and settles are shared
 *   (groupCommit.ts).
 */
export const make = (
  given?: PersistedQueueStoreOptions
): Effect.Effect<PersistedQueue.PersistedQueueStore["Type"], InvalidOptions, Queues | Backing | Scope.Scope> =>
  Effect.gen(function*() {
    const options = (yield* fromChecked(ownOptions(given))) ?? {} // `null` is no options (CONTRACT §2)
    const visibility = checkOptionalDuration("visibilityTimeout", options.visibilityTimeout, true)
    if (isInvalid(visibility)) return yield* visibility
    const visibilityMillis = visibility ?? 120_000
    const visibilityTimeout = Duration.millis(visibilityMillis)
    const queues = yield* Queues
    const backing = yield* Backing
    const workerId = `persisted-queue:${crypto.randomUUID()}`
    const open = new Set<Q.JobHandle<Stored>>()
    const runFork = Runtime.runFork(yield* Effect.runtime<never>())
    const renew = renewal(open, visibilityTimeout)
    yield* renewEvery(open, renew, Math.min(Math.max(1, visibilityMillis / 3), maxRenewalMillis))

    // Takes holding an element: whether a claim or a settle may have company (others would settle soon).
    const othersHolding = () => open.size > 0
    const settles = settleGroup(backing, othersHolding)
    const prefetch = yield* makePrefetch<Held>((held) => settled("releasing")(releaseAll(backing, held)), backing.onStoreClose)
    const known = new Map<string, Known>()
    const knownOf = (name: string): Effect.Effect<Known, PersistedQueue.PersistedQueueError> => {
      const found = known.get(name)
      if (found !== undefined) return Effect.succeed(found)
      return queues.queue(name, { visibilityTimeout, maxAttempts: unlimited }).pipe(
        Effect.map((q) => {
          const entry = knownQueue(q as Q.Queue<Stored>, workerId, othersHolding, prefetch)
          known.set(name, entry)
          return entry
        }),
        Effect.mapError(failure(`invalid persisted queue name ${JSON.stringify(name)}`))
      )
    }

    const offer = ({ element, id, isCustomId, name }: Parameters<PersistedQueue.PersistedQueueStore["Type"]["offer"]>[0]) =>
      Effect.gen(function*() {
        const { queue } = yield* knownOf(name)
        const payload: Stored = { id, element: storedElement(element) }
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
      !isMaxAttempts(maxAttempts) ? invalidMaxAttempts(maxAttempts) : Effect.checkInterruptible((callerInterruptible) => Effect.uninterruptibleMask((restore) => {
        const takeOf = (entry: Known): Effect.Effect<Taken, PersistedQueue.PersistedQueueError> => {
          // Whether this take waited: a take that found its element at once prefetches the next (see `settle`).
          let waited = false
          const waiting: Restore = (effect) => {
            waited = true
            return restore(effect)
          }
          // Only the wait is interruptible: from the claim's commit to the finalizer below, nothing can interrupt.
          // A held element is accepted in the same step as it leaves its slot (no effect in between).
          const look: Effect.Effect<Taken, PersistedQueue.PersistedQueueError> = Effect.withFiberRuntime((fiber) => {
            const held = heldFor(entry, fiber)
            if (held !== undefined) return accept(held, fiber)
            return Effect.flatMap(
              Effect.mapError(takeUnder(entry.queue, workerId, waiting, entry.claim), takeFailed),
              (handle) => Effect.withFiberRuntime((fiber) => accept(handle, fiber))
            )
          })
          const accept = (
            handle: Q.JobHandle<Stored>,
            fiber: Fiber.RuntimeFiber<unknown, unknown>
          ): Effect.Effect<Taken, PersistedQueue.PersistedQueueError> => {
            const attempts = handle.job.attempts - 1
            const payload = handle.job.payload
            if (!isStored(payload)) {
              return Effect.zipRight(bury(settles, handle, "not a PersistedQueue element: its payload is not { id, element }"), look)
            }
            // Claims that never settled (a process died holding them) spent attempts too.
            if (attempts >= maxAttempts) return Effect.zipRight(bury(settles, handle, `max attempts (${maxAttempts}) exceeded`), look)
            // PersistedQueue.take runs this take under its own `restore` and closes the take's scope only
            // when the take returned there: an interruption already pending lands as this mask ends, and the
            // scope (with the finalizer below) would never close. Give the element back now instead.
            if (callerInterruptible && !Cause.isEmpty(fiber.getFiberRef(FiberRef.interruptedCause))) {
              return Effect.zipRight(
                settled("releasing")(grouped(settles, { settle: givingBackHeld(handle.release, entry.prefetch) })),
                Effect.interrupt
              )
            }
            open.add(handle)
            // An interruption that lands after this take returned, while PersistedQueue.take's `restore` around
            // it has a few steps left, leaves the take's scope open for good: its finalizer below never runs.
            // The caller's fiber then ends with that interruption, and its end gives the element back.
            const orphaned = () => {
              if (!open.delete(handle)) return
              runFork(settled("releasing")(grouped(settles, { settle: givingBackHeld(handle.release, entry.prefetch) })))
            }
            fiber.addObserver(orphaned)
            // On the scope itself: `Effect.addFinalizer` captures and diffs every FiberRef (the whole context
            // included) to replay them in the finalizer, which cost more than the claim; settling needs none.
            // A settle that fails fails the closing scope: PersistedQueue.take then fails with that
            // PersistedQueueError (finalizers are typed infallible; Scope.close returns their failures).
            const finalizer = (exit: Exit.Exit<unknown, unknown>) =>
              Effect.suspend(() => {
                fiber.removeObserver(orphaned)
                open.delete(handle)
                return settle(settles, handle, exit, maxAttempts, entry.prefetch, !waited)
              }) as Effect.Effect<void>
            const registered = Scope.addFinalizerExit(Context.unsafeGet(fiber.currentContext, Scope.Scope), finalizer)
            const taken: Taken = { id: payload.id, attempts, element: payload.element }
            // The claim's lease is the one stamped at offer (the offering store's): when shorter than this
            // store's, it could lapse before the first renewal, so it is extended to this store's now.
            if (leaseMillis(handle) >= visibilityMillis) return Effect.as(registered, taken)
            return Effect.as(Effect.zipRight(registered, renew(handle)), taken)
          }
          return look
        }
        const found = known.get(name)
        return found !== undefined ? takeOf(found) : Effect.flatMap(knownOf(name), takeOf)
      }))

    return PersistedQueue.PersistedQueueStore.of({ offer, take })
  })

/**
 * The element prefetched for this queue, when one is held and the take is
 * not inside the application's transaction: handed over with no statement,
 * nor the claim's bookkeeping (no wait happened, so no wake to pass on).
 * Else undefined: the take claims (and looks in the slot again whenever it does).
 */
const heldFor = (entry: Known, fiber: Fiber.RuntimeFiber<unknown, unknown>): Q.JobHandle<Stored> | undefined => {
  const prefetch = entry.prefetch
  if (prefetch === undefined || prefetch.slot.handles.length === 0 || inTransactionOf(fiber)) return undefined
  return prefetch.slot.take()
}

/** Gives back elements claimed for takes that are gone (no attempt spent), in one transaction. */
const releaseAll = (backing: BackingShape, held: ReadonlyArray<Held>) =>
  held.length === 1
    ? held[0]!.release
    : backing.transaction(Effect.forEach(held, (handle) => handle.release, { discard: true }))

/** What a take hands PersistedQueue. */
interface Taken {
  readonly id: string
  readonly attempts: number
  readonly element: unknown
}

const takeFailed = failure("Failed to take element from persisted queue")

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

/** The lease a claim was made with: its job's visibility timeout, stamped at offer (read off the row when there is one). */
const leaseMillis = (handle: Q.JobHandle<Stored>): number => {
  const row = (handle as Partial<Held>).row
  return row !== undefined ? row.visibility_timeout : Duration.toMillis(handle.job.visibilityTimeout)
}

/**
 * One claim's renewal: its lease pushed to now + the store's visibility
 * timeout (not the job's own, stamped by whichever store offered it: the
 * renewals run every third of the store's). A claim found lost is dropped
 * from the set; a failure is logged (the next renewal tries again).
 */
const renewal = (open: Set<Q.JobHandle<Stored>>, visibilityTimeout: Duration.Duration) => (handle: Q.JobHandle<Stored>) =>
  handle.heartbeat(visibilityTimeout).pipe(
    Effect.tap((alive) => (alive ? Effect.void : Effect.sync(() => open.delete(handle)))),
    Effect.catchAll((error) => Effect.logWarning("alkstore: renewing a persisted queue claim failed", error)),
    Effect.asVoid
  )

/**
 * One renewal loop per store for every open take (as `@effect/sql`'s store
 * refreshes its locks): a fiber per take would cost more than the take.
 * Each claim is renewed (`renewal`) every third of the store's visibility timeout.
 */
const renewEvery = (
  open: Set<Q.JobHandle<Stored>>,
  renew: (handle: Q.JobHandle<Stored>) => Effect.Effect<void>,
  everyMillis: number
) => {
  const renewAll = Effect.suspend(() => Effect.forEach([...open], renew, { discard: true }))
  return Effect.forkScoped(Effect.interruptible(Effect.repeat(Effect.delay(renewAll, everyMillis), Schedule.forever)))
}
