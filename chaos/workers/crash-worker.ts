/**
 * A worker of the crash check (chaos/checks/crash.ts): runs `process` on the
 * shared queue until the driver kills it, writing a fsync'd ledger record at
 * each step of each handler run: `start` (with the claim's token and lease
 * end), `done` before the handler returns, and, for the jobs whose payload
 * asks for it, `ack` with the handler's own ack result (so a frozen worker's
 * late ack shows whether it reported loss).
 *
 * argv: target (JSON), ledger file, worker id, seed, concurrency, visibility timeout (ms)
 */
import { DateTime, Effect, Option } from "effect"
import { Queues } from "../../src/index.js"
import { openStore, parseTarget } from "../engine.js"
import { openLedger } from "../lib/ledger.js"
import { makeRng } from "../lib/rng.js"

const [targetArg, ledgerFile, workerId, seedArg, concurrencyArg, vtArg] = process.argv.slice(2)
const target = parseTarget(targetArg)
const ledger = openLedger(ledgerFile!)
const rng = makeRng(Number(seedArg))

export interface CrashPayload {
  readonly n: number
  readonly workMs: number
  readonly poison: boolean
  readonly selfAck: boolean
}

/** The claim's fencing token: the engine-free handle keeps it as its fence. */
const tokenOf = (handle: unknown): number => {
  const fence = (handle as { readonly fence?: { readonly token?: unknown } }).fence
  if (typeof fence?.token !== "number") throw new Error("handle carries no fence token")
  return fence.token
}

const program = Effect.gen(function*() {
  const queue = yield* (yield* Queues.Queues).queue("chaos", { visibilityTimeout: Number(vtArg) })
  ledger.append({ e: "ready", worker: workerId })
  return yield* queue.process(
    workerId!,
    (job, handle) =>
      Effect.gen(function*() {
        const payload = job.payload as CrashPayload
        const token = tokenOf(handle)
        const until = DateTime.toEpochMillis(Option.getOrThrow(job.claimedUntil))
        ledger.append({
          e: "start",
          job: job.id,
          worker: workerId,
          token,
          until,
          attempt: job.attempts,
          selfAck: payload.selfAck
        })
        yield* Effect.sleep(payload.workMs + rng.int(0, 5))
        if (payload.poison) {
          ledger.append({ e: "fail", job: job.id, token })
          return yield* Effect.fail("poison job: fails on purpose")
        }
        ledger.append({ e: "done", job: job.id, token })
        if (payload.selfAck) {
          const ok = yield* handle.ack
          ledger.append({ e: "ack", job: job.id, token, ok })
        }
      }),
    { concurrency: Number(concurrencyArg) }
  )
})

Effect.runPromise(Effect.provide(program, openStore(target))).catch((error: unknown) => {
  process.stderr.write(`crash worker ${workerId} failed: ${String(error)}\n`)
  process.exit(1)
})
