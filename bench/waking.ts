/**
 * The waking benchmark (issue 4, item 5; CONTRACT §7): how fast an idle
 * worker sees a new job, and what an idle worker costs.
 *
 * Scenarios (ids usable in BENCH_WORKLOADS), each measured for alkstore and
 * for a raw better-sqlite3 baseline (and plainjob where issue 14 compares
 * it), every measurement in its own fresh child process
 * (bench/waking-child.ts) on a fresh WAL file:
 *
 * - `wake-inprocess`: a worker waits in `queue.process` (concurrency 1); the
 *   same process enqueues one job; latency = `performance.now()` on the
 *   handler's first line − `performance.now()` just before `enqueue`. A random
 *   2–5 ms real sleep between samples lets the worker go idle each time.
 *   Raw floor: a raw INSERT then a raw claim `UPDATE … RETURNING`, back to
 *   back in one process (what a library could reach at best; no waking at all).
 * - `wake-outside` (bench/waking-outside.ts, issue 14): the same, but the
 *   enqueue is made from code outside any fiber (`runSync` / `runPromise`
 *   from an I/O callback, as an HTTP handler would), against a raw worker
 *   polling at 1 ms in the same process and plainjob's worker.
 * - `wake-crossprocess`: the worker process (A) waits in `process`; a second
 *   OS process (B, spawned by A) enqueues into the same file when A tells it
 *   to (IPC, one job per sample, A paces). Latency = A's handler time − B's
 *   time right after its enqueue committed, on the clock
 *   `performance.timeOrigin + performance.now()` in both processes.
 *   Raw baseline: A reads `PRAGMA data_version` on a 1 ms `setTimeout` loop
 *   and claims when it moved, B does a raw INSERT ("raw polling at 1 ms");
 *   plainjob: its worker in A, `queue.add` in B.
 * - `wake-crossprocess-warm`: the same after `WARM_WAKES` untimed samples in
 *   the same two processes (alkstore and raw only).
 * - `idle-cpu`: a process with a store and a worker waiting in `process`,
 *   nothing enqueued: `process.cpuUsage()` over 10 s of wall time, as percent
 *   of one core. Baseline: the raw 1 ms poller, idle.
 *
 * Everything alkstore goes through the public API (`src/index.ts`), loaded
 * lazily so raw children never evaluate Effect.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { runOutside } from "./waking-outside.js"
import {
  alkWorker,
  arrivals,
  clock,
  clockSkew,
  gapOf,
  openAlkstore,
  openPlainjob,
  openRaw,
  PLAINJOB_POLL_MS,
  rawPoller,
  sleep,
  WORKER,
  type WakeResult,
  type WakeSettings,
  type WakeSide
} from "./waking-support.js"

export type { WakeResult, WakeSettings, WakeSide } from "./waking-support.js"
export type WakeId = "wake-inprocess" | "wake-outside" | "wake-crossprocess" | "wake-crossprocess-warm" | "idle-cpu"

export const wakeSettings = (quick: boolean, env: NodeJS.ProcessEnv): WakeSettings => ({
  samples: Number(env.BENCH_WAKE_SAMPLES ?? (quick ? 200 : 500)),
  warmup: 20,
  // BENCH_WAKE_GAP_MS="min-max": the idle gap between samples (default 2-5 ms)
  gapMinMs: Number(env.BENCH_WAKE_GAP_MS?.split("-")[0] ?? 2),
  gapMaxMs: Number(env.BENCH_WAKE_GAP_MS?.split("-")[1] ?? 5),
  settleMs: 1_000,
  idleMs: Number(env.BENCH_WAKE_IDLE_S ?? (quick ? 3 : 10)) * 1000,
  sampleTimeoutMs: 6_000,
  budgetMs: 20_000
})

export interface WakeTarget {
  readonly p50?: number
  readonly p99?: number
  /** idle-cpu: percent of one core */
  readonly cpu?: number
}

export interface WakeDef {
  readonly id: WakeId
  readonly title: string
  readonly what: string
  readonly baseline: string
  /** absolute targets (issue 4) */
  readonly target: WakeTarget
  /** targets as multiples of the raw side's p50/p99 in the same run (issue 14) */
  readonly vsRaw?: { readonly p50?: number; readonly p99?: number }
  /** who is measured, each in its own child */
  readonly sides: ReadonlyArray<WakeSide>
  /** untimed samples before the timed ones, in place of the settings' (a warm process) */
  readonly warmup?: number
}

