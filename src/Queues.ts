/**
 * Durable job queues (docs/contract.md §3): enqueue inside the application's own
 * transaction, claim with a fenced lease, retry on one backoff curve,
 * dead-letter, inspect and repair.
 *
 * @module
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Context, type DateTime, type Duration, type Effect, Layer, type Option, type Schema, type Stream } from "effect"
import { Engine } from "./internal/engine.js"
import * as internal from "./internal/queue.js"
import * as internalQueues from "./internal/queues.js"
import type {
  DatabaseReplaced,
  InvalidName,
  InvalidOptions,
  InvalidPayload,
  ReservedName
} from "./StoreError.js"

/** A job's id: a positive integer, unique in the store and never reused. */
export type JobId = number

/** A job as stored. Instants are `DateTime.Utc`, durations `Duration`. */
export interface Job<A = unknown> {
  /** Unique in the store, never reused. */
  readonly id: JobId
  /** The queue's name. */
  readonly queue: string
  /** Decoded by the queue's Schema on a claim; as stored (JSON) from inspection. */
  readonly payload: A
  /** `"pending"` includes a job not yet due (its `runAt` is in the future; `Admin` calls it `"scheduled"`). */
  readonly state: "pending" | "claimed" | "dead"
  /** Higher first. */
  readonly priority: number
  /** When it is (or was) due. */
  readonly runAt: DateTime.Utc
  /** Claims so far, the current one included; `release` gives one back, `requeueDead` resets them. */
  readonly attempts: number
  /** Claims it may have before it is dead. */
  readonly maxAttempts: number
  /** The lease each claim takes. */
  readonly visibilityTimeout: Duration.Duration
  /** The base of its backoff curve. */
  readonly backoffBase: Duration.Duration
  /** It is never delivered at or after this instant. */
  readonly expiresAt: Option.Option<DateTime.Utc>
  /** The current claim's lease end, while claimed. */
  readonly claimedUntil: Option.Option<DateTime.Utc>
  /** The worker of the current claim, while claimed. */
  readonly workerId: Option.Option<string>
  /** When it was enqueued (or fired). */
  readonly createdAt: DateTime.Utc
  /** The text of the last retry's or failure's error (kept through `requeueDead`). */
  readonly lastError: Option.Option<string>
  /** When it became dead. */
  readonly diedAt: Option.Option<DateTime.Utc>
}

/**
 * One claim of one job. Every operation is fenced by the job id and the
 * claim's token: once another claim took the job, they report loss (`false`
 * or `"lost"`) instead of touching it.
 */
export interface JobHandle<A = unknown> {
  /** The job as this claim took it (attempts counted, lease set). */
  readonly job: Job<A>
  /** Deletes the job. */
  readonly ack: Effect.Effect<boolean, SqlError>
  /**
   * Back to pending at `now + (delay ?? backoff)`, or dead when the attempts
   * are spent. `error` (a string, or an error whose text is taken) becomes
   * `lastError`.
   */
  readonly retry: (
    error?: unknown,
    delay?: Duration.DurationInput
  ) => Effect.Effect<"retried" | "dead" | "lost", InvalidOptions | SqlError>
  /** Dead now, whatever the attempts. */
  readonly fail: (error: unknown) => Effect.Effect<boolean, SqlError>
  /** Pushes the lease to `now + (extend ?? visibilityTimeout)`. */
  readonly heartbeat: (extend?: Duration.DurationInput) => Effect.Effect<boolean, InvalidOptions | SqlError>
  /** Back to pending now with the attempt given back; the claim is over. */
  readonly release: Effect.Effect<boolean, SqlError>
  /**
   * `effect` as a child of this claim's own span, so the spans a `stream`'s
   * consumer makes for the job join the job's trace: a traced stream hands
   * each claim on with a consumer span (docs/observability.md). Any other
   * handle gives back `effect` itself (a `process` handler already runs in
   * its job's span).
   */
  readonly withJobSpan: <X, E, R>(effect: Effect.Effect<X, E, R>) => Effect.Effect<X, E, R>
}

/** A queue's depths by state (`Queue.stats`). */
export interface QueueStats {
  /** Due now. */
  readonly pending: number
  /** `runAt` in the future. */
  readonly scheduled: number
  /** Claimed, whether or not the lease is live. */
  readonly claimed: number
  /** Dead, until requeued or purged. */
  readonly dead: number
  /** `now − runAt` of the oldest due pending job. */
  readonly oldestPendingAge: Option.Option<Duration.Duration>
  /** Due pending jobs a claim could not take now because of the queue's limits (0 without limits). */
  readonly heldBack: number
}

/** At most `limit` claims in any window of `per`. */
export interface RateLimit<D = Duration.DurationInput> {
  /** Integer ≥ 1. */
  readonly limit: number
  /** A positive duration. */
  readonly per: D
}

