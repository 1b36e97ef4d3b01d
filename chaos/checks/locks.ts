/**
 * Lock chaos (issue 11, item 3): contender processes take one lock with
 * `withLock` and `acquire` while this driver SIGKILLs holders (starting a
 * replacement) and freezes them past their TTL (SIGSTOP, then SIGCONT).
 * `locks-ledger.ts` proves the guarantees from the ledger; the resource's
 * final row must agree with the accepted writes.
 */
import { ManagedRuntime } from "effect"
import { createTarget, openStore, scratch } from "../engine.js"
import type { Check } from "../lib/check.js"
import { openLedger, readLedger } from "../lib/ledger.js"
import { type Child, describeExit, freeze, kill, sleep, spawnWorker, thaw, waitUntil } from "../lib/procs.js"
import { createResource, readResource } from "../lib/resource.js"
import { faultDeck } from "../lib/faultDeck.js"
import { makeRng } from "../lib/rng.js"
import { checkLockLedger, type LockRecord } from "./locks-ledger.js"

const ttlMs = 1_000

export const locks: Check = {
  name: "locks",
  engines: ["sqlite", "pg"],
  run: async (config) => {
    const rng = makeRng(config.seed)
    const durationMs = config.short ? 8_000 : 45_000
    const width = 4
    const target = createTarget(config.engine, "locks")
    const ledgerFile = scratch("locks.ledger")
    const ledger = openLedger(ledgerFile)
    const runtime = ManagedRuntime.make(openStore(target))
    const unexpected: Array<string> = []
    const contenders: Array<Child> = []
    let stopping = false
    const start = async () => {
      const child = await spawnWorker("lock-worker", [JSON.stringify(target), ledgerFile, String(rng.fork()), String(ttlMs)])
      contenders.push(child)
      void child.exit.then((code) => {
        if (!child.killed && !stopping) unexpected.push(`contender exited by itself (code ${code}) ${describeExit(child)}`)
      })
    }
    /** The pid whose tenure is in progress, by the ledger. */
    const holder = () => {
      let pid: number | undefined
      for (const r of readLedger<LockRecord>(ledgerFile)) {
        if (r.e === "acq") pid = r.pid
        else if (r.e === "end" && r.pid === pid) pid = undefined
      }
      return contenders.find((c) => c.pid === pid && !c.exited && !c.frozen)
    }
    try {
      await runtime.runPromise(createResource)
      for (let i = 0; i < width; i++) await start()
      const ready = () => readLedger<LockRecord>(ledgerFile).filter((r) => r.e === "ready").length
      await waitUntil("the contenders to start", () => ready() >= width, 30_000)
      let kills = 0
      let freezes = 0
      const nextFault = faultDeck(rng, { kill: 0.5, freeze: 0.5 })
      const until = Date.now() + durationMs
      while (Date.now() < until) {
        await sleep(rng.int(300, 900))
        const victim = holder()
        if (victim === undefined) continue
        if (nextFault() === "kill") {
          kills++
          ledger.append({ e: "kill", target: victim.pid })
          kill(victim)
          contenders.splice(contenders.indexOf(victim), 1)
          await start()
        } else {
          freezes++
          ledger.append({ e: "freeze", target: victim.pid })
          freeze(victim)
          await sleep(ttlMs + rng.int(300, 1_000))
          ledger.append({ e: "thaw", target: victim.pid })
          thaw(victim)
        }
      }
      await sleep(500) // the last woken holder's late writes
      stopping = true
      for (const c of contenders) kill(c)
      await Promise.all(contenders.map((c) => c.exit))

      const result = checkLockLedger(readLedger<LockRecord>(ledgerFile))
      const resource = await runtime.runPromise(readResource)
      const violations = [...unexpected, ...result.violations]
      // every accepted write counted, and at most the writes cut off before their record besides
      if (resource.writes < result.accepted || resource.writes > result.accepted + result.unrecorded) {
        violations.push(
          `resource counted ${resource.writes} writes, the ledger ${result.accepted} accepted (+ ${result.unrecorded} cut off)`
        )
      }
      if (kills === 0 || freezes === 0) violations.push(`too short: ${kills} kills, ${freezes} freezes`)
      return { facts: { contenders: width, kills, freezes, ...result.facts, resourceToken: resource.token }, violations }
    } finally {
      stopping = true
      for (const c of contenders) kill(c)
      ledger.close()
      await runtime.dispose()
    }
  }
}
