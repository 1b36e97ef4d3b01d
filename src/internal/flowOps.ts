import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import type { JobRow } from "./engine.js"
import type { ResolvedLimits } from "./options.js"

/*
 * What the flow walk (flow.ts) asks of an engine and answers: the rows it
 * reads (`Candidate`, `Start`, `GroupStart`), the operations each engine
 * implements on its own tables (`FlowOps`), the walk's outcome, and how a
 * walk is driven over effectful operations (`runEffect`; SQLite's own
 * connection drives it synchronously, sqlite/flowStorage.ts).
 */

export interface LimitsRow extends ResolvedLimits {
  /** The round of the latest claim: where a group without live jobs starts. */
  readonly currentRound: number
}

/** The rows a walk reads apart from the pending pages, in walk order (flow.ts `EXTRA_PAGE` at a time). */
export type ExtraKind = "lapsed" | "due"

/** A due job as the walk sees it. */
export interface Candidate {
  readonly id: number
  readonly priority: number
  readonly round: number
  readonly runAt: number
  readonly group: string
  readonly state: "pending" | "scheduled" | "claimed"
  /**
   * A lapsed claim that a claim would move to dead, not hand out (its attempts
   * spent, or expired): read with the lapsed claims only (rare rows; the
   * pending pages stay on their covering indexes). SQLite answers 0 or 1.
   */
  readonly doomed?: boolean | number
}

/** What the walk needs before its first candidate (`FlowOps.start`). */
export interface StartRequest {
  /** Count the queue's live claims (it has a `concurrency`). */
  readonly inFlight: boolean
  /** Read the last sequence number of the queue's claim log (it has a `rate`). */
  readonly queueLast: boolean
  /** Due scheduled jobs to read, up to this many (a read-only walk cannot promote them); 0: none. */
  readonly dueScheduled: number
  /** The first page of pending candidates, this many. */
  readonly pageSize: number
}

export interface Start {
  readonly inFlight: number
  readonly queueLast: number
  /** Claimed jobs whose lease lapsed, the first `EXTRA_PAGE` in walk order. */
  readonly lapsed: ReadonlyArray<Candidate>
  /** Due scheduled rows (as asked), the first ones in walk order. */
  readonly dueScheduled: ReadonlyArray<Candidate>
  /** Due pending jobs in walk order, the first `pageSize`. */
  readonly page: ReadonlyArray<Candidate>
}

/** A group as the walk first meets it. */
export interface GroupStart {
  /** Its jobs claimed with a live lease. */
  readonly inFlight: number
  /** Its live jobs ahead of the candidate met, counted up to the cap asked for (0 without one). */
  readonly ahead: number
  /** The last sequence number of its claim log (0 when not asked for). */
  readonly last: number
}

/** What a claim writes when it takes its job (and only then): the rules' bookkeeping, decided by the walk. */
export interface ClaimWrites {
  /** Claim-log entries (scope, sequence number), at the claim's instant. */
  readonly log: ReadonlyArray<readonly [scope: string, seq: number]>
  /** The queue's current round moves up to this (never down), or stays. */
  readonly round: number | null
}

/**
 * What the walk asks of storage, bound to one queue, one instant and one
 * worker. Reads are grouped by when the walk needs them (`start`,
 * `groupStart`), so an engine that pays a round trip per statement can
 * answer each group in one.
 */
export interface FlowOps {
  /**
   * The queue's limits. Claiming (`lock`), limited claims serialise here
   * (on PostgreSQL the row is taken `FOR UPDATE`; that engine also promotes
   * due scheduled rows in the same statement and makes `promote` a no-op).
   */
  readonly limits: (lock: boolean) => LimitsRow | undefined
  /** Due scheduled rows into the claim index. */
  readonly promote: () => void
  readonly start: (request: StartRequest) => Start
  /** Due pending jobs in walk order, after `after` (exclusive). */
  readonly pending: (after: Candidate, size: number) => ReadonlyArray<Candidate>
  /**
   * The next page, in walk order after `after` (exclusive), of the queue's lapsed claims or (a read-only
   * walk) its due scheduled rows: what `start` read first, `EXTRA_PAGE` rows at a time.
   */
  readonly extra: (kind: ExtraKind, after: Candidate) => ReadonlyArray<Candidate>
  /** `ahead` counts live jobs of `group` ahead of (round, id) up to `cap` (null: not asked); `last` when `log`. */
  readonly groupStart: (group: string, round: number, id: number, cap: number | null, log: boolean) => GroupStart
  /** Live jobs of `group` ahead of (round, id), counted up to `cap`. */
  readonly groupAhead: (group: string, round: number, id: number, cap: number) => number
  /**
   * The instant of claim `seq` of `scope`; when it was pruned, that of the
   * oldest claim still logged after it (it was made no later: an upper
   * bound, see `admits`); `undefined` when nothing from `seq` on is logged.
   */
  readonly logAt: (scope: string, seq: number) => number | undefined
  /**
   * Claims the job if it is still claimable (or moves it to dead when it
   * expired or spent its attempts); when it claimed it, also makes `writes`.
   */
  readonly claim: (id: number, writes: ClaimWrites) => JobRow | undefined
  /** Forgets claims of `scope` up to `seq` that left the window (claimed at or before `before`). */
  readonly prune: (scope: string, seq: number, before: number) => void
}

export type Call = { readonly [K in keyof FlowOps]: { readonly op: K; readonly args: Parameters<FlowOps[K]> } }[keyof FlowOps]
export type Walk<A> = Generator<Call, A, any>

export function* call<K extends keyof FlowOps>(op: K, ...args: Parameters<FlowOps[K]>): Walk<ReturnType<FlowOps[K]>> {
  return yield { op, args } as Call
}

export type FlowOutcome =
  | { readonly limited: false }
  | {
    readonly limited: true
    /**
     * Claimed rows in walk order (mode `claim`), those taken from a lapsed
     * lease marked `lapsed`, then the candidates the claim met expired or
     * with their attempts spent and moved to dead — exactly as the unlimited
     * claim answers (for the metrics: they are no claims).
     */
    readonly rows: ReadonlyArray<JobRow>
    /** How many jobs the walk took (or, read-only, could take). */
    readonly taken: number
    /** How many of those were pending (not a lapsed lease). */
    readonly takenPending: number
    /** The soonest instant a rate window admits a job it held back, if one did. */
    readonly reopenAt: number | null
  }

/**
 * `claim` claims up to `n`; `probe` and `count` only read: whether one job
 * could be claimed now, and how many pending ones could (for `stats`).
 */
export type FlowMode = "claim" | "probe" | "count"

/** `FlowOps` as effects (an application's client, PostgreSQL); an operation may fail with `E` to abandon the walk. */
export type FlowEffectOps<E = SqlError> = {
  readonly [K in keyof FlowOps]: (...args: Parameters<FlowOps[K]>) => Effect.Effect<ReturnType<FlowOps[K]>, E>
}

/** Runs a walk on effectful operations. */
export const runEffect = <A, E = SqlError>(makeWalk: () => Walk<A>, ops: FlowEffectOps<E>): Effect.Effect<A, E> =>
  Effect.suspend(() => {
    const walk = makeWalk()
    const loop = (input: unknown): Effect.Effect<A, E> => {
      const step = walk.next(input)
      if (step.done) return Effect.succeed(step.value)
      const { args, op } = step.value
      return Effect.flatMap((ops[op] as (...a: ReadonlyArray<unknown>) => Effect.Effect<unknown, E>)(...args), loop)
    }
    return loop(undefined)
  })
