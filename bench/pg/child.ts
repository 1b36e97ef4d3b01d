/**
 * A PostgreSQL benchmark child: one workload, one contender, one fresh
 * database (created by bench/pg/run.ts, dropped after), then one
 * `RESULT {json}` line on stdout.
 *
 *   child.ts run <contender> <workload> <url> <sizes-json>
 *
 * The same entry, spawned by a `run` child with an IPC channel, is
 *
 *   child.ts worker <contender> <url>     a drain worker process (drain-1, drain-4)
 *   child.ts enqueuer <contender> <url>   the enqueuing process of wake-crossprocess
 */
import { type ChildProcess, spawn } from "node:child_process"
import { loadPgContender } from "./contenders/index.js"
import type { PgContender, PgSizes, PgWorkloadId, Session } from "./workloads.js"
import { AFTER_RETURN, ENQUEUE_CALL, range, sleep } from "./workloads.js"

export interface PgChildResult {
  /** throughput and claim workloads: jobs done in `ms` */
  readonly ops?: number
  readonly ms?: number
  /** latency workloads: one latency per timed sample, ms (from just before the enqueue call to the handler) */
  readonly latenciesMs?: ReadonlyArray<number>
  /** latency workloads: diagnostic series, ms (e.g. from the enqueue call's return to the handler) */
  readonly series?: Readonly<Record<string, ReadonlyArray<number>>>
  readonly notes?: ReadonlyArray<string>
  readonly maxRssMB: number
}

/** One clock for every process (wall-clock based, sub-ms resolution). */
const clock = () => performance.timeOrigin + performance.now()
const gap = () => 2 + Math.random() * 3
const STALL_MS = 20_000

type ToWorker = { readonly t: "go" } | { readonly t: "stop" }
type FromWorker =
  | { readonly t: "ready" }
  | { readonly t: "count"; readonly n: number }
  | { readonly t: "cpu"; readonly micros: number }
  | { readonly t: "stopped" }
type ToEnqueuer = { readonly t: "go"; readonly n: number } | { readonly t: "done" }
type FromEnqueuer =
  | { readonly t: "ready" }
  | { readonly t: "commits"; readonly before: Record<number, number>; readonly after: Record<number, number> }

const spawnSelf = (args: ReadonlyArray<string>): ChildProcess =>
  spawn(process.execPath, [...process.execArgv, process.argv[1]!, ...args], {
    stdio: ["ignore", "ignore", "inherit", "ipc"]
  })

const once = <M extends { t: string }>(child: ChildProcess, t: M["t"]): Promise<M> =>
  new Promise((resolve, reject) => {
    const onMessage = (m: M) => {
      if (m.t !== t) return
      child.off("message", onMessage)
      child.off("exit", onExit)
      resolve(m)
    }
    const onExit = (code: number | null) => reject(new Error(`child process exited (${code}) before "${t}"`))
    child.on("message", onMessage)
    child.on("exit", onExit)
  })

const exited = (child: ChildProcess, ms: number): Promise<void> =>
  new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve()
    const t = setTimeout(() => {
      child.kill("SIGKILL")
      resolve()
    }, ms)
    child.on("exit", () => {
      clearTimeout(t)
      resolve()
    })
  })

/** Waits until the store shows no live job (polled every 2 ms). */
const untilEmpty = async (session: Session, timeoutMs = 60_000) => {
  const deadline = performance.now() + timeoutMs
  while ((await session.live()) > 0) {
    if (performance.now() > deadline) throw new Error("jobs still live after the drain")
    await sleep(2)
  }
}

// ---------- drain (1 or P worker processes) ----------

