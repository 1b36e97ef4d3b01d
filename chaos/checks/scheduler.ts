/**
 * Scheduler chaos (issue 11, item 2): three processes run `runAsStandby`
 * on one database while this driver SIGKILLs the leader (starting a
 * replacement) or freezes it past its lease (SIGSTOP, then SIGCONT), until
 * at least 60 boundaries of an `@every 1s` schedule elapsed. Then: every
 * elapsed boundary fired exactly once (the fired jobs' `runAt`), none
 * early, no gap (no leaderless span came near the 64-interval catch-up
 * cap), and a woken leader fired nothing (it would show as a duplicate
 * boundary: the new leader fired every boundary while it slept).
 */
import { DateTime, Effect, ManagedRuntime } from "effect"
import { Queues, Scheduler } from "../../src/index.js"
import { createTarget, lockRow, openStore } from "../engine.js"
import { type Check, violations as collect } from "../lib/check.js"
import { type Child, describeExit, freeze, kill, sleep, spawnWorker, thaw, waitUntil } from "../lib/procs.js"
import { faultDeck } from "../lib/faultDeck.js"
import { makeRng } from "../lib/rng.js"

const intervalMs = 1_000
const ttlMs = 1_500
const renewMs = 300
const catchUpCap = 64

export const scheduler: Check = {
  name: "scheduler",
  engines: ["sqlite", "pg"],
  run: async (config) => {
    const rng = makeRng(config.seed)
    const boundaries = config.short ? 15 : 65
    const target = createTarget(config.engine, "scheduler")
    const runtime = ManagedRuntime.make(openStore(target))
    const v = collect()
    const members: Array<Child & { instance?: string }> = []
    let stopping = false
    const register = Effect.flatMap(Scheduler.Scheduler, (s) => s.schedule("tick", "@every 1s", "ticks", { t: 1 }))
    const start = async () => {
      const child: Child & { instance?: string } = await spawnWorker("standby", [
        JSON.stringify(target), String(ttlMs), String(renewMs)
      ])
      members.push(child)
      void child.exit.then((code) => {
        if (!child.killed && !stopping) v.add("exit", `standby exited by itself (code ${code}) ${describeExit(child)}`)
      })
    }
    const instanceOf = (child: Child) => {
      const line = child.lines.find((l): l is { instance: string } => typeof (l as { instance?: unknown })?.instance === "string")
      return line?.instance
    }
    const leader = async () => {
      const row = await runtime.runPromise(lockRow("__alkstore_scheduler"))
      if (row === undefined || row.expiresAt <= Date.now()) return undefined
      return members.find((m) => !m.exited && row.owner.startsWith(`${instanceOf(m)}:`))
    }
    try {
      const first = DateTime.toEpochMillis((await runtime.runPromise(register)).nextFireAt)
      for (let i = 0; i < 3; i++) await start()
      await waitUntil("three standbys to start", () => members.every((m) => instanceOf(m) !== undefined), 30_000)

      // watch the lease: the longest span without a leader bounds what catch-up must refill
      let leaderless = 0
      let longestLeaderless = 0
      let watching = true
      const watcher = (async () => {
        while (watching) {
          const now = Date.now()
          if ((await leader()) === undefined) leaderless ||= now
          else if (leaderless !== 0) {
            longestLeaderless = Math.max(longestLeaderless, now - leaderless)
            leaderless = 0
          }
          await sleep(50)
        }
      })()

      const ticks = await runtime.runPromise(Effect.flatMap(Queues.Queues, (q) => q.queue("ticks")))
      const fired = async () => {
        const s = await runtime.runPromise(ticks.stats)
        return s.pending + s.scheduled
      }
      let kills = 0
      let freezes = 0
      let wokeLeading = 0
      let wokeReacquired = 0
      const nextFault = faultDeck(rng, { kill: 0.55, freeze: 0.45 })
      while ((await fired()) < boundaries) {
        await sleep(rng.int(2_500, 5_000))
        const current = await leader()
        if (current === undefined) continue
        if (nextFault() === "kill") {
          kills++
          kill(current)
          await start()
        } else {
          freezes++
          const tenure = (await runtime.runPromise(lockRow("__alkstore_scheduler")))?.token
          freeze(current)
          await sleep(ttlMs + rng.int(500, 2_000))
          thaw(current)
          // the woken process must find its lease gone and stand by: leading again 500 ms later is allowed
          // only as a new tenure (it won the lapsed lease again, with a new token), never as its old one
          await sleep(500)
          if ((await leader()) === current) {
            const row = await runtime.runPromise(lockRow("__alkstore_scheduler"))
            if (row !== undefined && row.token === tenure) wokeLeading++
            else wokeReacquired++
          }
        }
      }
      const stoppedAt = Date.now()
      stopping = true
      for (const m of members) kill(m)
      await Promise.all(members.map((m) => m.exit))
      watching = false
      await watcher

      const jobs = await runtime.runPromise(ticks.claimBatch("checker", 100_000))
      const runAts = jobs.map((h) => DateTime.toEpochMillis(h.job.runAt)).sort((a, b) => a - b)
      const lags = jobs.map((h) => DateTime.toEpochMillis(h.job.createdAt) - DateTime.toEpochMillis(h.job.runAt))
      const next = DateTime.toEpochMillis((await runtime.runPromise(register)).nextFireAt)

      const distinct = new Set(runAts).size
      if (distinct !== runAts.length) v.add("duplicate", `${runAts.length - distinct} boundaries fired twice`)
      const gaps = runAts.filter((at, i) => i > 0 && at - runAts[i - 1]! > intervalMs).length
      const expected = runAts.map((_, i) => first + i * intervalMs)
      if (runAts.some((at, i) => at !== expected[i])) {
        v.add("sequence", `fired boundaries are not first + i×interval (${gaps} gaps, cap ${catchUpCap} never reached)`)
      }
      if (next !== first + runAts.length * intervalMs) v.add("next", `next boundary ${next} after ${runAts.length} fires`)
      if (next <= stoppedAt - intervalMs - 1_000) v.add("elapsed", `boundaries up to the stop were left unfired`)
      if (lags.some((lag) => lag < 0)) v.add("early", "a boundary fired before it elapsed")
      if (runAts.length < boundaries) v.add("short", `only ${runAts.length} boundaries`)
      if (wokeLeading > 0) v.add("woken leader", `${wokeLeading} frozen leaders still held their old tenure after waking`)
      if (longestLeaderless >= catchUpCap * intervalMs) v.add("cap", "a leaderless span reached the catch-up cap")
      return {
        facts: {
          boundaries: runAts.length,
          duplicates: runAts.length - distinct,
          gaps,
          kills,
          freezes,
          wokeLeading,
          wokeReacquired,
          longestLeaderlessMs: longestLeaderless,
          maxFireLagMs: Math.max(0, ...lags)
        },
        violations: v.list
      }
    } finally {
      stopping = true
      for (const m of members) kill(m)
      await runtime.dispose()
    }
  }
}