/**
 * Untimed wakes before the timed ones of `wake-crossprocess-warm`. A fresh
 * worker process's first ~1,000 wakes run while V8 still compiles the path,
 * and on a two-core machine a compile job can take the core the main thread
 * was woken on for 1–3 ms (docs/performance.md, "The cross-process tail is
 * V8's warm-up"); after 1,500 the rest of a run is the steady state a
 * long-running worker lives in.
 */
export const WARM_WAKES = 1_500

export const WAKE_SCENARIOS: ReadonlyArray<WakeDef> = [
  {
    id: "wake-inprocess",
    title: "enqueue→handler, in-process",
    what:
      "worker waiting in `process` (concurrency 1), the same process enqueues one job; from just before `enqueue` to the handler's first line (`performance.now()`); 2–5 ms real sleep between samples",
    baseline: "raw INSERT + raw claim `UPDATE … RETURNING` back to back in one process (the floor; no waiting involved)",
    target: { p50: 0.5, p99: 2 },
    sides: ["alkstore", "raw"]
  },
  {
    id: "wake-outside",
    title: "enqueue→handler, in-process, enqueue from outside the worker's fiber",
    what:
      "worker waiting in `process` (concurrency 1); code outside any fiber enqueues one job, as an HTTP handler does: `runtime.runSync(q.enqueue(p))` and `runtime.runPromise(q.enqueue(p))` on alternate samples, each from a message callback of a pacer thread 2–5 ms after the last sample (a random phase of the event loop's timers); from just before the call to the handler's first line",
    baseline:
      "a raw worker on the same connection polling the claim statement every 1 ms (`setTimeout(1)` loop), the enqueue a raw INSERT from the same callback; plainjob: its worker polling every 10 ms",
    target: {},
    vsRaw: { p50: 1.5, p99: 2 },
    sides: ["alkstore", "raw", "plainjob"]
  },
  {
    id: "wake-crossprocess",
    title: "enqueue→handler, cross-process",
    what:
      "worker process waiting in `process`; a second OS process enqueues into the same file; handler time − time right after the enqueue committed, both on `performance.timeOrigin + performance.now()`",
    baseline:
      "raw polling at 1 ms: process A reads `PRAGMA data_version` on a 1 ms `setTimeout` loop and runs the raw claim when it moved, process B does a raw INSERT; plainjob: its worker polling every 10 ms in A, `queue.add` in B",
    target: { p50: 2, p99: 10 },
    vsRaw: { p99: 1.5 },
    sides: ["alkstore", "raw", "plainjob"]
  },
  {
    id: "wake-crossprocess-warm",
    title: "enqueue→handler, cross-process, warm process",
    what:
      `as \`wake-crossprocess\`, in processes that have first made ${WARM_WAKES.toLocaleString("en")} untimed wakes the same way (V8 has compiled the path: the steady state of a long-running worker)`,
    baseline: "raw polling at 1 ms, as in `wake-crossprocess`, after the same untimed wakes",
    target: { p50: 2, p99: 10 },
    vsRaw: { p99: 1.5 },
    sides: ["alkstore", "raw"],
    warmup: WARM_WAKES
  },
  {
    id: "idle-cpu",
    title: "idle CPU of a waiting worker",
    what: "one store, one worker waiting in `process`, nothing enqueued; `process.cpuUsage()` over the measured wall time",
    baseline: "raw polling at 1 ms, idle (the same `data_version` loop as the cross-process baseline)",
    target: { cpu: 1 },
    sides: ["alkstore", "raw"]
  }
]

export const isWakeId = (s: string): s is WakeId => WAKE_SCENARIOS.some((w) => w.id === s)

/** Untimed settling: lets the worker reach its wait. */
const SETTLE_MS = 200

// ---------- wake-inprocess ----------

