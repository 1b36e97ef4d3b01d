import { DateTime, Duration, Option } from "effect"
import type * as Q from "../Queues.js"
import type { JobRow } from "./engine.js"

/** A job's `Job` view: built lazily for a claim's handle (`JobView`), whole for inspection (`toJob`). */

const utc = (ms: number) => DateTime.unsafeMake(ms) as DateTime.Utc
const optionalUtc = (ms: number | null) => (ms === null ? Option.none() : Option.some(utc(ms)))

/**
 * A claimed row as the contract's `Job`, for `handle.job`: what every
 * handler reads — the id, the payload, the counters — are plain fields, while
 * the `DateTime`, `Duration` and `Option` fields (a dozen allocations) are
 * built together on the first touch of any of them, so a batch read for its
 * payloads never builds them. Those are getters on the prototype: a spread
 * copy (`{ ...handle.job }`) has the plain fields only; `toJSON()` gives
 * the whole job as a plain object.
 */
export class JobView<A> implements Q.Job<A> {
  readonly id: number
  readonly state: Q.Job<A>["state"]
  readonly priority: number
  readonly attempts: number
  readonly maxAttempts: number
  readonly #row: JobRow
  #full: Q.Job<A> | undefined
  constructor(row: JobRow, readonly payload: A, readonly queue: string) {
    this.#row = row
    this.id = row.id
    this.state = row.state === "scheduled" ? "pending" : row.state
    this.priority = row.priority
    this.attempts = row.attempts
    this.maxAttempts = row.max_attempts
  }
  toJSON(): Q.Job<A> {
    return (this.#full ??= toJob(this.#row, this.payload, this.queue))
  }
  get runAt() {
    return this.toJSON().runAt
  }
  get visibilityTimeout() {
    return this.toJSON().visibilityTimeout
  }
  get backoffBase() {
    return this.toJSON().backoffBase
  }
  get expiresAt() {
    return this.toJSON().expiresAt
  }
  get claimedUntil() {
    return this.toJSON().claimedUntil
  }
  get workerId() {
    return this.toJSON().workerId
  }
  get createdAt() {
    return this.toJSON().createdAt
  }
  get lastError() {
    return this.toJSON().lastError
  }
  get diedAt() {
    return this.toJSON().diedAt
  }
}

/** `now − runAt` of the oldest due pending job, as `stats` reports it (never negative). */
export const oldestPendingAge = (at: number, oldestRunAt: number | null): Option.Option<Duration.Duration> =>
  oldestRunAt === null ? Option.none() : Option.some(Duration.millis(Math.max(0, at - oldestRunAt)))

/**
 * A stored row as the contract's `Job`, every field built now (a plain
 * object: inspection reads few rows, and callers spread it). `queue` is the
 * caller's own name where it has one: a name read back from storage is used
 * only because names are well-formed (checked at every entry point), so it
 * is the same string that was written.
 */
export const toJob = <A>(row: JobRow, payload: A, queue: string = row.queue): Q.Job<A> => ({
  id: row.id,
  queue,
  payload,
  state: row.state === "scheduled" ? "pending" : row.state,
  priority: row.priority,
  runAt: utc(row.run_at),
  attempts: row.attempts,
  maxAttempts: row.max_attempts,
  visibilityTimeout: Duration.millis(row.visibility_timeout),
  backoffBase: Duration.millis(row.backoff_base),
  expiresAt: optionalUtc(row.expires_at),
  claimedUntil: optionalUtc(row.claimed_until),
  workerId: Option.fromNullable(row.worker_id),
  createdAt: utc(row.created_at),
  lastError: Option.fromNullable(row.last_error),
  diedAt: optionalUtc(row.died_at)
})

/** A stored row as a `Job` whose payload is read as stored (JSON). */
export const storedJob = (row: JobRow): Q.Job<unknown> => toJob(row, JSON.parse(row.payload) as unknown)
