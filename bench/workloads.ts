/**
 * Shared workload definitions and types for the alkstore benchmark harness.
 *
 * Every contender (bench/contenders/*.ts) implements the workloads below, or
 * says why it cannot (`supports[id] = "reason"`). The orchestrator
 * (bench/run.ts) spawns one fresh child process (bench/child.ts) per
 * (repetition, workload, contender) on a fresh WAL database file.
 */

/** The workloads a contender implements (`run` is called with one of these). */
export type BaseWorkloadId =
  | "enqueue-1tx"
  | "enqueue-100tx"
  | "enqueue-batch100"
  | "drain-1"
  | "drain-1-process"
  | "drain-batch100"
  | "drain-batch100-read"
  | "drain-stream100"
  | "claim-1k"
  | "claim-1m"
  | "claim-dead100k"
  | "memory-1m"

/**
 * A `-warm` workload is its base workload measured in a warm process: the
 * child first runs the base workload `WARM_RUNS` times, untimed, each on a
 * throw-away file (the same code paths, so V8 has compiled them, as in an
 * application after its first few calls), then again on the fresh file,
 * timed. Contenders implement the base only.
 */
export type WarmWorkloadId = "enqueue-100tx-warm" | "enqueue-batch100-warm" | "drain-batch100-warm" | "drain-batch100-read-warm"

export type WorkloadId = BaseWorkloadId | WarmWorkloadId

/**
 * Untimed runs before a `-warm` workload's timed one. One was not enough for
 * a process that loads Effect: its second run still met V8 compiling the path
 * and the process's first full garbage collection (~18 ms of main-thread time
 * in a ~90 ms run), so alkstore's `enqueueBatch` read slower warm than fresh;
 * from the third run on, every run of a process took the same time
 * (docs/performance.md, "What a warm process is").
 */
export const WARM_RUNS = 3

export const isWarm = (id: WorkloadId): id is WarmWorkloadId => id.endsWith("-warm")
export const baseOf = (id: WorkloadId): BaseWorkloadId => (isWarm(id) ? id.slice(0, -"-warm".length) : id) as BaseWorkloadId

export interface Sizes {
  /** jobs enqueued by the enqueue-* workloads */
  readonly enqueueJobs: number
  /** jobs preloaded (untimed) and drained by the drain-* workloads */
  readonly drainJobs: number
  /** jobs per transaction / per batch */
  readonly batch: number
  /** timed claim+ack operations in the claim-* workloads */
  readonly claimOps: number
  /** untimed claim+ack operations before the timed ones (JIT warm-up) in the claim-* workloads */
  readonly warmupOps: number
  /** pending jobs behind the timed claims in claim-1k and claim-dead100k */
  readonly claimSmall: number
  /** pending jobs behind the timed claims in claim-1m */
  readonly claimLarge: number
  /** dead rows in front of the pending ones in claim-dead100k */
  readonly deadRows: number
  /** rows per transaction when preloading through a library API */
  readonly preloadChunk: number
  /** jobs enqueued and drained by memory-1m */
  readonly memoryJobs: number
}

export const FULL_SIZES: Sizes = {
  enqueueJobs: 20_000,
  drainJobs: 20_000,
  batch: 100,
  claimOps: 2_000,
  warmupOps: 500,
  claimSmall: 1_000,
  claimLarge: 1_000_000,
  deadRows: 100_000,
  preloadChunk: 10_000,
  memoryJobs: 1_000_000
}

export const QUICK_SIZES: Sizes = {
  enqueueJobs: 2_000,
  drainJobs: 2_000,
  batch: 100,
  claimOps: 200,
  warmupOps: 100,
  claimSmall: 1_000,
  claimLarge: 50_000,
  deadRows: 10_000,
  preloadChunk: 10_000,
  memoryJobs: 50_000
}

export type Unit = "ops/s"

export interface WorkloadDef {
  readonly id: WorkloadId
  readonly title: string
  readonly description: (s: Sizes) => string
  /**
   * Which raw-baseline workload the paired ratio divides by (per round). Extra
   * alkstore/peer variants (e.g. `process` instead of a claim loop) are
   * compared with the raw workload doing the same job.
   */
  readonly rawRef: WorkloadId
  /** only these contenders run it (undefined = all) */
  readonly only?: ReadonlyArray<string> | undefined
}