const alkInProcess = async (file: string, s: WakeSettings): Promise<WakeResult> => {
  const { Deferred, Duration, Effect, Fiber, Option, rt, q } = await openAlkstore(file)
  const gap = gapOf(s)
  const program = Effect.gen(function*() {
    const total = s.warmup + s.samples
    const handlerAt = new Float64Array(total)
    let seen = yield* Deferred.make<void>()
    const worker = yield* Effect.fork(
      q.process(WORKER, (job) => {
        const t = performance.now() // the handler's first line
        handlerAt[(job.payload as { n: number }).n] = t
        return Deferred.succeed(seen, undefined)
      }, { concurrency: 1 })
    )
    yield* Effect.sleep(Duration.millis(SETTLE_MS))
    const latency: Array<number> = []
    const enqueueCall: Array<number> = []
    const afterEnqueue: Array<number> = []
    let missed = 0
    const deadline = performance.now() + s.budgetMs
    for (let i = 0; i < total && performance.now() < deadline; i++) {
      yield* Effect.sleep(Duration.millis(gap()))
      seen = yield* Deferred.make<void>()
      const t0 = performance.now()
      yield* q.enqueue({ n: i })
      const t1 = performance.now()
      const got = yield* Deferred.await(seen).pipe(Effect.timeout(Duration.millis(s.sampleTimeoutMs)), Effect.option)
      if (Option.isNone(got)) {
        missed++
        continue
      }
      if (i < s.warmup) continue
      latency.push(handlerAt[i]! - t0)
      enqueueCall.push(t1 - t0)
      afterEnqueue.push(handlerAt[i]! - t1)
    }
    yield* Fiber.interrupt(worker)

    // Diagnostic: the claim alone (no waiting): enqueue, let it settle, time `claim`.
    const claimCall: Array<number> = []
    for (let i = 0; i < s.warmup + Math.min(200, s.samples); i++) {
      yield* q.enqueue({ n: -1 })
      yield* Effect.sleep(Duration.millis(gap()))
      const t0 = performance.now()
      const h = yield* q.claim(WORKER)
      const t1 = performance.now()
      if (Option.isNone(h)) return yield* Effect.die(new Error("claim found nothing"))
      yield* h.value.ack
      if (i >= s.warmup) claimCall.push(t1 - t0)
    }
    return {
      latenciesMs: latency,
      series: {
        "enqueue call (before enqueue → it returned)": enqueueCall,
        "enqueue returned → handler": afterEnqueue,
        "claim call alone (job already pending, no worker waiting)": claimCall
      },
      notes: missed > 0 ? [`${missed} samples not delivered within ${s.sampleTimeoutMs} ms`] : []
    } satisfies WakeResult
  })
  try {
    return await rt.runPromise(program)
  } finally {
    await rt.dispose()
  }
}

const rawInProcess = async (file: string, s: WakeSettings): Promise<WakeResult> => {
  const raw = await openRaw(file, true)
  const gap = gapOf(s)
  const latency: Array<number> = []
  const insert: Array<number> = []
  const claim: Array<number> = []
  for (let i = 0; i < s.warmup + s.samples; i++) {
    await sleep(gap())
    const t0 = performance.now()
    raw.enqueue(i)
    const t1 = performance.now()
    const job = raw.claim()
    const t2 = performance.now()
    if (job?.n !== i) throw new Error(`raw: claimed ${job?.n}, expected ${i}`)
    raw.ack(job.id)
    if (i < s.warmup) continue
    latency.push(t2 - t0)
    insert.push(t1 - t0)
    claim.push(t2 - t1)
  }
  raw.db.close()
  return {
    latenciesMs: latency,
    series: { "raw INSERT alone": insert, "raw claim UPDATE … RETURNING alone": claim }
  }
}

// ---------- wake-crossprocess ----------

type ToEnqueuer = { readonly t: "go"; readonly n: number } | { readonly t: "done" }
type FromEnqueuer =
  | { readonly t: "ready"; readonly skew: number }
  | { readonly t: "commits"; readonly commits: Record<number, number>; readonly enqueueMs: Array<number>; readonly skew: number }

/** Spawns this child entry again as the enqueuing process B (IPC channel on fd 3). */
const spawnEnqueuer = (side: WakeSide, file: string): ChildProcess =>
  spawn(process.execPath, [...process.execArgv, process.argv[1]!, "enqueuer", side, file], {
    stdio: ["ignore", "ignore", "inherit", "ipc"]
  })

const nextMessage = <T extends FromEnqueuer["t"]>(child: ChildProcess, t: T): Promise<Extract<FromEnqueuer, { t: T }>> =>
  new Promise((resolve, reject) => {
    const onMessage = (m: FromEnqueuer) => {
      if (m.t !== t) return
      child.off("message", onMessage)
      child.off("exit", onExit)
      resolve(m as Extract<FromEnqueuer, { t: T }>)
    }
    const onExit = (code: number | null) => reject(new Error(`enqueuer exited (${code}) before "${t}"`))
    child.on("message", onMessage)
    child.on("exit", onExit)
  })

/**
 * Process A's side of the cross-process scenario, for either worker: spawns
 * B, asks it for one job per sample (after a 2–5 ms idle gap), waits for the
 * worker to see it, then pairs A's handler times with B's commit times.
 */
