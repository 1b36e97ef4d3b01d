import type { SqlError } from "@effect/sql/SqlError"
import type { Clock, Effect, Option } from "effect"
import type { JobRow } from "./engine.js"

/**
 * The engine seam's storage for the mechanisms beside the queues (engine.ts
 * has the queues' and flow control's, and the seam itself): locks,
 * schedules, the operator's views, a PersistedQueue's and a RateLimiter's.
 * Each engine implements them with its own SQL, one file per mechanism
 * (sqlite/, pg/).
 */

export interface LockRow {
  readonly token: number
  readonly expires_at: number
}

export interface LockStorage {
  /** Takes the lock if free or already `owner`'s (re-entrant), else none. */
  readonly acquire: (
    name: string,
    owner: string,
    now: number,
    expiresAt: number
  ) => Effect.Effect<Option.Option<LockRow>, SqlError>
  readonly renew: (
    name: string,
    owner: string,
    token: number,
    now: number,
    expiresAt: number
  ) => Effect.Effect<boolean, SqlError>
  readonly release: (name: string, owner: string, token: number, now: number) => Effect.Effect<boolean, SqlError>
  /** Whether `owner` holds `name` with `token` at `now` (the scheduler's fence). */
  readonly holds: (name: string, owner: string, token: number, now: number) => Effect.Effect<boolean, SqlError>
  /** Whether anybody holds `name` at `now`: a read, so a standby can watch a lease without writing. */
  readonly held: (name: string, now: number) => Effect.Effect<boolean, SqlError>
  /**
   * Ends `owner`'s tenure of `name`, whatever its token: for an owner used by
   * one acquire alone (a `withLock`'s) whose answer an interruption may have
   * cut off after its statement committed — on the wire (PostgreSQL), or in
   * the Effect steps between a synchronous statement and its handle (SQLite).
   */
  readonly releaseOwner: (name: string, owner: string, now: number) => Effect.Effect<boolean, SqlError>
}

/** A registered schedule as storage keeps it. */
export interface ScheduleRow {
  readonly name: string
  readonly spec: string
  readonly interval_ms: number
  readonly queue: string
  readonly payload: string
  readonly priority: number
  readonly max_attempts: number
  readonly expires_ms: number | null
  /** `''` for none. */
  readonly group_key: string
  readonly next_fire_at: number
  readonly created_at: number
  readonly updated_at: number
}

export interface NewSchedule {
  readonly name: string
  readonly spec: string
  readonly intervalMillis: number
  readonly queue: string
  readonly payload: string
  readonly priority: number
  readonly maxAttempts: number
  readonly expiresMillis: number | undefined
  /** `''` for none; stored after `newScheduleValues`' columns. */
  readonly group: string
}

/**
 * A schedule's values in the column order every engine's upsert lists them:
 * name, spec, interval_ms, queue, payload, priority, max_attempts, expires_ms,
 * next_fire_at (the first boundary: now + interval), created_at, updated_at.
 */
export const newScheduleValues = (s: NewSchedule, now: number): Array<string | number | null> => [
  s.name,
  s.spec,
  s.intervalMillis,
  s.queue,
  s.payload,
  s.priority,
  s.maxAttempts,
  s.expiresMillis ?? null,
  now + s.intervalMillis,
  now,
  now
]

export interface ScheduleStorage {
  /** Upsert by name; the same spec keeps `next_fire_at`, a new one restarts it at `now + interval`. */
  readonly upsert: (schedule: NewSchedule, now: number) => Effect.Effect<ScheduleRow, SqlError>
  readonly remove: (name: string) => Effect.Effect<boolean, SqlError>
  /**
   * At most `limit` due schedules, the soonest first, locked for this
   * transaction where the engine has row locks.
   */
  readonly due: (now: number, limit: number) => Effect.Effect<ReadonlyArray<ScheduleRow>, SqlError>
  /** Sets each named schedule's `next_fire_at`, in one statement where the engine can. */
  readonly advance: (moves: ReadonlyArray<readonly [name: string, nextFireAt: number]>) => Effect.Effect<void, SqlError>
  readonly nextFireAt: Effect.Effect<Option.Option<number>, SqlError>
}

/** A queue's depths as the operator's overview reads them (one row per queue that has jobs). */
export interface QueueDepthRow {
  readonly queue: string
  /** Due now (pending, plus scheduled rows whose `run_at` has passed). */
  readonly pending: number
  readonly scheduled: number
  readonly claimed: number
  readonly dead: number
  readonly oldest_pending_run_at: number | null
}