export const WORKLOADS: ReadonlyArray<WorkloadDef> = [
  {
    id: "enqueue-1tx",
    title: "enqueue, 1 job / tx",
    description: (s) => `${s.enqueueJobs} jobs, each its own (autocommit) write transaction`,
    rawRef: "enqueue-1tx"
  },
  {
    id: "enqueue-100tx",
    title: "enqueue, 100 jobs / tx",
    description: (s) =>
      `${s.enqueueJobs} jobs, ${s.batch} single enqueue calls per explicit transaction (alkstore: sql.withTransaction)`,
    rawRef: "enqueue-100tx"
  },
  {
    id: "enqueue-batch100",
    title: "enqueue, batch API × 100",
    description: (s) => `${s.enqueueJobs} jobs through the library's batch call, ${s.batch} per call (alkstore: enqueueBatch)`,
    rawRef: "enqueue-100tx"
  },
  {
    id: "drain-1",
    title: "drain 1-by-1 (claim→ack loop)",
    description: (s) => `${s.drainJobs} preloaded jobs (untimed), one worker: claim → no-op → ack, one job at a time`,
    rawRef: "drain-1"
  },
  {
    id: "drain-1-process",
    title: "drain 1-by-1 (library worker)",
    description: (s) =>
      `${s.drainJobs} preloaded jobs drained by the library's own worker loop with concurrency 1 (alkstore: process)`,
    rawRef: "drain-1"
  },
  {
    id: "drain-batch100",
    title: "drain batched (100)",
    description: (s) =>
      `${s.drainJobs} preloaded jobs, claim ${s.batch} at a time, ack the ${s.batch} in one transaction (alkstore: claimBatch + ackAll)`,
    rawRef: "drain-batch100"
  },
  {
    id: "drain-batch100-read",
    title: "drain batched (100), handler reads each payload",
    description: (s) =>
      `${s.drainJobs} preloaded jobs, claim ${s.batch} at a time, a handler reads each job's payload (alkstore: \`handle.job.payload\`), ack the ${s.batch} in one transaction (alkstore: claimBatch + ackAll; raw's batched drain parses every payload already)`,
    rawRef: "drain-batch100"
  },
  {
    id: "enqueue-100tx-warm",
    title: "enqueue, 100 jobs / tx, warm process",
    description: () => `as enqueue-100tx, after ${WARM_RUNS} untimed runs of it in the same process (each on another file)`,
    rawRef: "enqueue-100tx-warm",
    only: ["raw", "alkstore", "plainjob"]
  },
  {
    id: "enqueue-batch100-warm",
    title: "enqueue, batch API × 100, warm process",
    description: () => `as enqueue-batch100, after ${WARM_RUNS} untimed runs of it in the same process (each on another file)`,
    rawRef: "enqueue-100tx-warm"
  },
  {
    id: "drain-batch100-warm",
    title: "drain batched (100), warm process",
    description: () => `as drain-batch100, after ${WARM_RUNS} untimed runs of it in the same process (each on another file)`,
    rawRef: "drain-batch100-warm",
    only: ["raw", "alkstore"]
  },
  {
    id: "drain-batch100-read-warm",
    title: "drain batched (100), handler reads each payload, warm process",
    description: () => `as drain-batch100-read, after ${WARM_RUNS} untimed runs of it in the same process (each on another file)`,
    rawRef: "drain-batch100-warm"
  },
  {
    id: "drain-stream100",
    title: "drain stream (batch 100)",
    description: (s) => `${s.drainJobs} preloaded jobs through the library's stream with batch ${s.batch}, each handle acked on its own`,
    rawRef: "drain-batch100"
  },
  {
    id: "claim-1k",
    title: "claim+ack @1k pending",
    description: (s) => `${s.warmupOps} untimed then ${s.claimOps} timed claim+ack with ${s.claimSmall} (+${s.claimOps}) pending jobs`,
    rawRef: "claim-1k"
  },
  {
    id: "claim-1m",
    title: "claim+ack @1M pending",
    description: (s) => `${s.warmupOps} untimed then ${s.claimOps} timed claim+ack with ${s.claimLarge} (+${s.claimOps}) pending jobs`,
    rawRef: "claim-1m"
  },
  {
    id: "claim-dead100k",
    title: "claim+ack @1k + 100k dead",
    description: (s) =>
      `${s.warmupOps} untimed then ${s.claimOps} timed claim+ack with ${s.claimSmall} (+${s.claimOps}) pending jobs behind ${s.deadRows} dead rows`,
    rawRef: "claim-dead100k"
  },
  {
    id: "memory-1m",
    title: "enqueue+drain 1M (memory)",
    description: (s) =>
      `enqueue ${s.memoryJobs} jobs (${s.preloadChunk} per transaction) then drain them in claimed batches of ${s.batch}; peak RSS of the process`,
    rawRef: "memory-1m",
    only: ["raw", "alkstore"]
  }
]

export const workloadById = (id: WorkloadId): WorkloadDef => {
  const w = WORKLOADS.find((w) => w.id === id)
  if (!w) throw new Error(`unknown workload ${id}`)
  return w
}

/** The payload every contender enqueues: a small JSON object. */
export const payload = (n: number) => ({ n, to: "user@example.com" })

export interface RunContext {
  /** a fresh database file in os.tmpdir() (does not exist yet) */
  readonly file: string
  readonly sizes: Sizes
}

export interface RunResult {
  /** operations (jobs) done in the timed region */
  readonly ops: number
  /** duration of the timed region in milliseconds */
  readonly ms: number
  /** pragmas as read back from the connection the contender used */
  readonly pragmas?: Record<string, string | number> | undefined
  readonly sqliteVersion?: string | undefined
  readonly notes?: ReadonlyArray<string> | undefined
}

/** What a child prints (as one JSON line prefixed with RESULT) */
export interface ChildResult extends RunResult {
  readonly maxRssMB: number
}

export interface Contender {
  readonly name: string
  readonly label: string
  /** true = implemented; a string = n/a with that reason */
  readonly supports: Readonly<Record<BaseWorkloadId, true | string>>
  /** per-workload size overrides for slow peers (reported in the output) */
  readonly scale?: Partial<Record<BaseWorkloadId, Partial<Sizes>>> | undefined
  /** where its package.json lives (for the versions table) */
  readonly packages: ReadonlyArray<string>
  readonly run: (workload: BaseWorkloadId, ctx: RunContext) => Promise<RunResult>
}

/** A small timing helper used by the contenders. */
export const timed = async (f: () => unknown): Promise<number> => {
  const t0 = performance.now()
  await f()
  return performance.now() - t0
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))

export const range = (n: number, from = 0): Array<number> => Array.from({ length: n }, (_, i) => from + i)
