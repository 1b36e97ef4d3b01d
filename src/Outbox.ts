/**
 * The transactional outbox (docs/contract.md §6): enqueue a delivery in the same
 * transaction as the application's write; deliver it at least once with
 * retries on the curve. Backed by the queue `__alkstore_outbox:{name}`,
 * which no `Queues` entry point can reach.
 *
 * @module
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Context, type Effect, Layer } from "effect"
import { Engine } from "./internal/engine.js"
import * as internal from "./internal/outbox.js"
import type { EnqueueOpts, Job, JobHandle, JobId, ProcessOpts, Queue, QueueOpts, WaitError } from "./Queues.js"
import type { InvalidName, InvalidOptions, InvalidPayload, ReservedName } from "./StoreError.js"

/** A delivery: succeed to ack the job, fail (or die) to retry it on the backoff curve. */
export type Deliver<E, R> = (job: Job<unknown>, handle: JobHandle<unknown>) => Effect.Effect<void, E, R>

/** One outbox: enqueue in your transaction, deliver with `run` or `runOnce`, inspect and repair. */
export interface OutboxHandle {
  /** The outbox's name (its backing queue is `__alkstore_outbox:{name}`). */
  readonly name: string
  /** Defaults: 60 s visibility, 5 attempts, 5 s backoff base. Joins the caller's transaction. */
  readonly enqueue: (
    payload: unknown,
    opts?: EnqueueOpts
  ) => Effect.Effect<JobId, InvalidOptions | InvalidPayload | SqlError>
  /**
   * Claims one job and delivers it: success acks, a failure or defect retries
   * on the curve with its text as last error. `true` when it claimed a job
   * (whatever the delivery's outcome), `false` when there was none.
   */
  readonly runOnce: <E, R>(workerId: string, deliver: Deliver<E, R>) => Effect.Effect<boolean, InvalidOptions | SqlError, R>
  /** Delivers continuously, waking on new work; interruption releases in-flight claims. */
  readonly run: <E, R>(
    workerId: string,
    deliver: Deliver<E, R>,
    opts?: ProcessOpts
  ) => Effect.Effect<never, InvalidOptions | WaitError, R>
  /** The backing queue's depths (`Queue.stats`). */
  readonly stats: Queue["stats"]
  /** Dead deliveries, newest first (`Queue.dead`). */
  readonly dead: Queue["dead"]
  /** A dead delivery back to pending (`Queue.requeueDead`). */
  readonly requeueDead: Queue["requeueDead"]
  /** Deletes dead deliveries (`Queue.purgeDead`). */
  readonly purgeDead: Queue["purgeDead"]
  /** One delivery by id (`Queue.getJob`). */
  readonly getJob: Queue["getJob"]
}

/** The `Outbox` service. */
export interface OutboxShape {
  /**
   * The outbox `name`; `opts` override its defaults (60 s visibility, 5
   * attempts, 5 s backoff base, no expiry) for what this handle enqueues.
   */
  readonly outbox: (name: string, opts?: QueueOpts) => Effect.Effect<OutboxHandle, InvalidName | ReservedName | InvalidOptions>
}

/** The transactional outbox; every store layer provides it. */
export class Outbox extends Context.Tag("alkstore/Outbox")<Outbox, OutboxShape>() {}

/** Builds the service over an engine (a store layer does this for you). */
export const make: Effect.Effect<OutboxShape, never, Engine> = internal.makeOutboxes

/** The service over the engine a store layer provides. */
export const layer: Layer.Layer<Outbox, never, Engine> = Layer.effect(Outbox, make)