/** A lock row as stored; a lapsed or released lock keeps its row (and its token). */
export interface LockInfoRow {
  readonly name: string
  readonly owner: string
  readonly token: number
  readonly expires_at: number
}

/** What the operator's job listing filters by; `beforeId` pages from newest to oldest. */
export interface JobFilter {
  readonly queue: string | undefined
  readonly state: JobRow["state"] | undefined
  readonly limit: number
  readonly beforeId: number | undefined
}

/**
 * The operator's reads (CLI, dashboard) that the public Queue API lacks:
 * across queues, by id alone, and the locks and schedules as stored. Reads
 * only; repairs go through the queue mechanism's own operations.
 */
export interface AdminStorage {
  /** Every queue with jobs, by name; `now` splits scheduled from due. */
  readonly queueDepths: (now: number) => Effect.Effect<ReadonlyArray<QueueDepthRow>, SqlError>
  /** Jobs matching `filter`, newest id first. `scheduled` means not yet due at `now`. */
  readonly jobs: (filter: JobFilter, now: number) => Effect.Effect<ReadonlyArray<JobRow>, SqlError>
  /** The job with this id, in whichever queue. */
  readonly job: (id: number, now: number) => Effect.Effect<Option.Option<JobRow>, SqlError>
  /** Every lock row, by name. */
  readonly locks: Effect.Effect<ReadonlyArray<LockInfoRow>, SqlError>
  /** Every registered schedule, by name. */
  readonly schedules: Effect.Effect<ReadonlyArray<ScheduleRow>, SqlError>
  /** The highest job id ever assigned (0 for none): with the live count, a store-wide rate of enqueues and completions. */
  readonly lastJobId: Effect.Effect<number, SqlError>
  /** The engine's applied migrations, in order (`<id>_<name>`). */
  readonly migrations: Effect.Effect<ReadonlyArray<string>, SqlError>
}

/**
 * What the store of `@effect/experimental`'s `PersistedQueue` needs that the
 * queue mechanism lacks (src/internal/effectStores/persistedQueue.ts).
 */
export interface PersistedQueueStorage {
  /**
   * Records a `PersistedQueue` element id for good: `true` the first time,
   * `false` ever after (an id offered once is never enqueued again, even
   * once processed, as `@effect/sql`'s store keeps it). One statement.
   */
  readonly rememberId: (id: string, queue: string, now: number) => Effect.Effect<boolean, SqlError>
}

/**
 * The store of `@effect/experimental`'s `RateLimiter`
 * (src/internal/effectStores/rateLimiter.ts). Each operation is one
 * statement, atomic across processes on every engine; the rules are those
 * of Effect's in-memory store, in the same double arithmetic (the contract
 * tests use it as the oracle).
 */
export interface RateLimiterStorage {
  /**
   * The fixed-window counter of `key` after taking `tokens`: a counter whose
   * `expires_at` has passed starts again at 0 from `now`; taking adds
   * `tokens` and pushes `expires_at` by `refillMillis × tokens`, unless
   * `limit` is given and would be passed, when nothing is taken. Returns the
   * count (with `tokens`, taken or not), the stored `expires_at` and the
   * `now` it was judged at. `clock` is read once the take holds its key (after
   * any wait for the write lock or the key's row, as a claim's is).
   */
  readonly fixedWindow: (input: {
    readonly key: string
    readonly tokens: number
    readonly refillMillis: number
    readonly limit: number | undefined
    readonly clock: Clock.Clock
  }) => Effect.Effect<{ readonly count: number; readonly expiresAt: number; readonly now: number }, SqlError>
  /**
   * The token bucket of `key` (full, `limit`, when new) refilled by one token
   * per whole `refillMillis` since its last refill (never past `limit`),
   * then `tokens` taken when enough are left or `allowOverflow`. Returns the
   * tokens left after the take, negative when it was refused (nothing stored
   * below zero then). `clock` as for `fixedWindow`.
   */
  readonly tokenBucket: (input: {
    readonly key: string
    readonly tokens: number
    readonly refillMillis: number
    readonly limit: number
    readonly allowOverflow: boolean
    readonly clock: Clock.Clock
  }) => Effect.Effect<number, SqlError>
}
