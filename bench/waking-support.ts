/**
 * What the waking scenarios (bench/waking.ts, bench/waking-outside.ts) share:
 * settings and result types, clocks, and each side's store — raw
 * better-sqlite3, alkstore through its public API, plainjob — opened lazily so
 * a child only loads the side it measures.
 */
import { rawSchema } from "./contenders/raw.js"

export type WakeSide = "alkstore" | "raw" | "plainjob"

export interface WakeSettings {
  /** timed samples per latency scenario */
  readonly samples: number
  /** untimed samples before them (JIT warm-up) */
  readonly warmup: number
  /** real sleep between samples: uniform in [gapMinMs, gapMaxMs] */
  readonly gapMinMs: number
  readonly gapMaxMs: number
  /** idle-cpu: untimed settling time, then the measured wall time */
  readonly settleMs: number
  readonly idleMs: number
  /** a sample not delivered within this is counted as missed */
  readonly sampleTimeoutMs: number
  /** sampling stops after this much wall time (the result says how many it got) */
  readonly budgetMs: number
}

/** What a waking child prints (one `RESULT {json}` line). */
export interface WakeResult {
  /** latency scenarios: one latency per timed sample, in milliseconds, in sample order */
  readonly latenciesMs?: ReadonlyArray<number>
  /** idle-cpu: percent of one core */
  readonly cpuPercent?: number
  /** diagnostic series in milliseconds (e.g. the enqueue call alone), reported as p50/p99 */
  readonly series?: Readonly<Record<string, ReadonlyArray<number>>>
  /** diagnostic single values */
  readonly values?: Readonly<Record<string, number>>
  readonly notes?: ReadonlyArray<string>
}

export const QUEUE = "wake"
export const WORKER = "w1"
/** plainjob's worker polls; 10 ms is the interval the issue-14 comparison used (its default is 1 s). */
export const PLAINJOB_POLL_MS = 10

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))
export const gapOf = (s: WakeSettings) => () => s.gapMinMs + Math.random() * (s.gapMaxMs - s.gapMinMs)
/** The clock both processes of the cross-process scenario share (wall-clock based). */
export const clock = () => performance.timeOrigin + performance.now()
/**
 * This process's `clock()` minus CLOCK_MONOTONIC (`process.hrtime`, one clock
 * for every process on Linux): two processes whose values differ by d read
 * `clock()` d ms apart at the same instant.
 */
export const clockSkew = (): number => {
  const xs: Array<number> = []
  for (let i = 0; i < 21; i++) xs.push(clock() - Number(process.hrtime.bigint()) / 1e6)
  xs.sort((a, b) => a - b)
  return xs[10]!
}

/**
 * The raw baseline's table: the same shape and claim statement as
 * bench/contenders/raw.ts (one pending-partial index, claim = one
 * `UPDATE … WHERE id = (SELECT … LIMIT 1) RETURNING *`).
 */
export const openRaw = async (file: string, create: boolean) => {
  const { default: Database } = await import("better-sqlite3")
  const db = new Database(file)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = NORMAL")
  if (create) db.exec(rawSchema)
  const insert = db.prepare(
    "INSERT INTO jobs (queue, payload, priority, run_at, state, attempts) VALUES (?, ?, 0, ?, 'pending', 0)"
  )
  const claimOne = db.prepare(
    `UPDATE jobs SET state = 'claimed', attempts = attempts + 1, claimed_until = ?, worker_id = ?
     WHERE id = (SELECT id FROM jobs WHERE queue = ? AND state = 'pending' AND run_at <= ?
                 ORDER BY priority DESC, run_at, id LIMIT 1) RETURNING *`
  )
  const ack = db.prepare("DELETE FROM jobs WHERE id = ?")
  const dataVersion = db.prepare("PRAGMA data_version").pluck()
  return {
    db,
    enqueue: (n: number) => insert.run(QUEUE, JSON.stringify({ n }), Date.now()),
    /** claims one job (JSON.parse of its payload included) */
    claim: (): { readonly id: number; readonly n: number } | undefined => {
      const now = Date.now()
      const row = claimOne.get(now + 300_000, WORKER, QUEUE, now) as { id: number; payload: string } | undefined
      return row === undefined ? undefined : { id: row.id, n: (JSON.parse(row.payload) as { n: number }).n }
    },
    ack: (id: number) => ack.run(id),
    /** moves when another connection committed */
    dataVersion: () => dataVersion.get() as number
  }
}
export type RawStore = Awaited<ReturnType<typeof openRaw>>

