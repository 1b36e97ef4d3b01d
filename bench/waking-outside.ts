/**
 * `wake-outside` (issue 14): enqueue → handler start with an idle worker in
 * the same process, the enqueue made from code outside the worker's fiber —
 * as an HTTP handler does: `runtime.runSync(q.enqueue(p))` or
 * `runtime.runPromise(q.enqueue(p))` from a callback of the event loop.
 *
 * A pacer thread posts "go" a random 2–5 ms after each sample (slept with
 * `Atomics.wait`, to the microsecond), so every enqueue runs in an I/O
 * callback (like a request handler) at a random phase of the main thread's
 * timers — a raw 1 ms poller is not always just about to
 * tick. Latency = the handler's first line − just before the enqueue call,
 * both on `clock()`. One job at a time: the next "go" is asked for once the
 * handler saw the job.
 *
 * Sides: alkstore (worker in `process`, concurrency 1, samples alternate
 * runSync and runPromise); raw (a worker on the same connection polling the
 * claim statement every 1 ms, the raw baseline; and, as a diagnostic,
 * the floor: INSERT then an in-process callback that claims); plainjob (its
 * worker, polling every 10 ms).
 */
import { rmSync } from "node:fs"
import { Worker } from "node:worker_threads"
import {
  alkWorker,
  arrivals,
  clock,
  openAlkstore,
  openPlainjob,
  openRaw,
  QUEUE,
  rawDrain,
  rawPoller,
  sleep,
  type WakeResult,
  type WakeSettings,
  type WakeSide,
  WORKER
} from "./waking-support.js"

const SETTLE_MS = 200

// The gap is slept with Atomics.wait, whose timeout is not rounded to the millisecond: a timer would
// fire on the same millisecond boundaries as the main thread's own timers (libuv's clock is one clock),
// so every "go" would land just before a 1 ms poller's tick.
const pacerSource = `
const { parentPort, workerData } = require("node:worker_threads")
const cell = new Int32Array(new SharedArrayBuffer(4))
parentPort.on("message", (m) => {
  if (m === "stop") return parentPort.close()
  Atomics.wait(cell, 0, 0, workerData.min + Math.random() * (workerData.max - workerData.min))
  parentPort.postMessage("go")
})
`

interface Sample {
  readonly n: number
  /** just before the enqueue call, and when it returned (its promise resolved, for runPromise) */
  readonly t0: number
  readonly t1: number
}

/**
 * Runs `total` samples: on each "go" of the pacer, `enqueue(n)`; then waits
 * for the handler (`waitFor`) before asking for the next.
 */
const paced = (
  s: WakeSettings,
  total: number,
  enqueue: (n: number) => void | Promise<unknown>,
  waitFor: (n: number) => Promise<boolean>
): Promise<{ readonly samples: ReadonlyArray<Sample>; readonly missed: number }> =>
  new Promise((resolve, reject) => {
    const pacer = new Worker(pacerSource, { eval: true, workerData: { min: s.gapMinMs, max: s.gapMaxMs } })
    const samples: Array<Sample> = []
    const deadline = performance.now() + s.budgetMs
    let n = 0
    let missed = 0
    const finish = () => {
      pacer.postMessage("stop")
      void pacer.terminate()
      resolve({ samples, missed })
    }
    pacer.on("error", reject)
    pacer.on("message", () => {
      const i = n++
      const t0 = clock()
      const pending = enqueue(i)
      const done = (t1: number) =>
        waitFor(i).then((ok) => {
          if (ok) samples.push({ n: i, t0, t1 })
          else missed++
          if (n < total && performance.now() < deadline) pacer.postMessage("next")
          else finish()
        })
      if (pending === undefined) void done(clock())
      else pending.then(() => done(clock()), reject)
    })
    pacer.postMessage("next")
  })

const latencies = (samples: ReadonlyArray<Sample>, handlerAt: Map<number, number>, warmup: number) =>
  samples.filter((x) => x.n >= warmup && handlerAt.has(x.n)).map((x) => handlerAt.get(x.n)! - x.t0)

const missedNote = (missed: number, s: WakeSettings) =>
  missed > 0 ? [`${missed} samples not delivered within ${s.sampleTimeoutMs} ms`] : []

