/**
 * Named TTL locks (docs/contract.md §4): leases with fencing tokens that only grow,
 * and `withLock`, which holds a lock while an effect runs.
 *
 * @module
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Context, type DateTime, type Duration, type Effect, Layer, type Option } from "effect"
import { Engine } from "./internal/engine.js"
import * as internal from "./internal/locks.js"
import type { InvalidName, InvalidOptions, LockLost, LockUnavailable, ReservedName } from "./StoreError.js"

/** One tenure of a lock, as `acquire` returned it. */
export interface LockHandle {
  /** The lock's name. */
  readonly name: string
  /** Who holds it: the `owner` given to `acquire`, or the store instance's own token. */
  readonly owner: string
  /** Strictly greater than every earlier tenure's token for this name. */
  readonly token: number
  /** The lease end as of the acquire (a `renew` moves it; this value is not updated). */
  readonly expiresAt: DateTime.Utc
  /** Extends the lease to `now + (ttl ?? the acquiring ttl)`; `false` once lapsed or taken. */
  readonly renew: (ttl?: Duration.DurationInput) => Effect.Effect<boolean, InvalidOptions | SqlError>
  /** `true` only for the holder. */
  readonly release: Effect.Effect<boolean, SqlError>
}

/** `Locks.acquire`'s options. */
export interface AcquireOpts {
  /** The lease: the lock is free again this long after the acquire unless renewed. */
  readonly ttl: Duration.DurationInput
  /** Default: a token unique to this store instance. */
  readonly owner?: string
}

/** The `Locks` service. */
export interface LocksShape {
  /**
   * Takes the lock when it is free (no row, or its lease lapsed) or already
   * this owner's (re-entrant: the lease is extended, the token kept).
   */
  readonly acquire: (
    name: string,
    opts: AcquireOpts
  ) => Effect.Effect<Option.Option<LockHandle>, InvalidName | ReservedName | InvalidOptions | SqlError>
  /**
   * Runs `effect` holding the lock, renewing it every third of `ttl`; fails
   * fast with `LockUnavailable` when another owner holds it, interrupts the
   * effect and fails with `LockLost` when a renewal fails, and releases the
   * lock however the effect ends. Each call is its own owner, so two fibers
   * of one store exclude each other too.
   */
  readonly withLock: <A, E, R>(
    name: string,
    ttl: Duration.DurationInput,
    effect: Effect.Effect<A, E, R>
  ) => Effect.Effect<
    A,
    E | InvalidName | ReservedName | InvalidOptions | LockUnavailable | LockLost | SqlError,
    R
  >
}

/** Named TTL locks with fencing tokens; every store layer provides it. */
export class Locks extends Context.Tag("alkstore/Locks")<Locks, LocksShape>() {}

/** Builds the service over an engine (a store layer does this for you). */
export const make: Effect.Effect<LocksShape, never, Engine> = internal.makeLocks

/** The service over the engine a store layer provides. */
export const layer: Layer.Layer<Locks, never, Engine> = Layer.effect(Locks, make)