/** Claims and handles every pending job (the raw worker's body); `onJob` is the handler. */
export const rawDrain = (raw: RawStore, onJob: (n: number, at: number) => void) => {
  for (let job = raw.claim(); job !== undefined; job = raw.claim()) {
    onJob(job.n, clock()) // the handler's first line
    raw.ack(job.id)
  }
}

/**
 * A raw worker polling every 1 ms (`setTimeout` loop). `"claim"` runs the
 * claim statement on every tick (a worker on the enqueuer's own connection:
 * its own commits do not move `data_version`); `"dataVersion"` reads
 * `PRAGMA data_version` on every tick and claims when it moved (a worker in
 * another process).
 */
export const rawPoller = (raw: RawStore, onJob: (n: number, at: number) => void, poll: "claim" | "dataVersion") => {
  let timer: NodeJS.Timeout | undefined
  let last = raw.dataVersion()
  const tick = () => {
    if (poll === "claim") rawDrain(raw, onJob)
    else {
      const v = raw.dataVersion()
      if (v !== last) {
        last = v
        rawDrain(raw, onJob)
      }
    }
    timer = setTimeout(tick, 1)
  }
  timer = setTimeout(tick, 1)
  return () => clearTimeout(timer)
}

/** alkstore through its public API, in a ManagedRuntime (as an application holds it). */
export const openAlkstore = async (file: string) => {
  const effect = await import("effect")
  const { Queues, SqliteStore } = await import("../src/index.js")
  const rt = effect.ManagedRuntime.make(SqliteStore.layer({ filename: file }))
  const q = await rt.runPromise(effect.Effect.flatMap(Queues.Queues, (s) => s.queue(QUEUE)))
  return { ...effect, rt, q }
}

/** A worker waiting in `process` (concurrency 1) whose handler reports each job's `n` on its first line. */
export const alkWorker = (store: Awaited<ReturnType<typeof openAlkstore>>, seen: (n: number, at: number) => void) =>
  store.rt.runFork(store.q.process(WORKER, (job) => {
    const at = clock() // the handler's first line
    seen((job.payload as { n: number }).n, at)
    return store.Effect.void
  }, { concurrency: 1 }))

/** plainjob on its own better-sqlite3 connection (the root build, as in the throughput bench). */
export const openPlainjob = async (file: string) => {
  const { default: Database } = await import("better-sqlite3")
  const { better, defineQueue, defineWorker } = await import("plainjob")
  const silent = { error() {}, warn() {}, info() {}, debug() {} }
  const db = new Database(file)
  const queue = defineQueue({ connection: better(db), logger: silent })
  /** a worker polling every PLAINJOB_POLL_MS; `onJob` is its handler */
  const worker = (onJob: (n: number, at: number) => void) => {
    const w = defineWorker(QUEUE, (job) => {
      const at = clock() // the handler's first line
      onJob((JSON.parse(job.data) as { n: number }).n, at)
    }, { queue, logger: silent, pollIntervall: PLAINJOB_POLL_MS })
    void w.start()
    return () => w.stop()
  }
  return { queue, worker, enqueue: (n: number) => queue.add(QUEUE, { n }), close: () => queue.close() }
}

const withTimeout = (p: Promise<void>, ms: number): Promise<boolean> =>
  new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms)
    void p.then(() => {
      clearTimeout(timer)
      resolve(true)
    })
  })

/** `waitFor(n)` for a worker whose handler calls `seen(n, at)`. */
export const arrivals = (timeoutMs: number) => {
  const handlerAt = new Map<number, number>()
  const waiting = new Map<number, () => void>()
  return {
    handlerAt,
    seen: (n: number, at: number) => {
      handlerAt.set(n, at)
      waiting.get(n)?.()
    },
    waitFor: (n: number) => {
      if (handlerAt.has(n)) return Promise.resolve(true)
      return withTimeout(new Promise<void>((r) => waiting.set(n, r)), timeoutMs)
    }
  }
}