const alkOutside = async (file: string, s: WakeSettings): Promise<WakeResult> => {
  const store = await openAlkstore(file)
  const { Fiber, rt, q } = store
  const a = arrivals(s.sampleTimeoutMs)
  const worker = alkWorker(store, a.seen)
  await sleep(SETTLE_MS)
  try {
    const total = s.warmup + s.samples
    const { missed, samples } = await paced(s, total, (n) => {
      // even samples: runSync; odd: runPromise — the two ways code outside a fiber calls in
      if (n % 2 === 0) {
        rt.runSync(q.enqueue({ n }))
        return undefined
      }
      return rt.runPromise(q.enqueue({ n }))
    }, a.waitFor)
    const timed = samples.filter((x) => x.n >= s.warmup && a.handlerAt.has(x.n))
    const of = (form: number) => timed.filter((x) => x.n % 2 === form)
    const lat = (xs: ReadonlyArray<Sample>) => xs.map((x) => a.handlerAt.get(x.n)! - x.t0)
    const floor = await effectFloor(file, s)
    const contract = await contractFloor(file, s)
    const claimOnly = await contractFloor(file, s, false)
    return {
      latenciesMs: latencies(samples, a.handlerAt, s.warmup),
      series: {
        [EFFECT_FLOOR]: floor,
        [CONTRACT_FLOOR]: contract,
        [CONTRACT_FLOOR_CLAIM_ONLY]: claimOnly,
        "runSync(enqueue) → handler": lat(of(0)),
        "runPromise(enqueue) → handler": lat(of(1)),
        "runSync(enqueue) call alone": of(0).map((x) => x.t1 - x.t0),
        "runSync(enqueue) returned → handler": of(0).map((x) => a.handlerAt.get(x.n)! - x.t1)
      },
      notes: missedNote(missed, s)
    }
  } finally {
    await rt.runPromise(Fiber.interrupt(worker))
    await rt.dispose()
  }
}

/**
 * The cheapest Effect-shaped version of this path, in the same process
 * after alkstore's samples: the raw statements on their own file, the enqueue
 * one `runSync` of an `Effect.sync` that inserts and completes a `Deferred`,
 * the worker a fiber of the same runtime awaiting it, which claims with the
 * raw statement. What any library with an Effect worker pays at least.
 */
const effectFloor = async (file: string, s: WakeSettings): Promise<ReadonlyArray<number>> => {
  const floorFile = `${file}-effect-floor.db`
  const raw = await openRaw(floorFile, true)
  try {
    return await effectShaped(s, (n) => void raw.enqueue(n), (seen) => rawDrain(raw, seen))
  } finally {
    raw.db.close()
    for (const x of ["", "-wal", "-shm"]) rmSync(`${floorFile}${x}`, { force: true })
  }
}

/**
 * The Effect shape both floors share: one `runSync` of an `Effect.sync` that
 * runs `insert(n)` and completes a `Deferred`, and a fiber of the same
 * runtime awaiting it that runs `drain(seen)`. The latencies of
 * `min(200, samples)` paced samples.
 */
const effectShaped = async (
  s: WakeSettings,
  insert: (n: number) => void,
  drain: (seen: (n: number, at: number) => void) => void
): Promise<ReadonlyArray<number>> => {
  const { Deferred, Effect, Exit, Fiber, FiberId, Layer, ManagedRuntime } = await import("effect")
  const rt = ManagedRuntime.make(Layer.empty)
  const f = arrivals(s.sampleTimeoutMs)
  let signal = Deferred.unsafeMake<void>(FiberId.none)
  const worker = rt.runFork(Effect.forever(Effect.zipRight(
    Effect.suspend(() => Deferred.await(signal)),
    Effect.sync(() => {
      signal = Deferred.unsafeMake<void>(FiberId.none)
      drain(f.seen)
    })
  )))
  try {
    const { samples } = await paced(s, s.warmup + Math.min(200, s.samples), (n) => {
      rt.runSync(Effect.sync(() => {
        insert(n)
        Deferred.unsafeDone(signal, Exit.void)
      }))
    }, f.waitFor)
    return latencies(samples, f.handlerAt, s.warmup)
  } finally {
    await rt.runPromise(Fiber.interrupt(worker))
    await rt.dispose()
  }
}

/** The name of the Effect floor's series (the issue-14 report reads it). */
export const EFFECT_FLOOR = "Effect floor: runSync(Effect.sync(raw INSERT + complete a Deferred)) → a fiber awaiting it claims with raw SQL"

/** The name of the contract floor's series (the issue-14 report reads it). */
export const CONTRACT_FLOOR =
  "contract floor: the Effect floor running the store's own statements (its INSERT; its readiness read and claim) on its own schema"

/** The same without the readiness read before the claim (its claim statement alone). */
export const CONTRACT_FLOOR_CLAIM_ONLY =
  "contract floor without the readiness read: the store's INSERT, then its claim statement alone"