const drain = async (c: PgContender, url: string, session: Session, s: PgSizes, procs: number) => {
  await session.preload(s.drainJobs, 0)
  const workers = range(procs).map(() => spawnSelf(["worker", c.name, url]))
  const counts = new Array<number>(procs).fill(0)
  let total = 0
  let allSeen: () => void = () => {}
  const seen = new Promise<void>((r) => (allSeen = r))
  try {
    await Promise.all(workers.map((w) => once<FromWorker>(w, "ready")))
    workers.forEach((w, i) =>
      w.on("message", (m: FromWorker) => {
        if (m.t !== "count") return
        total += m.n - counts[i]!
        counts[i] = m.n
        if (total >= s.drainJobs) allSeen()
      })
    )
    const t0 = performance.now()
    for (const w of workers) w.send({ t: "go" } satisfies ToWorker)
    // fail fast when the handlers stop making progress (a broken contender must not hold the run for minutes)
    let last = -1
    let stalled: NodeJS.Timeout | undefined
    const stall = new Promise<never>((_, reject) => {
      stalled = setInterval(() => {
        if (total === last) reject(new Error(`${c.name}: no job handled for ${STALL_MS / 1000} s (${total} of ${s.drainJobs})`))
        last = total
      }, STALL_MS)
    })
    try {
      await Promise.race([seen, stall])
    } finally {
      clearInterval(stalled)
    }
    await untilEmpty(session)
    const ms = performance.now() - t0
    // each worker process's CPU (user + system) from "go" to "stop": the client's cost per job
    const cpu = Promise.all(workers.map((w) => once<Extract<FromWorker, { t: "cpu" }>>(w, "cpu").catch(() => undefined)))
    for (const w of workers) w.send({ t: "stop" } satisfies ToWorker)
    const micros = await cpu
    await Promise.all(workers.map((w) => exited(w, 10_000)))
    if (total !== s.drainJobs) throw new Error(`${c.name}: handlers saw ${total} jobs, expected ${s.drainJobs}`)
    const cpuNote = micros.every((m) => m !== undefined)
      ? [`client CPU per job (worker processes, user + system): ${(micros.reduce((a, m) => a + m!.micros, 0) / s.drainJobs).toFixed(0)} µs`]
      : []
    return { ops: s.drainJobs, ms, notes: [`per-process jobs: ${counts.join(", ")}`, ...cpuNote] }
  } finally {
    for (const w of workers) if (w.exitCode === null) w.kill("SIGKILL")
  }
}

const workerMain = async (c: PgContender, url: string) => {
  const session = await c.open(url)
  let count = 0
  let sent = 0
  let go: () => void = () => {}
  let stop: () => Promise<void> = async () => {}
  const started = new Promise<void>((r) => (go = r))
  let cpuAtGo: NodeJS.CpuUsage | undefined
  process.on("message", async (m: ToWorker) => {
    if (m.t === "go") {
      cpuAtGo = process.cpuUsage()
      go()
    }
    if (m.t === "stop") {
      const cpu = process.cpuUsage(cpuAtGo)
      clearInterval(reporter)
      process.send!({ t: "count", n: count } satisfies FromWorker)
      process.send!({ t: "cpu", micros: cpu.user + cpu.system } satisfies FromWorker)
      await stop()
      await session.close()
      process.exit(0)
    }
  })
  const reporter = setInterval(() => {
    if (count !== sent) process.send!({ t: "count", n: (sent = count) } satisfies FromWorker)
  }, 2)
  process.send!({ t: "ready" } satisfies FromWorker)
  await started
  stop = await session.startWorker(() => {
    count++
  }, "drain")
}

// ---------- latency ----------

