import type { SqlError } from "@effect/sql/SqlError"
import { type Clock, Context, Effect, type Option } from "effect"
import type { FlowMemory } from "./flowMemory.js"
import type { ResolvedEnqueue, ResolvedLimits } from "./options.js"
import type { Lifetime } from "./lifetime.js"
import type { AdminStorage, LockStorage, PersistedQueueStorage, RateLimiterStorage, ScheduleStorage } from "./mechanismStorage.js"
import type { StatementStop } from "./stoppableClaim.js"
import type { WakeHub } from "./wake.js"

/**
 * The engine seam (like Oban's engines): the contract's rules live once in
 * the engine-free services; each engine implements these storage operations
 * with its own SQL, in one place per mechanism. The queues' and flow
 * control's storage is here, the other mechanisms' in mechanismStorage.ts
 * (re-exported).
 */
export * from "./mechanismStorage.js"

/** A job row as storage keeps it; instants in epoch milliseconds. */
export interface JobRow {
  readonly id: number
  readonly queue: string
  readonly payload: string
  /** `scheduled` is a pending job whose `runAt` was in the future when written. */
  readonly state: "pending" | "scheduled" | "claimed" | "dead"
  readonly priority: number
  readonly run_at: number
  readonly attempts: number
  readonly max_attempts: number
  readonly visibility_timeout: number
  readonly backoff_base: number
  readonly expires_at: number | null
  readonly claimed_until: number | null
  readonly worker_id: string | null
  readonly claim_token: number
  readonly created_at: number
  readonly last_error: string | null
  readonly died_at: number | null
  /** The enqueuer's trace context (W3C `traceparent`), when it was enqueued inside a span. */
  readonly trace_context?: string | null
  /**
   * Set by a claim only: the row was claimed from a lapsed lease (its previous
   * claim neither settled nor heartbeat in time).
   */
  readonly lapsed?: boolean
}

export interface NewJob extends ResolvedEnqueue {
  readonly queue: string
  readonly payload: string
  readonly createdAt: number
  /** The enqueuer's span as a W3C `traceparent`, stored for the handler's span link. */
  readonly traceContext?: string | undefined
}

/**
 * A new job's values in the column order every engine's insert lists them:
 * queue, payload, state, priority, run_at, max_attempts, visibility_timeout,
 * backoff_base, expires_at, idempotency_key, created_at, trace_context, then
 * (flow control) group_key. A job due later is stored `scheduled`, outside the claim index.
 */
export const newJobValues = (job: NewJob): Array<string | number | null> => [
  job.queue,
  job.payload,
  job.runAt > job.createdAt ? "scheduled" : "pending",
  job.priority,
  job.runAt,
  job.maxAttempts,
  job.visibilityTimeoutMillis,
  job.backoffBaseMillis,
  job.expiresAt ?? null,
  job.key ?? null,
  job.createdAt,
  job.traceContext ?? null,
  job.group
]

/**
 * Whether `b` has `a`'s values in every column but the payload (and neither has a key): a batch of such
 * jobs (one `enqueueBatch`) goes in with those values bound once and a list of payloads.
 */
export const sharesAllButPayload = (a: NewJob, b: NewJob) =>
  a.queue === b.queue && a.priority === b.priority && a.runAt === b.runAt && a.maxAttempts === b.maxAttempts &&
  a.visibilityTimeoutMillis === b.visibilityTimeoutMillis && a.backoffBaseMillis === b.backoffBaseMillis &&
  a.expiresAt === b.expiresAt && a.createdAt === b.createdAt && a.traceContext === b.traceContext &&
  a.group === b.group && a.key === undefined && b.key === undefined

/** What a maintenance round did; `expiredByQueue` splits `expired` by queue (for the metrics). */
export interface MaintenanceRow {
  readonly expired: number
  readonly purged: number
  /** Flow-control claim-log scopes forgotten (their last claim left the window). */
  readonly pruned: number
  readonly expiredByQueue: ReadonlyArray<{ readonly queue: string; readonly count: number }>
}

