import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Exit } from "effect"
import type * as Q from "../../Queues.js"
import type { ClaimHandle } from "../handle.js"
import { ackClaimWithin, claimWithin, type ClaimOne, limitedWithin, type QueueInternals } from "../queueInternals.js"
import { makeGroupCommit } from "./groupCommit.js"
import { inTransactionOf } from "../transactionOwner.js"
import type { Prefetch, PrefetchSlot } from "./prefetch.js"

/** What each element's job carries: the element's id (PersistedQueue hands it to `take`) and the element. */
export interface Stored {
  readonly id: string
  readonly element: unknown
}

/** A handle as alkstore's own queue gives it: a `ClaimHandle`, whose fence the fused ack + claim needs. */
export type Held = ClaimHandle<Stored>

/** A lone claim or settle yields to gather others every this many times, when no other take is known around. */
export const gatherProbe = 32

/** At most this many rows per coalesced claim (as `@effect/sql`'s poller claims up to 100 at once). */
const claimBatchMax = 100


/** A queue's prefetch: its slot, and a successful take's ack fused with the claim of the next element into it. */
export interface QueuePrefetch {
  readonly slot: PrefetchSlot<Held>
  /**
   * Whether the queue is limited (flow control), when nothing is claimed
   * ahead of a take: a held element given back unseen would have spent a
   * slot's turn or a place in a rate window (a released claim keeps its place).
   */
  readonly limited: () => boolean
  /** Acks `handle` and claims up to `n` next elements into the slot, in one transaction. */
  readonly ackAndClaim: (handle: Held, n: number) => Effect.Effect<void, SqlError>
  /** Claims up to `n` (inside a shared settle transaction: `hold` them once it committed). */
  readonly claimNext: (n: number) => Effect.Effect<ReadonlyArray<Held>, SqlError>
  readonly hold: (handles: ReadonlyArray<Held>) => Effect.Effect<void>
  /**
   * Empties the slot (a take gave its element back: held elements claimed
   * after it must not be handed out before it), for the caller to release
   * with its settle; the store's fiber releases them again after it (fenced:
   * a no-op once one committed), in case that settle rolls back or fails.
   */
  readonly takeHeld: () => ReadonlyArray<Held>
}

/**
 * The claims a shared settle transaction makes for the queues whose acks
 * in it prefetch (one element per such ack, in claim order), or undefined
 * when none does: many takes that found their elements at once ack in one
 * transaction, which then also claims their queues' next elements, held
 * for their next takes (the 100 concurrent takes of a drain, round after
 * round). What it claimed is held only after the transaction committed.
 */
export const claimsFor = (prefetches: ReadonlyArray<QueuePrefetch | undefined>) => {
  let wanted: Map<QueuePrefetch, number> | undefined
  for (const prefetch of prefetches) {
    if (prefetch !== undefined && !prefetch.limited()) (wanted ??= new Map()).set(prefetch, (wanted.get(prefetch) ?? 0) + 1)
  }
  if (wanted === undefined) return undefined
  return Effect.forEach(
    wanted,
    ([prefetch, n]) => Effect.map(prefetch.claimNext(Math.min(n, claimBatchMax)), (handles) => [prefetch, handles] as const)
  )
}

/** Holds what `claimsFor`'s claims took, once their transaction committed. */
export const holdAll = (claimed: ReadonlyArray<readonly [QueuePrefetch, ReadonlyArray<Held>]>) =>
  Effect.forEach(claimed, ([prefetch, handles]) => prefetch.hold(handles), { discard: true })

/** A PersistedQueue name's alkstore queue, its coalesced claim and its prefetch (none for a `Queues` not alkstore's own). */
export interface Known {
  readonly queue: Q.Queue<Stored>
  readonly claim: ClaimOne<Stored> | undefined
  readonly prefetch: QueuePrefetch | undefined
}

const noneHeld: ReadonlyArray<Held> = []

export const knownQueue = (
  queue: Q.Queue<Stored>,
  workerId: string,
  othersAround: () => boolean,
  prefetch: Prefetch<Held>
): Known => {
  const internals = queue as Partial<QueueInternals<Stored>>
  const claimUpTo = internals[claimWithin]
  const ackClaim = internals[ackClaimWithin]
  const limited = internals[limitedWithin]
  if (claimUpTo === undefined || ackClaim === undefined || limited === undefined) {
    return { queue, claim: undefined, prefetch: undefined }
  }
  const slot = prefetch.slot()
  return {
    queue,
    claim: coalescedClaim(claimUpTo, workerId, othersAround, slot, prefetch),
    prefetch: {
      slot,
      limited,
      ackAndClaim: (handle, n) => Effect.flatMap(ackClaim(handle, workerId, n), (handles) => prefetch.hold(slot, handles)),
      claimNext: (n) => claimUpTo(workerId, n) as Effect.Effect<ReadonlyArray<Held>, SqlError>,
      hold: (handles) => prefetch.hold(slot, handles),
      takeHeld: () => {
        if (slot.handles.length === 0) return noneHeld
        const held = prefetch.takeAll(slot)
        prefetch.releaseLater(held)
        return held
      }
    }
  }
}

/**
 * How a take looks for an element. First the queue's prefetched element,
 * if one is held (no transaction at all). Else claim coalescing: the takes
 * of one queue that look at the same time are served by one claim of up
 * to `claimBatchMax` rows (one write transaction), one element each, in
 * claim order; those the claim found nothing for get none and wait as ever.
 * The claim's group commit is uninterruptible, so every claimed element
 * reaches the one take it was claimed for, and a take interrupted
 * meanwhile releases its element at once (the `interruptPending` check in
 * `take`).
 *
 * A take inside the application's transaction claims by itself, in that
 * transaction, and never takes a prefetched element: claimed outside, it
 * would not roll back with it. It gives back what is held for its queue
 * first, both inside its transaction (so its own claim may take it) and,
 * by the store's own fiber, after it (a rollback undoes the first release;
 * the second, fenced by the prefetch's claim token, is then the one that
 * counts, and is a no-op otherwise). Without that, on SQLite, whose one
 * connection the transaction holds, the held element could be released
 * only after the transaction — which waits for it: a stall until its lease
 * lapses.
 */
const coalescedClaim = (
  claimUpTo: QueueInternals<Stored>[typeof claimWithin],
  workerId: string,
  othersAround: () => boolean,
  slot: PrefetchSlot<Held>,
  prefetch: Prefetch<Held>
): ClaimOne<Stored> => {
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
  const shared = group.submit(undefined, alone)
  return Effect.withFiberRuntime((fiber) => {
    if (inTransactionOf(fiber)) {
      if (slot.handles.length === 0) return alone
      const held = prefetch.takeAll(slot)
      prefetch.releaseLater(held)
      // A release that fails here is the later one's to make.
      return Effect.zipRight(Effect.ignore(Effect.forEach(held, (handle) => handle.release, { discard: true })), alone)
    }
    const held = slot.take()
    if (held !== undefined) return Effect.succeed([held])
    // Elements of this queue given back by the sweep just now come first: claim once their release committed.
    const releasing = slot.settledReleases()
    return releasing === undefined ? shared : Effect.zipRight(releasing, shared)
  })
}
