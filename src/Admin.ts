/**
 * The operator's view of a store (the CLI and the dashboard run on it):
 * every queue's depths, jobs across a queue by state, any job by id alone,
 * the locks and schedules as stored, and the repairs (requeue, cancel,
 * purge) by id, with the job's queue looked up. Repairs run the queue's own
 * operations, so they keep the contract's rules and wake waiting workers.
 *
 * @module
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Context, type DateTime, type Duration, type Effect, Layer, type Option } from "effect"
import { Engine } from "./internal/engine.js"
import * as internal from "./internal/admin.js"
import type { Job } from "./Queues.js"
import type { Schedule } from "./Scheduler.js"
import type { InvalidName, InvalidOptions } from "./StoreError.js"

/** `scheduled` is a pending job not yet due. */
export type JobState = "pending" | "scheduled" | "claimed" | "dead"

/** Every `JobState`, in the order the CLI and dashboard list them. */
export const jobStates: ReadonlyArray<JobState> = ["pending", "scheduled", "claimed", "dead"]

/**
 * The trace context a job was enqueued in, as its row keeps it: the span
 * that enqueued it (an `alkstore.queue.enqueue` span, or the application's
 * own when no tracer is installed), to find the request in a tracing backend.
 */
export interface TraceContext {
  /** As stored: W3C `traceparent`, `00-<trace id>-<span id>-<flags>`. */
  readonly traceparent: string
  /** 32 lowercase hex digits. */
  readonly traceId: string
  /** The enqueuing span's id, 16 lowercase hex digits. */
  readonly spanId: string
  /** The trace's sampled flag when it was enqueued. */
  readonly sampled: boolean
}

/** A job as the operator sees it: its state tells a not-yet-due job from a due one. */
export interface JobInfo extends Omit<Job<unknown>, "state"> {
  /** As `Job.state`, with a pending job not yet due told apart as `"scheduled"`. */
  readonly state: JobState
  /** The trace context it was enqueued in; none when it was enqueued outside any span. */
  readonly traceContext: Option.Option<TraceContext>
}

/** One queue's depths by state, as `Admin.queues` lists them. */
export interface QueueSummary {
  /** The queue's name (an outbox's as `__alkstore_outbox:<name>`). */
  readonly name: string
  /** Due now. */
  readonly pending: number
  /** Pending, due later. */
  readonly scheduled: number
  /** Claimed, whether or not the lease is live. */
  readonly claimed: number
  /** Dead, until requeued or purged. */
  readonly dead: number
  /** `now − runAt` of the oldest due job. */
  readonly oldestPendingAge: Option.Option<Duration.Duration>
}

/** A lock row as stored: its last holder, fencing token and lease end. */
export interface LockInfo {
  /** The lock's name (the scheduler's leadership is `__alkstore_scheduler`). */
  readonly name: string
  /** The last holder (a released or lapsed lock keeps its row and token). */
  readonly owner: string
  /** The fencing token of the last tenure. */
  readonly token: number
  /** The last tenure's lease end. */
  readonly expiresAt: DateTime.Utc
  /** Whether the lease is live now. */
  readonly held: boolean
}

/** Store-wide counters for rates between two readings. */
export interface Totals {
  /**
   * The highest job id ever assigned: its growth is the enqueue count. On
   * PostgreSQL an enqueue rolled back with its transaction still took an id
   * from the sequence, so there it counts those too (a deduplicated keyed
   * enqueue takes none, except one that waited for the key's holder in a
   * transaction still open: it took one before it met the key).
   */
  readonly lastJobId: number
  /** Jobs in the table (pending, scheduled, claimed, dead). */
  readonly live: number
}

/** Which jobs `Admin.jobs` lists; every field optional. */
export interface JobsFilter {
  /** Any queue name, outbox queues (`__alkstore_outbox:<name>`) included. */
  readonly queue?: string
  /** Only jobs in this state. */
  readonly state?: JobState
  /** Default 50, at most 1000. */
  readonly limit?: number
  /** Only ids below this one (paging, newest first). */
  readonly beforeId?: number
}

/** What a repair by id found. */
export type RepairOutcome =
  | { readonly _tag: "Done"; readonly job: JobInfo }
  | { readonly _tag: "NotFound" }
  | { readonly _tag: "Refused"; readonly job: JobInfo; readonly reason: string }

/** The `Admin` service: reads across the whole store, and repairs by job id. */
export interface AdminShape {
  /** Every queue with jobs or a schedule feeding it, by name. */
  readonly queues: Effect.Effect<ReadonlyArray<QueueSummary>, SqlError>
  /** Store-wide counters; two readings give the enqueue and completion rates. */
  readonly totals: Effect.Effect<Totals, SqlError>
  /** Newest first. */
  readonly jobs: (filter?: JobsFilter) => Effect.Effect<ReadonlyArray<JobInfo>, InvalidName | InvalidOptions | SqlError>
  /** Any job by id, whatever its queue; `None` once acked, cancelled or purged. */
  readonly job: (id: number) => Effect.Effect<Option.Option<JobInfo>, InvalidOptions | SqlError>
  /** A dead job back to pending now with attempts 0 (`Queue.requeueDead`). */
  readonly requeue: (id: number) => Effect.Effect<RepairOutcome, InvalidOptions | SqlError>
  /** Deletes a pending or claimed job (`Queue.cancel`). */
  readonly cancel: (id: number) => Effect.Effect<RepairOutcome, InvalidOptions | SqlError>
  /** `Queue.purgeDead` of a queue by name; returns the count. */
  readonly purgeDead: (
    queue: string,
    olderThan?: Duration.DurationInput
  ) => Effect.Effect<number, InvalidName | InvalidOptions | SqlError>
  /** Every registered schedule, as stored. */
  readonly schedules: Effect.Effect<ReadonlyArray<Schedule>, SqlError>
  /** Every lock row, held or not. */
  readonly locks: Effect.Effect<ReadonlyArray<LockInfo>, SqlError>
  /** The engine's applied migrations, in order (`<id>_<name>`). */
  readonly migrations: Effect.Effect<ReadonlyArray<string>, SqlError>
}

/** The operator's view of a store; every store layer provides it. */
export class Admin extends Context.Tag("alkstore/Admin")<Admin, AdminShape>() {}

/** Builds the service over an engine (a store layer does this for you). */
export const make: Effect.Effect<AdminShape, never, Engine> = internal.makeAdmin

/** The service over the engine a store layer provides. */
export const layer: Layer.Layer<Admin, never, Engine> = Layer.effect(Admin, make)