const wakeInProcess = async (session: Session, s: PgSizes) => {
  const handlerAt = new Map<number, number>()
  let waiting: { n: number; resolve: () => void } | undefined
  const stop = await session.startWorker((n) => {
    handlerAt.set(n, performance.now()) // the handler's first line
    if (waiting?.n === n) waiting.resolve()
  }, "wake")
  await sleep(200)
  const latency: Array<number> = []
  const call: Array<number> = []
  const wake: Array<number> = []
  let missed = 0
  const deadline = performance.now() + s.wakeBudgetMs
  for (let i = 0; i < s.wakeWarmup + s.wakeSamples && performance.now() < deadline; i++) {
    await sleep(gap())
    const delivered = new Promise<void>((resolve) => (waiting = { n: i, resolve }))
    const t0 = performance.now()
    await session.enqueue(i)
    const t1 = performance.now()
    const ok = await Promise.race([delivered.then(() => true), sleep(6_000).then(() => false)])
    if (!ok) missed++
    else if (i >= s.wakeWarmup) {
      latency.push(handlerAt.get(i)! - t0)
      call.push(t1 - t0)
      wake.push(handlerAt.get(i)! - t1)
    }
  }
  await stop()
  return {
    latenciesMs: latency,
    series: { [ENQUEUE_CALL]: call, [AFTER_RETURN]: wake },
    notes: missed > 0 ? [`${missed} samples not delivered within 6 s`] : []
  }
}

const wakeCrossProcess = async (c: PgContender, url: string, session: Session, s: PgSizes) => {
  const handlerAt = new Map<number, number>()
  let waiting: { n: number; resolve: () => void } | undefined
  const stop = await session.startWorker((n) => {
    handlerAt.set(n, clock()) // the handler's first line
    if (waiting?.n === n) waiting.resolve()
  }, "wake")
  const child = spawnSelf(["enqueuer", c.name, url])
  try {
    await once<FromEnqueuer>(child, "ready")
    await sleep(200)
    let missed = 0
    let sent = 0
    const deadline = performance.now() + s.wakeBudgetMs
    for (; sent < s.wakeWarmup + s.wakeSamples && performance.now() < deadline; sent++) {
      await sleep(gap())
      const delivered = new Promise<void>((resolve) => (waiting = { n: sent, resolve }))
      child.send({ t: "go", n: sent } satisfies ToEnqueuer)
      const ok = await Promise.race([delivered.then(() => true), sleep(6_000).then(() => false)])
      if (!ok) missed++
    }
    const commits = once<Extract<FromEnqueuer, { t: "commits" }>>(child, "commits")
    child.send({ t: "done" } satisfies ToEnqueuer)
    const { after, before } = await commits
    const latency: Array<number> = []
    const call: Array<number> = []
    const wake: Array<number> = []
    for (let n = s.wakeWarmup; n < sent; n++) {
      const h = handlerAt.get(n)
      const b = before[n]
      const a = after[n]
      if (h === undefined || a === undefined || b === undefined) continue
      latency.push(h - b)
      call.push(a - b)
      wake.push(h - a)
    }
    return {
      latenciesMs: latency,
      series: { [ENQUEUE_CALL]: call, [AFTER_RETURN]: wake },
      notes: missed > 0 ? [`${missed} samples not delivered within 6 s`] : []
    }
  } finally {
    await stop()
    await exited(child, 5_000)
  }
}

const enqueuerMain = async (c: PgContender, url: string) => {
  const session = await c.open(url)
  const before: Record<number, number> = {}
  const after: Record<number, number> = {}
  process.on("message", async (m: ToEnqueuer) => {
    if (m.t === "go") {
      // a random phase relative to the worker's own timers
      const until = performance.now() + Math.random() * 3
      while (performance.now() < until) { /* spin */ }
      before[m.n] = clock()
      await session.enqueue(m.n)
      after[m.n] = clock()
    } else {
      process.send!({ t: "commits", before, after } satisfies FromEnqueuer, () => void session.close().then(() => process.exit(0)))
    }
  })
  process.send!({ t: "ready" } satisfies FromEnqueuer)
}

// ---------- run ----------