const driveCrossProcess = async (
  side: WakeSide,
  file: string,
  s: WakeSettings,
  handlerAt: Map<number, number>,
  waitFor: (n: number) => Promise<boolean>
): Promise<WakeResult> => {
  const child = spawnEnqueuer(side, file)
  try {
    const ready = await nextMessage(child, "ready")
    const gap = gapOf(s)
    const total = s.warmup + s.samples
    let missed = 0
    const deadline = performance.now() + s.budgetMs
    let sent = 0
    for (; sent < total && performance.now() < deadline; sent++) {
      await sleep(gap())
      child.send({ t: "go", n: sent } satisfies ToEnqueuer)
      if (!(await waitFor(sent))) missed++
    }
    const done = nextMessage(child, "commits")
    child.send({ t: "done" } satisfies ToEnqueuer)
    const { commits, enqueueMs, skew } = await done
    const latency: Array<number> = []
    for (let n = s.warmup; n < sent; n++) {
      const h = handlerAt.get(n)
      const c = commits[n]
      if (h !== undefined && c !== undefined) latency.push(h - c)
    }
    const mySkew = clockSkew()
    return {
      latenciesMs: latency,
      series: { [`enqueuer: ${side === "raw" ? "raw INSERT" : side === "plainjob" ? "queue.add" : "enqueue"} call in process B`]: enqueueMs.slice(s.warmup) },
      values: {
        "clock disagreement A−B (ms; timeOrigin+now vs CLOCK_MONOTONIC)": mySkew - (ready.skew + skew) / 2
      },
      notes: missed > 0 ? [`${missed} samples not delivered within ${s.sampleTimeoutMs} ms`] : []
    }
  } finally {
    child.kill()
  }
}

const alkCrossProcess = async (file: string, s: WakeSettings): Promise<WakeResult> => {
  const store = await openAlkstore(file)
  const { Fiber, rt } = store
  const a = arrivals(s.sampleTimeoutMs)
  const worker = alkWorker(store, a.seen)
  await sleep(SETTLE_MS)
  try {
    return await driveCrossProcess("alkstore", file, s, a.handlerAt, a.waitFor)
  } finally {
    await rt.runPromise(Fiber.interrupt(worker))
    await rt.dispose()
  }
}

const rawCrossProcess = async (file: string, s: WakeSettings): Promise<WakeResult> => {
  const raw = await openRaw(file, true)
  const a = arrivals(s.sampleTimeoutMs)
  const stop = rawPoller(raw, a.seen, "dataVersion")
  try {
    const r = await driveCrossProcess("raw", file, s, a.handlerAt, a.waitFor)
    return {
      ...r,
      notes: [...(r.notes ?? []), "raw polling at 1 ms (setTimeout(1) loop reading data_version, claiming when it moved)"]
    }
  } finally {
    stop()
    raw.db.close()
  }
}

const plainjobCrossProcess = async (file: string, s: WakeSettings): Promise<WakeResult> => {
  const pj = await openPlainjob(file) // creates plainjob's tables before B opens the file
  const a = arrivals(s.sampleTimeoutMs)
  const stop = pj.worker(a.seen)
  await sleep(SETTLE_MS)
  try {
    const r = await driveCrossProcess("plainjob", file, s, a.handlerAt, a.waitFor)
    return { ...r, notes: [...(r.notes ?? []), `plainjob's worker polling every ${PLAINJOB_POLL_MS} ms`] }
  } finally {
    await stop()
    pj.close()
  }
}

/**
 * Process A paces the samples from a timer callback, so its "go" lands in the
 * same timer pass as its own poller's or watcher's ticks: without a random
 * phase the commit would always arrive just after a tick (and wait a whole
 * period). B therefore busy-waits a random 0–3 ms before it enqueues, which
 * spreads the commits over more than a full 1 ms poll / 2 ms watcher period.
 */
const PHASE_SPREAD_MS = 3
const spin = (ms: number) => {
  const until = performance.now() + ms
  while (performance.now() < until) {
    // busy: a timer would re-align to the event loop's millisecond ticks
  }
}

