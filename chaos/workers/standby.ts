/**
 * A fleet member of the scheduler check (chaos/checks/scheduler.ts): runs
 * `runAsStandby` until killed, with a short leadership lease. It first
 * prints `{ "instance" }`: the store instance's default lock owner (read
 * from a probe lock acquired without an explicit owner), which prefixes the
 * owner of every scheduler runner this store starts, so the driver can map
 * the leadership row to a process.
 *
 * argv: target (JSON), leaderTtl (ms), leaderRenewEvery (ms)
 */
import { Effect, Option } from "effect"
import { Locks, Scheduler } from "../../src/index.js"
import { openStore, parseTarget } from "../engine.js"

const [targetArg, ttlArg, renewArg] = process.argv.slice(2)

const program = Effect.gen(function*() {
  const locks = yield* Locks.Locks
  const probe = Option.getOrThrow(yield* locks.acquire(`whoami-${process.pid}`, { ttl: "1 second" }))
  yield* probe.release
  process.stdout.write(`${JSON.stringify({ instance: probe.owner })}\n`)
  return yield* (yield* Scheduler.Scheduler).runAsStandby
}).pipe(
  Effect.provide(openStore(parseTarget(targetArg), { leaderTtl: Number(ttlArg), leaderRenewEvery: Number(renewArg) }))
)

Effect.runPromise(program).catch((error: unknown) => {
  process.stderr.write(`standby ${process.pid} failed: ${String(error)}\n`)
  process.exit(1)
})