export interface StatsRow {
  readonly pending: number
  readonly scheduled: number
  readonly claimed: number
  readonly dead: number
  readonly oldestPendingRunAt: number | null
}

/** A claim as the fence sees it: the job id and the claim token it took. */
export interface Fence {
  readonly id: number
  readonly token: number
}

/** How a worker's fused ack + claim stops (`QueueStorage.ackAndClaim`), and who hears of its ack after a stop. */
export interface StoppedStep {
  readonly stop: StatementStop
  readonly acked: (acked: boolean) => void
}

export interface QueueStorage {
  /** Inserts in one transaction, in input order; a live job's `key` returns its id instead. */
  readonly insert: (jobs: ReadonlyArray<NewJob>) => Effect.Effect<ReadonlyArray<number>, SqlError>
  /** `insert` of one job (the hot path of every enqueue). */
  readonly insertOne: (job: NewJob) => Effect.Effect<number, SqlError>
  /**
   * `insertOne` without an effect, where the engine's connection is
   * synchronous: the id, or `undefined` when the connection is not free now
   * for the fiber whose context is given (use `insertOne` then). Throws `SqlError`.
   */
  readonly insertOneNow?: (context: Context.Context<never>, job: NewJob) => number | undefined
  /**
   * `insert` of a batch whose jobs differ in their payloads alone (one `enqueueBatch` without a key): the
   * jobs as `template` with each of `payloads`, without a job object per payload, where the engine has it.
   */
  readonly insertPayloads?: (template: NewJob, payloads: ReadonlyArray<string>) => Effect.Effect<ReadonlyArray<number>, SqlError>
  /**
   * Claims up to `limit` claimable jobs in contract order. Due jobs that have
   * expired or spent their attempts move to dead on the way instead: their
   * rows come after the claimed ones, with state `dead` (for the metrics;
   * they are not claims).
   *
   * `clock` is read when the claim is judged, after any wait for the write
   * lock, the limits row or a busy file: a claim made at 9 s after waiting
   * from 0 s is judged and stamped in its rate window at 9 s
   * (docs/flow-control.md, "Rate").
   */
  readonly claim: (
    queue: string,
    workerId: string,
    clock: Clock.Clock,
    limit: number
  ) => Effect.Effect<ReadonlyArray<JobRow>, SqlError>
  /** Whether a claim now could find anything (a read: no write lock). */
  readonly hasClaimable: (queue: string, now: number) => Effect.Effect<boolean, SqlError>
  /** The next instant after `now` when something in `queue` becomes claimable. */
  readonly nextDeadline: (queue: string, now: number) => Effect.Effect<Option.Option<number>, SqlError>
  readonly ack: (fence: Fence) => Effect.Effect<boolean, SqlError>
  /**
   * `ack` of each, in one transaction. With `bury` and `cancel`, it tells
   * other processes of the slots it frees in a queue with limits in its own
   * statement where the engine must tell them (PostgreSQL's NOTIFY).
   */
  readonly ackMany: (fences: ReadonlyArray<Fence>) => Effect.Effect<ReadonlyArray<boolean>, SqlError>
  /**
   * Acks one claim and claims up to `limit` more in one transaction: a busy
   * worker pays one commit per job instead of two. `stopped`: its
   * statements stop as a take's claim does where they can wait on the server
   * (`claimsWaitOnServer`; src/internal/stoppableClaim.ts), and `acked`
   * hears of the ack of a step stopped before its answer came. Given here
   * rather than through `statementStop`, whose setting costs a worker's step
   * a fiber-ref change and its undoing per job.
   */
  readonly ackAndClaim: (
    fence: Fence,
    queue: string,
    workerId: string,
    clock: Clock.Clock,
    limit: number,
    stopped?: StoppedStep
  ) => Effect.Effect<{ readonly acked: boolean; readonly rows: ReadonlyArray<JobRow> }, SqlError>
  /** `ackAndClaim` in place, as `insertOneNow` is `insertOne` in place. */
  readonly ackAndClaimNow?: (
    context: Context.Context<never>,
    fence: Fence,
    queue: string,
    workerId: string,
    clock: Clock.Clock,
    limit: number
  ) => { readonly acked: boolean; readonly rows: ReadonlyArray<JobRow> } | undefined
  readonly retry: (fence: Fence, runAt: number, now: number, error: string | undefined) => Effect.Effect<boolean, SqlError>
  readonly bury: (fence: Fence, now: number, error: string | undefined) => Effect.Effect<boolean, SqlError>
  readonly heartbeat: (fence: Fence, claimedUntil: number) => Effect.Effect<boolean, SqlError>
  /** `heartbeat`, but never to an end earlier than the lease's now (the automatic heartbeat). */
  readonly keepAlive: (fence: Fence, claimedUntil: number) => Effect.Effect<boolean, SqlError>
  readonly release: (fence: Fence, now: number) => Effect.Effect<boolean, SqlError>
  readonly get: (queue: string, id: number) => Effect.Effect<Option.Option<JobRow>, SqlError>
  readonly cancel: (queue: string, id: number) => Effect.Effect<boolean, SqlError>
  readonly stats: (queue: string, now: number) => Effect.Effect<StatsRow, SqlError>
  readonly dead: (queue: string, limit: number) => Effect.Effect<ReadonlyArray<JobRow>, SqlError>
  readonly requeueDead: (queue: string, id: number, now: number) => Effect.Effect<boolean, SqlError>
  /** Deletes at most `limit` of `queue`'s dead jobs (those that died before `diedBefore`, when given); how many. */
  readonly purgeDead: (queue: string, diedBefore: number | undefined, limit: number) => Effect.Effect<number, SqlError>
  /** The `limit` of this engine's rounds of maintenance and `purgeDead` (src/internal/rounds.ts). */
  readonly maintenanceRows: number
  /**
   * Whether an interruption can land after a claim's statement committed and
   * before its rows are handed over (an asynchronous driver: PostgreSQL, an
   * application's client). The store's own SQLite connection runs a claim and
   * hands its rows over in one synchronous call; the Effect steps that make
   * the handles after it are as few as those that return them to the caller,
   * a window no guard inside the call can close (docs/decisions.md).
   */
  readonly claimsCanBeCutOff: boolean
  /**
   * Whether a claim's statement can wait on the server for as long as
   * another session holds a lock it needs, or the pool has no connection
   * free (PostgreSQL). A caller's interruption then ends its wait for the
   * claim, not the claim (src/internal/stoppableClaim.ts).
   */
  readonly claimsWaitOnServer: boolean
  /**
   * One bounded round: at most `limit` expired jobs swept to dead and at most
   * `limit` dead jobs that died before `purgeDiedBefore` deleted, in one
   * transaction.
   */
  readonly maintenance: (
    now: number,
    purgeDiedBefore: number,
    limit: number
  ) => Effect.Effect<MaintenanceRow, SqlError>
}

