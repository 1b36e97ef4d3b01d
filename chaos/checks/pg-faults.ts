/**
 * PostgreSQL faults (issue 11, item 5): on a throw-away cluster of its own,
 * W worker processes drain a queue a producer here keeps filling and two
 * standby processes run the scheduler, while this driver, over and over,
 * kills backends with `pg_terminate_backend` (the pools' connections, the
 * LISTEN connections, or both) and restarts the server (`pg_ctl restart -m
 * fast|immediate`, or `stop` then `start` after a pause, on the same port).
 * Nobody is restarted by the driver. Then it proves:
 *
 * - every process recovers by itself: none exits, each worker handles a
 *   probe job on a queue of its own after every fault (`recovery`), and a
 *   second probe reaches it by NOTIFY (`wake`: the workers' fallback poll is
 *   a minute away, so a wake within `wakeBoundMs` came by notification);
 * - nothing is lost: the crash check's ledger checker (every job handled,
 *   none stuck or dead unless meant, every duplicate explained — here also
 *   by a fault between a handler's end and its ack — tokens only grow), with
 *   enqueues that failed yet committed accounted for;
 * - the scheduler fired every elapsed boundary exactly once, fault or not;
 * - what anyone met was a typed `SqlError`: the producer's failures, and
 *   every error the workers logged (no defect, no other error).
 */
import { DateTime, Effect, Exit, ManagedRuntime } from "effect"
import Pg from "pg"
import { Queues, Scheduler } from "../../src/index.js"
import { type Cluster, startCluster } from "../../test/support/pg-cluster.js"
import { createTarget, lockRow, openStore, scratch } from "../engine.js"
import { type Check, type CheckConfig, violations as collect } from "../lib/check.js"
import { openLedger, readLedger } from "../lib/ledger.js"
import { type Child, describeExit, kill, sleep, spawnWorker, waitUntil } from "../lib/procs.js"
import { faultDeck } from "../lib/faultDeck.js"
import { makeRng, type Rng } from "../lib/rng.js"
import type { CrashPayload } from "../lib/crash-handler.js"
import { checkCrashLedger, type CrashRecord } from "./crash-ledger.js"

const visibilityMs = 1_500
/** The workers' fallback poll: a probe handled long before it was woken by NOTIFY. */
const workerPollMs = 60_000
const wakeBoundMs = 2_000
const intervalMs = 1_000

const faultKinds = ["killPool", "killListen", "killAll", "restartFast", "restartImmediate", "stopStart"] as const
type FaultKind = (typeof faultKinds)[number]

type PgRecord =
  | CrashRecord
  | { readonly e: "probe"; readonly worker: string; readonly round: number; readonly at: number }
  | { readonly e: "log"; readonly tags: ReadonlyArray<string>; readonly defects: number; readonly text: string; readonly pid: number }

const poolApp = "@effect/sql-pg"
const listenApp = "alkstore-listen"

/** `pg_terminate_backend` on every client backend of these application names; how many it ended. */
const terminate = async (url: string, apps: ReadonlyArray<string>) => {
  const client = new Pg.Client({ connectionString: url })
  await client.connect()
  try {
    const { rows } = await client.query<{ n: string }>(
      `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity
        WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND application_name = ANY($1)`,
      [apps]
    )
    return Number(rows[0]!.n)
  } finally {
    await client.end()
  }
}

/** How many LISTEN connections the server has now. */
const listeners = async (url: string) => {
  const client = new Pg.Client({ connectionString: url })
  await client.connect()
  try {
    const { rows } = await client.query<{ n: string }>(
      `SELECT count(*) AS n FROM pg_stat_activity WHERE backend_type = 'client backend' AND application_name = $1`,
      [listenApp]
    )
    return Number(rows[0]!.n)
  } finally {
    await client.end()
  }
}

/**
 * A lost LISTEN connection is back within this: the longest backoff wait
 * (5 s) plus a connect's deadline, with room for a loaded machine.
 */
const listenBackBoundMs = 10_000

const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!
}

/** The faults in the order they are injected: every kind once (shuffled), then at random. */
const faultPlan = (rng: Rng, count: number): Array<FaultKind> => {
  const deck = faultDeck(rng, Object.fromEntries(faultKinds.map((k) => [k, 1])) as Record<FaultKind, number>)
  return Array.from({ length: count }, deck)
}