/**
 * The Effect floor with the contract's SQL: the same shape as `effectFloor`
 * (one `runSync` of an `Effect.sync` that inserts and completes a `Deferred`,
 * a fiber awaiting it that claims), but the statements are the store's own,
 * prepared once on a file the store migrated: its `INSERT` (the row the
 * contract stores: priority, run time, attempts, lease, expiry, key, trace
 * context, group, and flow control's round subquery), and its claim path
 * (the readiness read, then the claim `UPDATE … RETURNING` of a pending job).
 * No validation, no wake hub, no handles: what an Effect worker over this
 * contract's rows pays at least, so alkstore's distance to it is the
 * library's own code. `readFirst: false` leaves the readiness read out (the
 * claim statement alone, as a design folding that read into the claim
 * might), to show the floor does not rest on it.
 */
const contractFloor = async (file: string, s: WakeSettings, readFirst = true): Promise<ReadonlyArray<number>> => {
  const { sql, claimSql, readinessSql } = await import("../src/internal/sqlite/queueStatements.js")
  const { insertValues } = await import("../src/internal/sqlite/jobInsert.js")
  const { jobOf } = await import("../src/internal/options.js")
  const floorFile = `${file}-contract-floor${readFirst ? "" : "-claim-only"}.db`
  const migrated = await openAlkstore(floorFile) // the store's schema, migrations and pragmas
  await migrated.rt.dispose()
  const { default: Database } = await import("better-sqlite3")
  const db = new Database(floorFile)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = NORMAL")
  db.pragma("temp_store = MEMORY")
  const insert = db.prepare(sql.insert)
  const readiness = db.prepare(readinessSql.text)
  const claim = db.prepare(claimSql.pending.text)
  const ack = db.prepare("DELETE FROM __alkstore_jobs WHERE id = ?")
  const options = {
    priority: 0,
    runAt: 0,
    maxAttempts: 3,
    visibilityTimeoutMillis: 30_000,
    backoffBaseMillis: 1_000,
    expiresAt: undefined,
    key: undefined,
    group: ""
  }
  const drain = (seen: (n: number, at: number) => void) => {
    for (;;) {
      const now = Date.now()
      if (readFirst) readiness.get(readinessSql.bind([QUEUE, now]))
      const row = claim.get(claimSql.pending.bind([now, WORKER, QUEUE, 1])) as { id: number; payload: string } | undefined
      if (row === undefined) return
      seen((JSON.parse(row.payload) as { n: number }).n, clock()) // the handler's first line
      ack.run(row.id)
    }
  }
  const insertOne = (n: number) => {
    const now = Date.now()
    insert.run(insertValues(jobOf(QUEUE, { ...options, runAt: now }, JSON.stringify({ n }), now, undefined)))
  }
  try {
    return await effectShaped(s, insertOne, drain)
  } finally {
    db.close()
    for (const x of ["", "-wal", "-shm"]) rmSync(`${floorFile}${x}`, { force: true })
  }
}

const rawOutside = async (file: string, s: WakeSettings): Promise<WakeResult> => {
  const raw = await openRaw(file, true)
  const a = arrivals(s.sampleTimeoutMs)
  const stop = rawPoller(raw, a.seen, "claim")
  const total = s.warmup + s.samples
  let polled: Awaited<ReturnType<typeof paced>>
  try {
    polled = await paced(s, total, (n) => void raw.enqueue(n), a.waitFor)
  } finally {
    stop()
  }
  // The floor: no poll at all — the enqueuing code calls the worker back (a microtask) and it claims.
  const f = arrivals(s.sampleTimeoutMs)
  const floorTotal = s.warmup + Math.min(200, s.samples)
  const floor = await paced(s, floorTotal, (n) => {
    raw.enqueue(n)
    queueMicrotask(() => rawDrain(raw, f.seen))
  }, f.waitFor)
  raw.db.close()
  return {
    latenciesMs: latencies(polled.samples, a.handlerAt, s.warmup),
    series: {
      "floor: INSERT, then an in-process callback claims (no poll)": latencies(floor.samples, f.handlerAt, s.warmup)
    },
    notes: [...missedNote(polled.missed, s), "raw worker polling the claim statement every 1 ms (setTimeout(1) loop)"]
  }
}

const plainjobOutside = async (file: string, s: WakeSettings): Promise<WakeResult> => {
  const pj = await openPlainjob(file)
  const a = arrivals(s.sampleTimeoutMs)
  const stop = pj.worker(a.seen)
  await sleep(SETTLE_MS)
  try {
    const { missed, samples } = await paced(s, s.warmup + s.samples, (n) => void pj.enqueue(n), a.waitFor)
    return { latenciesMs: latencies(samples, a.handlerAt, s.warmup), notes: missedNote(missed, s) }
  } finally {
    await stop()
    pj.close()
  }
}

export const runOutside = (side: WakeSide, file: string, s: WakeSettings): Promise<WakeResult> =>
  side === "raw" ? rawOutside(file, s) : side === "plainjob" ? plainjobOutside(file, s) : alkOutside(file, s)