/** What a read-only flow walk found: whether a claim now could take a job, and when a rate window reopens. */
export interface FlowProbe {
  readonly limited: boolean
  readonly claimable: boolean
  readonly reopenAt: number | null
}

/**
 * Flow control's storage (CONTRACT §9): the limits rows, and the read-only
 * walks waiters and `stats` use. Limited claims themselves run inside
 * `QueueStorage.claim` (its "this queue has limits" check routes them).
 */
export interface FlowStorage {
  readonly get: (queue: string) => Effect.Effect<Option.Option<ResolvedLimits>, SqlError>
  /** Upserts; a queue getting limits numbers its live jobs' rounds (docs/flow-control.md). */
  readonly set: (queue: string, limits: ResolvedLimits, now: number) => Effect.Effect<void, SqlError>
  readonly clear: (queue: string) => Effect.Effect<boolean, SqlError>
  readonly probe: (queue: string, now: number) => Effect.Effect<FlowProbe, SqlError>
  /** How many due pending jobs a claim could take now; `undefined` without limits. */
  readonly claimablePending: (queue: string, now: number) => Effect.Effect<number | undefined, SqlError>
  /** Tells other processes a limited queue's slot freed, on commit (PostgreSQL's NOTIFY; SQLite's commits tell by themselves). */
  readonly freed: (queue: string) => Effect.Effect<void, SqlError>
  /**
   * An ack of a job of a queue known limited that also tells other processes
   * (`freed`) in its own statement, one round trip for both; absent where
   * `freed` costs nothing (SQLite).
   */
  readonly ackFreeing?: (fence: Fence, queue: string) => Effect.Effect<boolean, SqlError>
  /**
   * `freed` for a queue this process has not seen limited (the jobs a
   * maintenance round expired): told only when the queue has limits, decided
   * by the statement (PostgreSQL; nothing on SQLite, as `freed`).
   */
  readonly freedIfLimited: (queue: string) => Effect.Effect<void, SqlError>
  readonly memory: FlowMemory
}