const run = async (config: CheckConfig, cluster: Cluster) => {
  const rng = makeRng(config.seed)
  const v = collect()
  const width = 3
  const target = createTarget("pg", "pgfaults", cluster.url)
  const ledgerFile = scratch("pgfaults.ledger")
  const ledger = openLedger(ledgerFile)
  const runtime = ManagedRuntime.make(openStore(target))
  /** The driver's own store calls, retried through the faults (a failure here is no finding). */
  const retrying = async <A>(effect: Effect.Effect<A, unknown, Queues.Queues | Scheduler.Scheduler>): Promise<A> => {
    for (let i = 0;; i++) {
      const exit = await runtime.runPromiseExit(effect)
      if (Exit.isSuccess(exit)) return exit.value
      if (i > 600) throw new Error(`the driver's store did not recover: ${String(exit.cause)}`)
      await sleep(100)
    }
  }
  const children: Array<Child & { id?: string }> = []
  let stopping = false
  const watch = (child: Child, what: string) =>
    void child.exit.then((code) => {
      if (!child.killed && !stopping) v.add("exit", `${what} exited by itself (code ${code}) ${describeExit(child)}`)
    })
  try {
    const queue = await retrying(Effect.flatMap(Queues.Queues, (q) =>
      q.queue("chaos", { visibilityTimeout: visibilityMs, maxAttempts: 50, backoffBase: "50 millis" })))
    const registered = await retrying(Effect.flatMap(Scheduler.Scheduler, (s) => s.schedule("tick", "@every 1s", "ticks", {})))
    const first = DateTime.toEpochMillis(registered.nextFireAt)
    const workerIds: Array<string> = []
    for (let i = 0; i < width; i++) {
      const id = `w${i}`
      const child = await spawnWorker("pg-fault-worker", [
        JSON.stringify(target), ledgerFile, id, String(rng.fork()), String(rng.int(1, 3)), String(visibilityMs), String(workerPollMs)
      ])
      children.push(child)
      workerIds.push(id)
      watch(child, `worker ${id}`)
    }
    for (let i = 0; i < 2; i++) {
      const child = await spawnWorker("standby", [JSON.stringify(target), "1500", "300"])
      children.push(child)
      watch(child, "standby")
    }
    const records = () => readLedger<PgRecord>(ledgerFile)
    await waitUntil("the workers to start", () => records().filter((r) => r.e === "ready").length >= width, 30_000)
    // the standbys print their instance once their store is up (a store that cannot start fails to start)
    const standbys = children.slice(width)
    await waitUntil("the standbys to start", () => standbys.every((c) => c.lines.some((l) => typeof l === "object")), 30_000)

    let producing = true
    let enqueued = 0
    let enqueueFailures = 0
    const producer = (async () => {
      while (producing) {
        const n = enqueued + enqueueFailures
        const payload: CrashPayload = { n, workMs: rng.int(5, 40), poison: rng.chance(0.03), selfAck: rng.chance(0.5) }
        const exit = await runtime.runPromiseExit(queue.enqueue(payload, payload.poison ? { maxAttempts: 2 } : {}))
        if (Exit.isSuccess(exit)) {
          ledger.append({ e: "enq", job: exit.value, poison: payload.poison })
          enqueued++
          await sleep(rng.int(2, 25))
        } else {
          const tag = exit.cause._tag === "Fail" ? (exit.cause.error as { _tag?: string })._tag : exit.cause._tag
          if (tag !== "SqlError") v.add("untyped", `an enqueue failed with ${String(exit.cause).slice(0, 300)}`)
          ledger.append({ e: "enqFailed", n, poison: payload.poison })
          enqueueFailures++
          await sleep(50)
        }
      }
    })()

    /** Each worker handles a probe of `round` on its own queue; the latencies from each commit. */
    let round = 0
    const probeAll = async () => {
      const thisRound = ++round
      const sentAt = new Map<string, number>()
      for (const id of workerIds) {
        await retrying(Effect.flatMap(Queues.Queues, (q) =>
          Effect.flatMap(q.queue(`probe-${id}`), (probes) => probes.enqueue({ round: thisRound }))))
        sentAt.set(id, Date.now())
      }
      const seen = () => records().filter((r): r is Extract<PgRecord, { e: "probe" }> => r.e === "probe" && r.round === thisRound)
      await waitUntil(`every worker's probe of round ${thisRound}`, () => {
        // a process that died will handle nothing: no use waiting (its exit is the finding)
        if (children.some((c) => c.exited && !c.killed)) throw new Error("a process exited")
        return seen().length >= workerIds.length
      }, 30_000)
      return seen().map((r) => ({ latency: Math.max(0, r.at - sentAt.get(r.worker)!), at: r.at }))
    }

    const plan = faultPlan(rng, config.short ? faultKinds.length : 24)
    const recoveries: Array<number> = []
    const wakes: Array<number> = []
    const killed = { pool: 0, listen: 0 }
    let listenBackMs = 0
    const counts: Partial<Record<FaultKind, number>> = {}
    await sleep(1_000)
    for (const kind of plan) {
      counts[kind] = (counts[kind] ?? 0) + 1
      ledger.append({ e: "fault", kind })
      if (kind === "killPool" || kind === "killAll") killed.pool += await terminate(cluster.url, [poolApp])
      if (kind === "killListen" || kind === "killAll") {
        // every process's LISTEN connection (the workers', the standbys' and the driver's) is back from the
        // faults before: the unprobed processes' too, within the bound (a listener may still be on its backoff)
        const expected = children.length + 1
        const waitedFrom = Date.now()
        await waitUntil(`${expected} LISTEN connections`, async () => (await listeners(cluster.url)) >= expected, listenBackBoundMs)
          .catch(async () => v.add("killListen", `${await listeners(cluster.url)} LISTEN connections, expected ${expected}, ${listenBackBoundMs} ms after the last fault's recovery`))
        listenBackMs = Math.max(listenBackMs, Date.now() - waitedFrom)
        killed.listen += await terminate(cluster.url, [listenApp])
      }
      if (kind === "restartFast") await cluster.restart("fast")
      if (kind === "restartImmediate") await cluster.restart("immediate")
      if (kind === "stopStart") {
        await cluster.stopServer(rng.chance(0.5) ? "fast" : "immediate")
        await sleep(rng.int(500, 2_000))
        await cluster.startServer()
      }
      const endedAt = Date.now()
      ledger.append({ e: "faultEnd", kind })
      // recovered: every worker handles work again (woken by whatever brought it back) ...
      const recovered = await probeAll().catch((error: unknown) => (v.add("recovery", `after ${kind}: ${error}`), []))
      recoveries.push(...recovered.map((r) => r.at - endedAt))
      // ... and the next wake comes by NOTIFY, not by the poll a minute away
      const woken = await probeAll().catch((error: unknown) => (v.add("wake", `after ${kind}: ${error}`), []))
      for (const { latency } of woken) {
        wakes.push(latency)
        if (latency > wakeBoundMs) v.add("wake", `after ${kind}: a probe took ${latency} ms (poll ${workerPollMs} ms)`)
      }
      await sleep(rng.int(500, 1_500))
    }
    producing = false
    await producer

    // drain: the workers finish everything, lapsed claims included
    await waitUntil("the queue to drain", async () => {
      const s = await retrying(queue.stats)
      return s.pending + s.scheduled + s.claimed === 0
    }, 60_000).catch((error: unknown) => v.add("drain", String(error)))
    // the scheduler: a live leader has fired every boundary up to now
    const ticks = await retrying(Effect.flatMap(Queues.Queues, (q) => q.queue("ticks")))
    await waitUntil("a leader firing every elapsed boundary", async () => {
      const row = await runtime.runPromise(lockRow("__alkstore_scheduler")).catch(() => undefined)
      const s = await retrying(ticks.stats)
      const due = Math.floor((Date.now() - first) / intervalMs) + 1
      return row !== undefined && row.expiresAt > Date.now() && s.pending + s.scheduled >= due - 1
    }, 30_000).catch((error: unknown) => v.add("scheduler", String(error)))
    const stoppedAt = Date.now()
    stopping = true
    for (const child of children) kill(child)
    await Promise.all(children.map((c) => c.exit))

    const all = records()
    const dead = await retrying(queue.dead({ limit: 100_000 }))
    const ledgerResult = checkCrashLedger(all as ReadonlyArray<CrashRecord>, dead)
    for (const violation of ledgerResult.violations) v.add("ledger", violation)
    const finalStats = await retrying(queue.stats)
    if (finalStats.pending + finalStats.scheduled + finalStats.claimed !== 0) v.add("left", JSON.stringify(finalStats))

    const fired = await retrying(ticks.claimBatch("checker", 100_000))
    const runAts = fired.map((h) => DateTime.toEpochMillis(h.job.runAt)).sort((a, b) => a - b)
    const distinct = new Set(runAts).size
    if (distinct !== runAts.length) v.add("scheduler", `${runAts.length - distinct} boundaries fired twice`)
    if (runAts.some((at, i) => at !== first + i * intervalMs)) v.add("scheduler", "fired boundaries are not first + i×interval")
    if (runAts.length === 0 || runAts[runAts.length - 1]! < stoppedAt - 2 * intervalMs - 1_000) {
      v.add("scheduler", "boundaries up to the stop were left unfired")
    }

    const logs = all.filter((r): r is Extract<PgRecord, { e: "log" }> => r.e === "log")
    for (const log of logs) {
      if (log.defects > 0 || log.tags.some((t) => t !== "SqlError")) {
        v.add("untyped", `a worker logged ${log.tags.join(",")} with ${log.defects} defects: ${log.text}`)
      }
    }
    return {
      facts: {
        workers: width,
        standbys: 2,
        faults: plan.length,
        ...Object.fromEntries(Object.entries(counts).map(([k, n]) => [`fault.${k}`, n])),
        killedPoolBackends: killed.pool,
        killedListenBackends: killed.listen,
        listenBackMaxMs: listenBackMs,
        enqueueSqlErrors: enqueueFailures,
        workerSqlErrorsLogged: logs.length,
        ...ledgerResult.facts,
        boundaries: runAts.length,
        boundaryDuplicates: runAts.length - distinct,
        recoveryMaxMs: Math.max(0, ...recoveries),
        wakeP50Ms: percentile(wakes, 0.5),
        wakeMaxMs: Math.max(0, ...wakes),
        wakeProbes: wakes.length
      },
      violations: v.list
    }
  } finally {
    stopping = true
    for (const child of children) kill(child)
    ledger.close()
    await runtime.dispose()
  }
}

export const pgFaults: Check = {
  name: "pgfaults",
  engines: ["pg"],
  run: async (config) => {
    // a cluster of its own: the check restarts it
    const cluster = await startCluster({ durableCommits: true })
    try {
      return await run(config, cluster)
    } finally {
      cluster.stop()
    }
  }
}
