/**
 * The PostgreSQL benchmark's workloads, sizes and the contender interface
 * (issue 10, item 6). The orchestrator is bench/pg/run.ts; every sample runs
 * in fresh processes (bench/pg/child.ts) on a fresh database.
 */

export type PgWorkloadId =
  | "enqueue-1tx"
  | "enqueue-1tx-warm"
  | "enqueue-100tx"
  | "enqueue-batch100"
  | "drain-1"
  | "drain-4"
  | "wake-inprocess"
  | "wake-crossprocess"
  | "claim-1k"
  | "claim-1m"

export interface PgSizes {
  /** jobs enqueued by the enqueue-* workloads */
  readonly enqueueJobs: number
  /** jobs per explicit transaction in enqueue-100tx */
  readonly batch: number
  /** jobs preloaded (untimed) and drained by drain-1 and drain-4 */
  readonly drainJobs: number
  /** worker processes in drain-4 */
  readonly processes: number
  /** timed samples per latency workload (after `wakeWarmup` untimed ones) */
  readonly wakeSamples: number
  readonly wakeWarmup: number
  /** wall-time budget of one latency child's sampling loop */
  readonly wakeBudgetMs: number
  /** timed claim+ack operations in claim-*, after `warmupOps` untimed ones */
  readonly claimOps: number
  readonly warmupOps: number
  /** pending jobs behind the timed claims */
  readonly claimSmall: number
  readonly claimLarge: number
  /** rows per call when preloading through a library's batch API */
  readonly preloadChunk: number
}

export const FULL_SIZES: PgSizes = {
  enqueueJobs: 2_000,
  batch: 100,
  drainJobs: 3_000,
  processes: 4,
  wakeSamples: 200,
  wakeWarmup: 20,
  wakeBudgetMs: 15_000,
  claimOps: 500,
  warmupOps: 100,
  claimSmall: 1_000,
  claimLarge: 1_000_000,
  preloadChunk: 5_000
}

export const QUICK_SIZES: PgSizes = {
  enqueueJobs: 500,
  batch: 100,
  drainJobs: 1_000,
  processes: 4,
  wakeSamples: 60,
  wakeWarmup: 10,
  wakeBudgetMs: 8_000,
  claimOps: 200,
  warmupOps: 50,
  claimSmall: 1_000,
  claimLarge: 50_000,
  preloadChunk: 5_000
}

export type Kind = "throughput" | "latency" | "claim"

export interface PgWorkloadDef {
  readonly id: PgWorkloadId
  readonly title: string
  readonly kind: Kind
  readonly description: (s: PgSizes) => string
}

export const PG_WORKLOADS: ReadonlyArray<PgWorkloadDef> = [
  {
    id: "enqueue-1tx",
    title: "enqueue, 1 job / tx",
    kind: "throughput",
    description: (s) => `${s.enqueueJobs} jobs, one enqueue call each, each its own transaction`
  },
  {
    id: "enqueue-1tx-warm",
    title: "enqueue, 1 job / tx, warm process",
    kind: "throughput",
    description: (s) =>
      `as enqueue-1tx, timed after ${s.enqueueJobs} untimed enqueue calls in the same process and session (V8 has compiled the path, as in an application that has been up for a while)`
  },
  {
    id: "enqueue-100tx",
    title: "enqueue, 100 jobs / tx",
    kind: "throughput",
    description: (s) => `${s.enqueueJobs} jobs, ${s.batch} single enqueue calls inside one explicit transaction`
  },
  {
    id: "enqueue-batch100",
    title: "enqueue, batch call × 100",
    kind: "throughput",
    description: (s) => `${s.enqueueJobs} jobs through the library's batch enqueue call, ${s.batch} jobs per call`
  },
  {
    id: "drain-1",
    title: "drain, 1 worker process",
    kind: "throughput",
    description: (s) =>
      `${s.drainJobs} preloaded jobs (untimed), one worker process running the library's worker (one job at a time), no-op handler; until every handler ran and no job is left`
  },
  {
    id: "drain-4",
    title: "drain, 4 worker processes",
    kind: "throughput",
    description: (s) => `the same ${s.drainJobs} jobs, ${s.processes} worker processes (one job at a time each)`
  },
  {
    id: "wake-inprocess",
    title: "enqueue→handler, in-process",
    kind: "latency",
    description: (s) =>
      `an idle worker in the same process; from just before the enqueue call to the handler's first line; ${s.wakeSamples} samples after ${s.wakeWarmup} untimed, 2–5 ms apart`
  },
  {
    id: "wake-crossprocess",
    title: "enqueue→handler, cross-process",
    kind: "latency",
    description: (s) =>
      `an idle worker in process A, the enqueue in process B; from B's enqueue having returned (committed) to A's handler, on one clock; ${s.wakeSamples} samples`
  },
  {
    id: "claim-1k",
    title: "claim+ack @1k pending",
    kind: "claim",
    description: (s) => `${s.warmupOps} untimed then ${s.claimOps} timed claim+ack with ${s.claimSmall} (+${s.claimOps}) pending`
  },
  {
    id: "claim-1m",
    title: "claim+ack @1M pending",
    kind: "claim",
    description: (s) => `${s.warmupOps} untimed then ${s.claimOps} timed claim+ack with ${s.claimLarge} (+${s.claimOps}) pending`
  }
]