const runWorkload = async (c: PgContender, w: PgWorkloadId, url: string, s: PgSizes) => {
  const session = await c.open(url)
  try {
    switch (w) {
      case "enqueue-1tx":
      case "enqueue-1tx-warm": {
        // Warm: the same calls first, untimed, so the timed ones run compiled code (a fresh child's are mostly not).
        const untimed = w === "enqueue-1tx-warm" ? s.enqueueJobs : 0
        for (let i = 0; i < untimed; i++) await session.enqueue(i)
        const t0 = performance.now()
        for (let i = untimed; i < untimed + s.enqueueJobs; i++) await session.enqueue(i)
        const ms = performance.now() - t0
        const live = await session.live()
        if (live !== untimed + s.enqueueJobs) throw new Error(`${c.name}: ${live} jobs after enqueue, expected ${untimed + s.enqueueJobs}`)
        return { ops: s.enqueueJobs, ms }
      }
      case "enqueue-100tx": {
        const t0 = performance.now()
        for (let i = 0; i < s.enqueueJobs; i += s.batch) {
          await session.enqueueInTx(range(Math.min(s.batch, s.enqueueJobs - i), i))
        }
        const ms = performance.now() - t0
        const live = await session.live()
        if (live !== s.enqueueJobs) throw new Error(`${c.name}: ${live} jobs after enqueue, expected ${s.enqueueJobs}`)
        return { ops: s.enqueueJobs, ms }
      }
      case "enqueue-batch100": {
        const t0 = performance.now()
        for (let i = 0; i < s.enqueueJobs; i += s.batch) {
          await session.enqueueBatch(range(Math.min(s.batch, s.enqueueJobs - i), i))
        }
        const ms = performance.now() - t0
        const live = await session.live()
        if (live !== s.enqueueJobs) throw new Error(`${c.name}: ${live} jobs after enqueue, expected ${s.enqueueJobs}`)
        return { ops: s.enqueueJobs, ms }
      }
      case "drain-1":
        return await drain(c, url, session, s, 1)
      case "drain-4":
        return await drain(c, url, session, s, s.processes)
      case "wake-inprocess":
        return await wakeInProcess(session, s)
      case "wake-crossprocess":
        return await wakeCrossProcess(c, url, session, s)
      case "claim-1k":
      case "claim-1m": {
        const claimAck = session.claimAck
        if (!claimAck) throw new Error(`${c.name}: no claim API`)
        const pending = w === "claim-1m" ? s.claimLarge : s.claimSmall
        const total = pending + s.claimOps + s.warmupOps
        for (let i = 0; i < total; i += s.preloadChunk) await session.preload(Math.min(s.preloadChunk, total - i), i)
        await analyze(url)
        for (let i = 0; i < s.warmupOps; i++) if (!(await claimAck())) throw new Error("queue empty in warm-up")
        const t0 = performance.now()
        for (let i = 0; i < s.claimOps; i++) if (!(await claimAck())) throw new Error(`queue empty after ${i} claims`)
        const ms = performance.now() - t0
        const live = await session.live()
        if (live !== pending) throw new Error(`${c.name}: ${live} jobs left, expected ${pending}`)
        return { ops: s.claimOps, ms }
      }
    }
  } finally {
    await session.close()
  }
}

/** After a preload (untimed): planner statistics, as autovacuum would soon have them. */
const analyze = async (url: string) => {
  const { default: pg } = await import("pg")
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  await c.query("ANALYZE")
  await c.end()
}

const [mode, name, ...rest] = process.argv.slice(2)
try {
  if (!mode || !name) throw new Error("usage: child.ts run|worker|enqueuer <contender> …")
  const c = await loadPgContender(name)
  if (mode === "worker") await workerMain(c, rest[0]!)
  else if (mode === "enqueuer") await enqueuerMain(c, rest[0]!)
  else {
    const [workload, url, sizes] = rest
    await c.setup(url!)
    const r = await runWorkload(c, workload as PgWorkloadId, url!, JSON.parse(sizes!) as PgSizes)
    const out: PgChildResult = { ...r, maxRssMB: process.resourceUsage().maxRSS / 1024 }
    process.stdout.write(`RESULT ${JSON.stringify(out)}\n`)
    process.exit(0)
  }
} catch (e) {
  const cause = e instanceof Error && e.cause !== undefined ? `\ncaused by: ${String(e.cause)}` : ""
  console.error((e instanceof Error ? (e.stack ?? e.message) : String(e)) + cause)
  process.exit(1)
}
