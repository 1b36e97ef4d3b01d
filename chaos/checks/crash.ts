/**
 * Crash chaos (issue 11, item 1): W worker processes run `process` on one
 * queue while this driver SIGKILLs a random worker every few hundred ms
 * (starting a replacement at once) and now and then SIGSTOPs one past its
 * lease and SIGCONTs it; a producer here keeps enqueueing. Every step is in
 * the fsync'd ledger; `crash-ledger.ts` then proves the guarantees from it
 * and from the final state.
 */
import { Effect, ManagedRuntime } from "effect"
import { Queues } from "../../src/index.js"
import { createTarget, integrity, openStore, scratch } from "../engine.js"
import type { Check } from "../lib/check.js"
import { openLedger, readLedger } from "../lib/ledger.js"
import { type Child, describeExit, freeze, kill, sleep, spawnWorker, thaw, waitUntil } from "../lib/procs.js"
import { faultDeck } from "../lib/faultDeck.js"
import { makeRng } from "../lib/rng.js"
import type { CrashPayload } from "../lib/crash-handler.js"
import { checkCrashLedger, type CrashRecord } from "./crash-ledger.js"

const visibilityMs = 1_500

/**
 * Workers with a handler started and not yet finished, those that will ack
 * it themselves first (their late ack's answer lands in the ledger).
 */
const busyPids = (records: ReadonlyArray<CrashRecord>) => {
  const open = new Map<string, { pid: number; selfAck: boolean }>()
  for (const r of records) {
    if (r.e === "start") open.set(`${r.job}/${r.token}`, { pid: r.pid, selfAck: r.selfAck })
    else if (r.e === "done" || r.e === "fail") open.delete(`${r.job}/${r.token}`)
  }
  const handlers = [...open.values()].sort((a, b) => Number(b.selfAck) - Number(a.selfAck))
  return [...new Set(handlers.map((h) => h.pid))]
}

export const crash: Check = {
  name: "crash",
  engines: ["sqlite", "pg"],
  run: async (config) => {
    const rng = makeRng(config.seed)
    const durationMs = config.short ? 10_000 : 60_000
    const width = config.short ? 3 : 4
    const target = createTarget(config.engine, "crash")
    const ledgerFile = scratch("crash.ledger")
    const ledger = openLedger(ledgerFile)
    const runtime = ManagedRuntime.make(openStore(target))
    const queue = await runtime.runPromise(
      Effect.flatMap(Queues.Queues, (q) =>
        q.queue("chaos", { visibilityTimeout: visibilityMs, maxAttempts: 50, backoffBase: "50 millis" }))
    )
    const unexpected: Array<string> = []
    const workers: Array<Child> = []
    const everyone: Array<Child> = []
    let stopping = false
    let spawned = 0
    const start = async () => {
      const child = await spawnWorker("crash-worker", [
        JSON.stringify(target), ledgerFile, `w${spawned++}`, String(rng.fork()), String(rng.int(1, 4)), String(visibilityMs)
      ])
      workers.push(child)
      everyone.push(child)
      void child.exit.then((code) => {
        if (!child.killed && !stopping) unexpected.push(`worker exited by itself (code ${code}) ${describeExit(child)}`)
      })
    }
    const readyCount = () => readLedger<CrashRecord>(ledgerFile).filter((r) => r.e === "ready").length
    try {
      for (let i = 0; i < width; i++) await start()
      await waitUntil("the first workers to start", () => readyCount() >= width, 30_000)

      let producing = true
      let enqueued = 0
      // the producer draws from its own stream: the faults' order must not depend on how the two interleave
      const produce = makeRng(rng.fork())
      const producer = (async () => {
        while (producing) {
          const payload: CrashPayload = {
            n: enqueued,
            workMs: produce.int(5, 60),
            poison: produce.chance(0.03),
            selfAck: produce.chance(0.5)
          }
          const id = await runtime.runPromise(queue.enqueue(payload, payload.poison ? { maxAttempts: 2 } : {}))
          ledger.append({ e: "enq", job: id, poison: payload.poison })
          enqueued++
          await sleep(produce.int(2, 30))
        }
      })()

      let kills = 0
      let freezes = 0
      const nextFault = faultDeck(rng, { freeze: 0.3, kill: 0.7 })
      const thaws: Array<Promise<void>> = []
      const until = Date.now() + durationMs
      while (Date.now() < until) {
        await sleep(rng.int(200, 600))
        const live = workers.filter((w) => !w.exited && !w.frozen)
        // no kills while a worker is frozen: the others must be up to take its lapsed claims over
        if (live.length === 0 || workers.some((w) => w.frozen)) continue
        if (nextFault() === "freeze") {
          // freeze a worker in the middle of a handler, so its lease lapses under it
          const busy = busyPids(readLedger<CrashRecord>(ledgerFile))
          const victim = live.find((w) => w.pid === busy.find((pid) => live.some((l) => l.pid === pid))) ?? rng.pick(live)
          freezes++
          ledger.append({ e: "freeze", target: victim.pid })
          freeze(victim)
          const frozenMs = visibilityMs + rng.int(300, 1_200)
          thaws.push(sleep(frozenMs).then(() => {
            ledger.append({ e: "thaw", target: victim.pid })
            thaw(victim)
          }))
        } else {
          const victim = rng.pick(live)
          kills++
          ledger.append({ e: "kill", target: victim.pid })
          kill(victim)
          workers.splice(workers.indexOf(victim), 1)
          await start()
        }
      }
      producing = false
      await producer
      await Promise.all(thaws)

      // drain: the survivors finish everything, lapsed claims included
      const stats = () => runtime.runPromise(queue.stats)
      await waitUntil("the queue to drain", async () => {
        const s = await stats()
        return s.pending + s.scheduled + s.claimed === 0
      }, 60_000).catch((error: unknown) => unexpected.push(String(error)))
      stopping = true
      for (const child of everyone) kill(child)
      await Promise.all(everyone.map((c) => c.exit))

      const finalStats = await stats()
      const dead = await runtime.runPromise(queue.dead({ limit: 100_000 }))
      const check = await runtime.runPromise(integrity(target))
      const result = checkCrashLedger(readLedger<CrashRecord>(ledgerFile), dead)
      const violations = [...unexpected, ...result.violations]
      if (finalStats.pending + finalStats.scheduled + finalStats.claimed !== 0) {
        violations.push(`left in the queue: ${JSON.stringify(finalStats)}`)
      }
      if (check !== "ok") violations.push(`integrity_check: ${check}`)
      if (kills === 0 || freezes === 0) violations.push(`too short to test anything: ${kills} kills, ${freezes} freezes`)
      return {
        facts: { workers: width, spawned, kills, freezes, ...result.facts, integrity: check },
        violations
      }
    } finally {
      stopping = true
      for (const child of everyone) kill(child)
      ledger.close()
      await runtime.dispose()
    }
  }
}
