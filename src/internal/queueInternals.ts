import type { SqlError } from "@effect/sql/SqlError"
import type { Effect } from "effect"
import type * as Q from "../Queues.js"
import type { InvalidOptions } from "../StoreError.js"
import type { ClaimHandle } from "./handle.js"
import type { Quiet } from "./wake.js"

/*
 * The internal protocol of a queue (queue.ts) with the mechanisms built on
 * it (the worker, EffectStores' PersistedQueue store): symbol-keyed methods
 * every queue has, and the shapes they take.
 */

/**
 * A queue's waiting take for a caller that settles the claim itself
 * (EffectStores' PersistedQueue store): run it inside the caller's own
 * `uninterruptibleMask` with that mask's `restore`, which only the wait
 * gets. A claim whose write committed then always reaches the caller, still
 * uninterruptible, so the caller installs its settling finalizer before any
 * interruption can land (the public `take` has its own mask: between its
 * end and the caller's next step an interruption would drop the claim until
 * its lease lapses). Its first round claims at once, without the read the
 * public `take` asks first. Internal: a symbol-keyed method of every queue.
 */
export const takeWithin: unique symbol = Symbol.for("alkstore/Queue/takeWithin")

/**
 * Claims up to `n` now, without a worker id check, a span or waiting (for a
 * caller that gathers the claims of many takes into one: EffectStores'
 * claim coalescing). Internal, as `takeWithin`.
 */
export const claimWithin: unique symbol = Symbol.for("alkstore/Queue/claimWithin")

/** Acks a claim and claims up to `n` more in one transaction (the worker's fused step). Internal, as `takeWithin`. */
export const ackClaimWithin: unique symbol = Symbol.for("alkstore/Queue/ackClaimWithin")

/**
 * Whether this process has seen the queue limited (flow control): its claims
 * are scarce (a slot, a place in a rate window), so none is made ahead of a
 * caller that asked (EffectStores' prefetch). Internal, as `takeWithin`.
 */
export const limitedWithin: unique symbol = Symbol.for("alkstore/Queue/limitedWithin")

export type Restore = <X, E, R>(effect: Effect.Effect<X, E, R>) => Effect.Effect<X, E, R>

/** How a take looks for work (`takeUpTo`); every field is optional. */
export interface TakeOptions<A> {
  /** Claim before taking a ticket (a drain's every take; an idle take pays one empty claim, once). */
  readonly claimAtOnce?: boolean | undefined
  /** The claim to make instead of the take's own (PersistedQueue's coalesced claim). */
  readonly claim?: Effect.Effect<ReadonlyArray<ClaimHandle<A>>, SqlError> | undefined
  /** The wake generation and time of a claim that just found nothing (see `takeUpTo`). */
  readonly quietSince?: Quiet | undefined
}

/** How a waiting take claims one element when it looks: `[]` when there was none for it. */
export type ClaimOne<A> = Effect.Effect<ReadonlyArray<Q.JobHandle<A>>, SqlError>

export interface QueueInternals<A> {
  /** `claimOne` replaces the take's own claim of one (coalescing callers pass theirs). */
  readonly [takeWithin]: (
    workerId: string,
    restore: Restore,
    claimOne?: ClaimOne<A>
  ) => Effect.Effect<Q.JobHandle<A>, InvalidOptions | Q.WaitError>
  readonly [claimWithin]: (workerId: string, n: number) => Effect.Effect<ReadonlyArray<Q.JobHandle<A>>, SqlError>
  readonly [ackClaimWithin]: (handle: ClaimHandle<A>, workerId: string, n: number) => Effect.Effect<ReadonlyArray<ClaimHandle<A>>, SqlError>
  readonly [limitedWithin]: () => boolean
}
