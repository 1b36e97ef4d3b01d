/**
 * Named TTL locks (CONTRACT §4): leases with fencing tokens that only grow,
 * and `withLock`, which holds a lock while an effect runs.
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Context, type DateTime, type Duration, type Effect, Layer, type Option } from "effect"
import { Engine } from "./internal/engine.js"
import * as internal from "./internal/locks.js"
import type { InvalidName, InvalidOptions, LockLost, LockUnavailable, ReservedName } from "./StoreError.js"

export interface LockHandle {
  readonly name: string
  readonly owner: string
  /** Strictly greater than every earlier tenure's token for this name. */
  readonly token: number
  readonly expiresAt: DateTime.Utc
  /** Extends the lease to `now + (ttl ?? the acquiring ttl)`; `false` once lapsed or taken. */
  readonly renew: (ttl?: Duration.DurationInput) => Effect.Effect<boolean, InvalidOptions | SqlError>
  /** `true` only for the holder. */
  readonly release: Effect.Effect<boolean, SqlError>
}

export interface AcquireOpts {
  readonly ttl: Duration.DurationInput
  /** Default: a token unique to this store instance. */
  readonly owner?: string
}

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

export class Locks extends Context.Tag("alkstore/Locks")<Locks, LocksShape>() {}

export const make: Effect.Effect<LocksShape, never, Engine> = internal.makeLocks

export const layer: Layer.Layer<Locks, never, Engine> = Layer.effect(Locks, make)
