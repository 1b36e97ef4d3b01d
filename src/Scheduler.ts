/**
 * The interval scheduler, collapsed into queues (docs/contract.md §5):
 * two registrations and one runner. Nothing fires unless some process runs
 * `runSchedules` (or `runAsStandby`).
 *
 * @module
 */
import type { SqlError } from "@effect/sql/SqlError"
import { Context, type DateTime, type Duration, type Effect, Layer, type Option } from "effect"
import { Engine } from "./internal/engine.js"
import * as internal from "./internal/scheduler.js"
import type {
  DatabaseReplaced,
  InvalidName,
  InvalidOptions,
  InvalidPayload,
  InvalidSpec,
  LeadershipLost,
  ReservedName
} from "./StoreError.js"

/** Options stamped onto every job a schedule fires. */
export interface ScheduleOpts {
  /** Priority of each fired job; default 0. */
  readonly priority?: number
  /** Attempts of each fired job; default 3. */
  readonly maxAttempts?: number
  /** Each fired job expires this long after its boundary (> 0); default never. */
  readonly expires?: Duration.DurationInput
  /** The group of each fired job (flow control, docs/flow-control.md); default none. */
  readonly group?: string
}

/** The stored registration, read back. */
export interface Schedule {
  /** Unique: registering the same name again updates it. */
  readonly name: string
  /** As registered, e.g. `"@every 5m"`. */
  readonly spec: string
  /** The spec's interval. */
  readonly interval: Duration.Duration
  /** Where each fire enqueues its job. */
  readonly queue: string
  /** Each fired job's payload. */
  readonly payload: unknown
  /** Stamped onto each fired job. */
  readonly opts: {
    readonly priority: number
    readonly maxAttempts: number
    readonly expires: Option.Option<Duration.Duration>
    readonly group: Option.Option<string>
  }
  /** The next boundary: the leader fires it once it has passed. */
  readonly nextFireAt: DateTime.Utc
}

/** The `Scheduler` service. */
export interface SchedulerShape {
  /**
   * Registers (upserts by name) a schedule firing `payload` into `queue` at
   * every boundary of `spec` (`@every <n><s|m|h|d>`). The same spec keeps the
   * boundary phase; a changed spec restarts it from now. First boundary:
   * registration + interval.
   */
  readonly schedule: (
    name: string,
    spec: string,
    queue: string,
    payload: unknown,
    opts?: ScheduleOpts
  ) => Effect.Effect<Schedule, InvalidName | ReservedName | InvalidSpec | InvalidOptions | InvalidPayload | SqlError>
  /** `true` when removed, `false` when there was none. */
  readonly unschedule: (name: string) => Effect.Effect<boolean, InvalidName | ReservedName | SqlError>
  /**
   * The leader loop: take the leadership lease (or fail with
   * `LeadershipLost`), renew it in a forked fiber, fire every due boundary in
   * one fenced transaction per tick, sleep until the next boundary or a
   * registration change. Interrupting it is the stop: the lease is released
   * at once. Each evaluation is its own runner (its own owner).
   */
  readonly runSchedules: Effect.Effect<never, LeadershipLost | DatabaseReplaced | SqlError>
  /**
   * Forever: try to lead (every half lease, and at once when a leader
   * releases), lead until leadership is lost, repeat. Run it in every process
   * of a fleet; exactly one leads at a time.
   */
  readonly runAsStandby: Effect.Effect<never, DatabaseReplaced | SqlError>
}

/** The interval scheduler; every store layer provides it. */
export class Scheduler extends Context.Tag("alkstore/Scheduler")<Scheduler, SchedulerShape>() {}

/** Builds the service over an engine (a store layer does this for you). */
export const make: Effect.Effect<SchedulerShape, never, Engine> = internal.makeScheduler

/** The service over the engine a store layer provides. */
export const layer: Layer.Layer<Scheduler, never, Engine> = Layer.effect(Scheduler, make)