/** Process B: enqueues one job per "go" (after a random phase), notes the time right after it committed. */
export const runEnqueuer = async (side: WakeSide, file: string): Promise<void> => {
  const commits: Record<number, number> = {}
  const enqueueMs: Array<number> = []
  let enqueue: (n: number) => Promise<number>
  let close: () => Promise<void>
  if (side === "raw") {
    const raw = await openRaw(file, false)
    enqueue = async (n) => {
      const t0 = performance.now()
      raw.enqueue(n) // autocommit: committed when run() returns
      const at = clock()
      enqueueMs.push(performance.now() - t0)
      return at
    }
    close = async () => {
      raw.db.close()
    }
  } else if (side === "plainjob") {
    const pj = await openPlainjob(file)
    enqueue = async (n) => {
      const t0 = performance.now()
      pj.enqueue(n) // one autocommit INSERT
      const at = clock()
      enqueueMs.push(performance.now() - t0)
      return at
    }
    close = async () => pj.close()
  } else {
    const { Effect, rt, q } = await openAlkstore(file)
    enqueue = (n) =>
      rt.runPromise(Effect.suspend(() => {
        const t0 = performance.now()
        return Effect.map(q.enqueue({ n }), () => {
          const at = clock() // enqueue returned: its transaction committed
          enqueueMs.push(performance.now() - t0)
          return at
        })
      }))
    close = () => rt.dispose()
  }
  const send = (m: FromEnqueuer) => new Promise<void>((r) => process.send!(m, () => r()))
  let chain = Promise.resolve()
  process.on("message", (m: ToEnqueuer) => {
    chain = chain.then(async () => {
      if (m.t === "go") {
        spin(Math.random() * PHASE_SPREAD_MS)
        commits[m.n] = await enqueue(m.n)
      }
      else {
        await send({ t: "commits", commits, enqueueMs, skew: clockSkew() })
        await close()
        process.exit(0)
      }
    }).catch((e) => {
      console.error(e instanceof Error ? (e.stack ?? e.message) : String(e))
      process.exit(1)
    })
  })
  await send({ t: "ready", skew: clockSkew() })
}

// ---------- idle-cpu ----------

/** Measures this process over `s.idleMs` while `idle` work waits in it. */
const measureIdle = async (file: string, s: WakeSettings): Promise<WakeResult> => {
  const { default: Database } = await import("better-sqlite3")
  // A connection that never writes: its data_version moves iff somebody else committed.
  const observer = new Database(file, { readonly: true })
  const dataVersion = observer.prepare("PRAGMA data_version").pluck()
  await sleep(s.settleMs)
  const v0 = dataVersion.get() as number
  const r0 = process.resourceUsage()
  const c0 = process.cpuUsage()
  const w0 = performance.now()
  await sleep(s.idleMs)
  const cpu = process.cpuUsage(c0)
  const wallMs = performance.now() - w0
  const r1 = process.resourceUsage()
  const v1 = dataVersion.get() as number
  observer.close()
  return {
    cpuPercent: ((cpu.user + cpu.system) / 1000 / wallMs) * 100,
    values: {
      "measured wall time (s)": wallMs / 1000,
      "user CPU (ms)": cpu.user / 1000,
      "system CPU (ms)": cpu.system / 1000,
      "voluntary context switches / s": ((r1.voluntaryContextSwitches - r0.voluntaryContextSwitches) / wallMs) * 1000,
      "commits by anyone during the idle window (0 = no writes)": v1 === v0 ? 0 : 1
    }
  }
}

const alkIdle = async (file: string, s: WakeSettings): Promise<WakeResult> => {
  const { Effect, Fiber, rt, q } = await openAlkstore(file)
  const worker = rt.runFork(q.process(WORKER, () => Effect.void, { concurrency: 1 }))
  try {
    return await measureIdle(file, s)
  } finally {
    await rt.runPromise(Fiber.interrupt(worker))
    await rt.dispose()
  }
}

const rawIdle = async (file: string, s: WakeSettings): Promise<WakeResult> => {
  const raw = await openRaw(file, true)
  const stop = rawPoller(raw, () => {}, "dataVersion")
  try {
    const r = await measureIdle(file, s)
    return { ...r, notes: ["raw polling at 1 ms, nothing enqueued"] }
  } finally {
    stop()
    raw.db.close()
  }
}

// ---------- entry ----------

export const runWake = (id: WakeId, side: WakeSide, file: string, s: WakeSettings): Promise<WakeResult> => {
  switch (id) {
    case "wake-inprocess":
      return side === "raw" ? rawInProcess(file, s) : alkInProcess(file, s)
    case "wake-outside":
      return runOutside(side, file, s)
    case "wake-crossprocess":
    case "wake-crossprocess-warm":
      return side === "raw"
        ? rawCrossProcess(file, s)
        : side === "plainjob"
        ? plainjobCrossProcess(file, s)
        : alkCrossProcess(file, s)
    case "idle-cpu":
      return side === "raw" ? rawIdle(file, s) : alkIdle(file, s)
  }
}