/** The payload every contender enqueues. */
export const payload = (n: number) => ({ n, to: "user@example.com" })

export const QUEUE = "bench"

/** the diagnostic series of the latency workloads */
export const ENQUEUE_CALL = "enqueue call (committed when it returns)"
export const AFTER_RETURN = "enqueue returned → handler (the wake)"

/** A job handler: `n` is the payload's `n`. Called on the handler's first line. */
export type OnJob = (n: number) => void

/**
 * One connection set to the database, through one library. Every call is
 * the library's public API unless its notes say otherwise.
 */
export interface Session {
  /** one job, its own transaction */
  readonly enqueue: (n: number) => Promise<void>
  /** these jobs, one enqueue call each, inside one explicit transaction */
  readonly enqueueInTx: (ns: ReadonlyArray<number>) => Promise<void>
  /** these jobs in one call of the library's batch enqueue API */
  readonly enqueueBatch: (ns: ReadonlyArray<number>) => Promise<void>
  /** untimed bulk load of `count` jobs numbered from `from` */
  readonly preload: (count: number, from: number) => Promise<void>
  /**
   * The library's worker, one job at a time; resolves once it runs; the
   * returned function stops it. `purpose` is "drain" (a preloaded backlog)
   * or "wake" (an idle worker waiting for new jobs): only a library whose
   * one worker cannot do both says in its notes what it runs for each.
   */
  readonly startWorker: (onJob: OnJob, purpose: "drain" | "wake") => Promise<() => Promise<void>>
  /** one claim + ack through the library's pull API (claim-* workloads); false when nothing was claimed */
  readonly claimAck?: (() => Promise<boolean>) | undefined
  /** jobs not finished yet (pending, claimed/active, retrying) */
  readonly live: () => Promise<number>
  readonly close: () => Promise<void>
}

export interface PgContender {
  readonly name: string
  readonly label: string
  /** package.json paths (relative to the repository root) for the versions table */
  readonly packages: ReadonlyArray<string>
  /** true = runs it; a string = not measured, with the reason */
  readonly supports: Readonly<Record<PgWorkloadId, true | string>>
  /** one-time schema/migration/queue set-up on a fresh database (untimed) */
  readonly setup: (url: string) => Promise<void>
  readonly open: (url: string) => Promise<Session>
  /** what "enqueue in a transaction", "worker" etc. mean for this library */
  readonly notes: ReadonlyArray<string>
  /** a reference measurement (a floor), not a peer: left out of "ahead of every peer" */
  readonly reference?: true
}

/** Every workload supported, except those given a reason. */
export const supportsAll = (
  except: Partial<Record<PgWorkloadId, string>> = {}
): Readonly<Record<PgWorkloadId, true | string>> =>
  Object.fromEntries(PG_WORKLOADS.map((w) => [w.id, except[w.id] ?? true])) as Record<PgWorkloadId, true | string>

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))
export const range = (n: number, from = 0): Array<number> => Array.from({ length: n }, (_, i) => from + i)
