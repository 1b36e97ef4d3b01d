import { FiberRef } from "effect"

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