/**
 * A queue's flow-control limits (CONTRACT §9), fleet-wide: every process
 * sharing the store obeys them. Every field is optional; `{}` turns on fair
 * rotation across groups alone. See docs/flow-control.md.
 */
export interface Limits<D = Duration.DurationInput> {
  /** At most this many jobs of the queue claimed at once (integer ≥ 1). */
  readonly concurrency?: number
  /** At most `limit` claims of the queue in any window of `per`. */
  readonly rate?: RateLimit<D>
  /** At most this many jobs of one group claimed at once; 1 makes each group serial, in enqueue order. */
  readonly groupConcurrency?: number
  /** At most `limit` claims of one group in any window of `per`. */
  readonly groupRate?: RateLimit<D>
}

/** Limits as stored and read back. */
export type StoredLimits = Limits<Duration.Duration>

/** A handle's defaults for what it enqueues; stamped onto each job, never stored. */
export interface QueueOpts {
  /** Default 300 seconds. */
  readonly visibilityTimeout?: Duration.DurationInput
  /** Default 3. */
  readonly maxAttempts?: number
  /** Default 5 seconds. */
  readonly backoffBase?: Duration.DurationInput
  /** Default none. */
  readonly expires?: Duration.DurationInput
}

/** One enqueue's options, over the handle's defaults. */
export interface EnqueueOpts {
  /** Safe integer, higher first; default 0. */
  readonly priority?: number
  /** Integer ≥ 1; overrides the handle's default. */
  readonly maxAttempts?: number
  /** The job is never delivered at or after `enqueue time + expires`. */
  readonly expires?: Duration.DurationInput
  /** Due after this long (not with `runAt`). */
  readonly delay?: Duration.DurationInput
  /** Due at this instant (not with `delay`). */
  readonly runAt?: Date | DateTime.DateTime | number
  /** Idempotency: while a job with this key is pending or claimed, its id is returned and nothing is written. */
  readonly key?: string
  /** The job's group (a tenant, a user, an account): a non-empty string. Group limits and fair rotation go by it. */
  readonly group?: string
}

/** `Queue.process`'s (and `OutboxHandle.run`'s) options. */
export interface ProcessOpts {
  /** Handlers running at once; default 1, at most 100 000. */
  readonly concurrency?: number
  /**
   * Heartbeat each claim every third of its visibility timeout while the handler runs (extending only: a
   * lease the handler made longer with its own `heartbeat` is kept).
   */
  readonly heartbeat?: boolean
}

/** `Queue.stream`'s options. */
export interface StreamOpts {
  /** Claim up to this many jobs per round trip; default 1. */
  readonly batch?: number
}

/** What a waiting operation (`take`, `stream`, `process`) can fail with besides bad options. */
export type WaitError = DatabaseReplaced | SqlError

/**
 * A handle on one queue: enqueue, claim (at once, waiting, as a stream or in a
 * worker pool), inspect and repair. `A` is the payload type (`unknown`
 * unless the queue was opened with a `schema`).
 */
export interface Queue<A = unknown> {
  /** The queue's name. */
  readonly name: string
  /** Writes one job and returns its id; joins the caller's transaction on the store's client. */
  readonly enqueue: (payload: A, opts?: EnqueueOpts) => Effect.Effect<JobId, InvalidOptions | InvalidPayload | SqlError>
  /**
   * All rows in one transaction, ids in input order; one invalid payload
   * writes nothing. A `key` applies to a batch of one only (`InvalidOptions`
   * otherwise: one key names one live job).
   */
  readonly enqueueBatch: (
    payloads: Iterable<A>,
    opts?: EnqueueOpts
  ) => Effect.Effect<ReadonlyArray<JobId>, InvalidOptions | InvalidPayload | SqlError>
  /** Claims the next claimable job now, if any (priority, then `runAt`, then id). */
  readonly claim: (workerId: string) => Effect.Effect<Option.Option<JobHandle<A>>, InvalidOptions | SqlError>
  /** Claims up to `n` claimable jobs in one transaction. */
  readonly claimBatch: (
    workerId: string,
    n: number
  ) => Effect.Effect<ReadonlyArray<JobHandle<A>>, InvalidOptions | SqlError>
  /**
   * Acks many claims of this queue in one transaction (a `claimBatch`, or
   * handles of a `stream` gathered with `Stream.groupedWithin`): for each handle, in order, whether its claim still
   * owned the job — `handle.ack` for each, one commit for all. A handle
   * claimed from another queue (another store's of the same name included),
   * or anything that is not a claim handle, is an `InvalidOptions`
   * (`"handles"`), and nothing is acked.
   */
  readonly ackAll: (handles: Iterable<JobHandle<A>>) => Effect.Effect<ReadonlyArray<boolean>, InvalidOptions | SqlError>
  /** Waits (without polling) until a job is claimable, and claims it. */
  readonly take: (workerId: string) => Effect.Effect<JobHandle<A>, InvalidOptions | WaitError>
  /**
   * Claimed handles as they become claimable. When a tracer is installed,
   * each handle is handed on with its job's `alkstore.queue.process` span
   * open (ended by the operation that settles it; see `JobHandle.withJobSpan`).
   */
  readonly stream: (workerId: string, opts?: StreamOpts) => Stream.Stream<JobHandle<A>, InvalidOptions | WaitError>
  /**
   * Runs until interrupted: success acks, failure retries on the curve with
   * the error's text, a defect retries with the pretty cause. Interruption
   * stops claiming and releases in-flight claims (no attempt spent). A
   * storage failure (`SqlError`) is logged and the worker starts again on a
   * short schedule: it fails only with `DatabaseReplaced` (or bad options).
   */
  readonly process: <E, R>(
    workerId: string,
    handler: (job: Job<A>, handle: JobHandle<A>) => Effect.Effect<void, E, R>,
    opts?: ProcessOpts
  ) => Effect.Effect<never, InvalidOptions | WaitError, R>
  /** Pending, claimed or dead; acked and cancelled jobs are gone. Payloads as stored (JSON). */
  readonly getJob: (id: JobId) => Effect.Effect<Option.Option<Job<unknown>>, SqlError>
  /** Deletes a pending or claimed job of this queue. */
  readonly cancel: (id: JobId) => Effect.Effect<boolean, SqlError>
  /** Depths by state and the oldest due job's age. */
  readonly stats: Effect.Effect<QueueStats, SqlError>
  /** Dead jobs, newest `diedAt` first; default limit 100. */
  readonly dead: (opts?: { readonly limit?: number }) => Effect.Effect<ReadonlyArray<Job<unknown>>, InvalidOptions | SqlError>
  /** Back to pending now with attempts 0 (`lastError` kept). `false` when absent, not dead, or its key is live again. */
  readonly requeueDead: (id: JobId) => Effect.Effect<boolean, SqlError>
  /** Deletes dead jobs (those that died more than `olderThan` ago; all without it); returns the count. */
  readonly purgeDead: (olderThan?: Duration.DurationInput) => Effect.Effect<number, InvalidOptions | SqlError>
}

