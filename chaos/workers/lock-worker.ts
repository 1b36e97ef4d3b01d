/**
 * A contender of the lock check (chaos/checks/locks.ts): forever takes the
 * lock `res`, alternating (by seed) `withLock` and `acquire` + `renew` +
 * `release`, and writes to a token-checking resource during each tenure.
 * Ledger records: `acq` (token, start), `proof` (an instant the tenure
 * provably held: before a successful renew, or inside `withLock`),
 * `write` (token, accepted) and `end` (how the tenure ended).
 *
 * argv: target (JSON), ledger file, seed, ttl (ms)
 */
import { Effect, Option } from "effect"
import { Locks } from "../../src/index.js"
import { lockRow, openStore, parseTarget } from "../engine.js"
import { openLedger } from "../lib/ledger.js"
import { fencedWrite } from "../lib/resource.js"
import { makeRng } from "../lib/rng.js"

const [targetArg, ledgerFile, seedArg, ttlArg] = process.argv.slice(2)
const ledger = openLedger(ledgerFile!)
const rng = makeRng(Number(seedArg))
const ttl = Number(ttlArg)
const name = "res"

/** `before`: when the write began, so the checker compares it with what had committed by then. */
const write = (token: number) =>
  Effect.suspend(() => {
    const before = Date.now()
    // recorded first: a kill between the write's commit and its `write` record leaves this behind
    ledger.append({ e: "writing", token })
    return Effect.tap(fencedWrite(token), (ok) => Effect.sync(() => ledger.append({ e: "write", token, ok, before })))
  })

const hold = (ms: number) => Effect.sleep(ms)

const viaWithLock = (locks: Locks.LocksShape) =>
  locks.withLock(
    name,
    ttl,
    Effect.gen(function*() {
      const row = yield* lockRow(name)
      const token = row!.token
      const start = Date.now()
      yield* write(token)
      ledger.append({ e: "acq", token, start, via: "withLock" })
      for (let i = rng.int(1, 4); i > 0; i--) {
        yield* hold(rng.int(20, 150))
        ledger.append({ e: "proof", token, t: Date.now() })
        yield* write(token)
      }
      return token
    })
  ).pipe(
    Effect.tap((token) => Effect.sync(() => ledger.append({ e: "end", token, how: "released" }))),
    Effect.catchTag("LockLost", () => Effect.sync(() => ledger.append({ e: "end", how: "lost" }))),
    Effect.catchTag("LockUnavailable", () => Effect.sleep(rng.int(2, 20)))
  )

let tenures = 0
const viaAcquire = (locks: Locks.LocksShape) =>
  Effect.gen(function*() {
    const handle = yield* locks.acquire(name, { ttl, owner: `${process.pid}-${++tenures}` })
    if (Option.isNone(handle)) return yield* Effect.sleep(rng.int(2, 20))
    const { token } = handle.value
    const start = Date.now()
    yield* write(token)
    ledger.append({ e: "acq", token, start, via: "acquire" })
    for (let i = rng.int(1, 4); i > 0; i--) {
      yield* hold(rng.int(20, 150))
      const before = Date.now()
      if (!(yield* handle.value.renew())) {
        ledger.append({ e: "end", token, how: "lost" })
        // the late write: a holder that lost its lease tries anyway; the resource must refuse
        yield* write(token)
        return
      }
      ledger.append({ e: "proof", token, t: before })
      yield* write(token)
    }
    ledger.append({ e: "end", token, how: (yield* handle.value.release) ? "released" : "lost" })
  })

const program = Effect.gen(function*() {
  const locks = yield* Locks.Locks
  ledger.append({ e: "ready" })
  while (true) yield* (rng.chance(0.5) ? viaWithLock(locks) : viaAcquire(locks))
})

Effect.runPromise(Effect.provide(program, openStore(parseTarget(targetArg)))).catch((error: unknown) => {
  process.stderr.write(`lock worker failed: ${String(error)}\n`)
  process.exit(1)
})
