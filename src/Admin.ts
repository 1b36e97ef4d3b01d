/**
 * The operator's view of a store (the CLI and the dashboard run on it):
 * every queue's depths, jobs across a queue by state, any job by id alone,
 * the locks and schedules as stored, and the repairs (requeue, cancel,
 * purge) by id, with the job's queue looked up. Repairs run the queue's own
 * operations, so they keep the contract's rules and wake waiting workers.
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

export const jobStates: ReadonlyArray<JobState> = ["pending", "scheduled", "claimed", "dead"]

/** A job as the operator sees it: its state tells a not-yet-due job from a due one. */
export interface JobInfo extends Omit<Job<unknown>, "state"> {
  readonly state: JobState
}

export interface QueueSummary {
  readonly name: string
  /** Due now. */
  readonly pending: number
  readonly scheduled: number
  readonly claimed: number
  readonly dead: number
  /** `now − runAt` of the oldest due job. */
  readonly oldestPendingAge: Option.Option<Duration.Duration>
}

export interface LockInfo {
  readonly name: string
  /** The last holder (a released or lapsed lock keeps its row and token). */
  readonly owner: string
  readonly token: number
  readonly expiresAt: DateTime.Utc
  /** Whether the lease is live now. */
  readonly held: boolean
}

/** Store-wide counters for rates between two readings. */
export interface Totals {
  /** The highest job id ever assigned: its growth is the enqueue count. */
  readonly lastJobId: number
  /** Jobs in the table (pending, scheduled, claimed, dead). */
  readonly live: number
}

export interface JobsFilter {
  /** Any queue name, outbox queues (`__alkstore_outbox:<name>`) included. */
  readonly queue?: string
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

export interface AdminShape {
  /** Every queue with jobs or a schedule feeding it, by name. */
  readonly queues: Effect.Effect<ReadonlyArray<QueueSummary>, SqlError>
  readonly totals: Effect.Effect<Totals, SqlError>
  /** Newest first. */
  readonly jobs: (filter?: JobsFilter) => Effect.Effect<ReadonlyArray<JobInfo>, InvalidName | InvalidOptions | SqlError>
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
  readonly schedules: Effect.Effect<ReadonlyArray<Schedule>, SqlError>
  readonly locks: Effect.Effect<ReadonlyArray<LockInfo>, SqlError>
  /** The engine's applied migrations, in order (`<id>_<name>`). */
  readonly migrations: Effect.Effect<ReadonlyArray<string>, SqlError>
}

export class Admin extends Context.Tag("alkstore/Admin")<Admin, AdminShape>() {}

export const make: Effect.Effect<AdminShape, never, Engine> = internal.makeAdmin

export const layer: Layer.Layer<Admin, never, Engine> = Layer.effect(Admin, make)