/** What one `Queues.maintenance` run did. */
export interface MaintenanceResult {
  /** Jobs moved to dead as `"expired"`. */
  readonly expired: number
  /** Dead jobs deleted past the retention. */
  readonly purged: number
}

/** The `Queues` service. */
export interface QueuesShape {
  /**
   * A handle on the queue `name` (validated, nothing written). With
   * `schema`, payloads are encoded on enqueue and decoded on claim; a row
   * that fails to decode goes to dead and never reaches a handler.
   */
  readonly queue: {
    <A, I>(
      name: string,
      opts: QueueOpts & { readonly schema: Schema.Schema<A, I, never> }
    ): Effect.Effect<Queue<A>, InvalidName | ReservedName | InvalidOptions>
    (name: string, opts?: QueueOpts): Effect.Effect<Queue<unknown>, InvalidName | ReservedName | InvalidOptions>
  }
  /**
   * Moves expired jobs (pending, or claimed with both lease and expiry
   * passed) to dead as "expired" and purges dead rows past the retention.
   * The scheduler's leader runs it every minute.
   */
  readonly maintenance: Effect.Effect<MaintenanceResult, SqlError>
  /**
   * Refreshes the depth and oldest-pending-age gauges of every queue
   * (`alkstore.queue.depth`, `alkstore.queue.oldest_pending_age_ms`) from one
   * read of all queues. Run it on a `Schedule` in a scope where gauges are
   * exported (docs/observability.md); `queue.stats` refreshes one queue's too.
   */
  readonly sampleMetrics: Effect.Effect<void, SqlError>
  /**
   * Sets the queue's limits (replacing any it had), for every process sharing
   * the store, from the next claim on. A bad limit is `InvalidOptions` with
   * the field's name, and nothing is written.
   */
  readonly setLimits: (
    name: string,
    limits: Limits
  ) => Effect.Effect<void, InvalidName | ReservedName | InvalidOptions | SqlError>
  /** The queue's limits, if it has any. */
  readonly limits: (name: string) => Effect.Effect<Option.Option<StoredLimits>, InvalidName | ReservedName | SqlError>
  /** Removes the queue's limits; `true` when it had some. */
  readonly clearLimits: (name: string) => Effect.Effect<boolean, InvalidName | ReservedName | SqlError>
}

/** Durable job queues; every store layer provides it. */
export class Queues extends Context.Tag("alkstore/Queues")<Queues, QueuesShape>() {}

/** Builds the service over an engine. */
export const make: Effect.Effect<QueuesShape, never, Engine> = internalQueues.makeQueues

/** The service over the engine a store layer provides. */
export const layer: Layer.Layer<Queues, never, Engine> = Layer.effect(Queues, make)

/** The contract's backoff curve: `min(base × 2^(attempts−1), 1 h)`. */
export const backoff: (base: Duration.DurationInput, attempts: number) => Duration.Duration = internal.backoff