/**
 * Told of the key holders a keyed insert or a `requeueDead` moved to dead on
 * the way (their queue, and each one's `last_error`), for the metrics.
 */
export type HoldersBuried = (queue: string, lastErrors: ReadonlyArray<unknown>) => void

export interface EngineSettings {
  /** Dead rows older than this are purged by maintenance. */
  readonly deadRetentionMillis: number
  /** The scheduler's leadership lease. */
  readonly leaderTtlMillis: number
  /** How often the leader renews its lease. */
  readonly leaderRenewMillis: number
  /** How often the scheduler's leader runs queue maintenance. */
  readonly maintenanceEveryMillis: number
  /** The waiters' safety-net poll. */
  readonly fallbackPollMillis: number
}

export const defaultSettings: EngineSettings = {
  deadRetentionMillis: 7 * 24 * 3_600_000,
  leaderTtlMillis: 10_000,
  leaderRenewMillis: 2_000,
  maintenanceEveryMillis: 60_000,
  fallbackPollMillis: 5_000
}

export interface EngineShape {
  readonly queues: QueueStorage
  readonly flow: FlowStorage
  readonly locks: LockStorage
  readonly schedules: ScheduleStorage
  readonly admin: AdminStorage
  readonly persistedQueue: PersistedQueueStorage
  readonly rateLimiter: RateLimiterStorage
  /** A write transaction (SQLite: `BEGIN IMMEDIATE`), or a savepoint inside one. */
  readonly transaction: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E | SqlError, R>
  /**
   * Wakes `count` waiters of `topic` once the transaction open in `context`
   * commits (at once when none is open; never when it rolls back).
   * Synchronous so hot paths can call it from a fiber's context.
   */
  readonly signal: (context: Context.Context<never>, topic: string, count: number) => void
  /**
   * Runs `f` once the store's own transaction open in `context` commits (never when it rolls back), at
   * once outside one — or in an application's transaction, whose end the store cannot hook. Metrics of
   * writes made in a store transaction (a PersistedQueue's shared settle, which may roll back and run
   * each settle again alone) count once, for what committed.
   */
  readonly afterCommit: (context: Context.Context<never>, f: () => void) => void
  /** Wakes waiters: in-process signals plus the engine's cross-process feed. */
  readonly wake: WakeHub
  /** Stops the store's long-lived work when it closes, before its connection does (`lifetime.ts`). */
  readonly lifetime: Lifetime
  /** Unique per store instance: the default lock owner's prefix. */
  readonly instanceId: string
  readonly settings: EngineSettings
  /** Queues whose gauges this store set to a depth (`stats`, the sampler): the sampler zeroes them once empty. */
  readonly gaugedQueues: Set<string>
}

export class Engine extends Context.Tag("alkstore/internal/Engine")<Engine, EngineShape>() {}

/** `engine.signal` as an effect, in the calling fiber's transaction. */
export const signalOnCommit = (engine: EngineShape, topic: string, count = 1): Effect.Effect<void> =>
  Effect.withFiberRuntime((fiber) => {
    engine.signal(fiber.currentContext, topic, count)
    return Effect.void
  })
