/**
 * The handler the crash check's and the PostgreSQL faults check's workers
 * run: it writes a fsync'd ledger record at each step — `start` (the claim's
 * token and lease end, the payload's `n`), `done` before it returns, `fail`
 * for a poison job, and, for the jobs whose payload asks for it, `ack` with
 * its own ack's result (so a frozen worker's late ack shows whether it
 * reported loss) or `ackFailed` when that ack failed (the handler then
 * fails, and `process` gives the claim back for a retry).
 */
import { Clock, DateTime, Effect, Option } from "effect"
import type { Queues } from "../../src/index.js"
import type { Ledger } from "./ledger.js"
import type { Rng } from "./rng.js"

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

export const crashHandler = (ledger: Ledger, rng: Rng, workerId: string) =>
(job: Queues.Job<unknown>, handle: Queues.JobHandle<unknown>) =>
  Effect.gen(function*() {
    const payload = job.payload as CrashPayload
    const token = tokenOf(handle)
    const until = DateTime.toEpochMillis(Option.getOrThrow(job.claimedUntil))
    const clockAt = yield* Clock.currentTimeMillis // the store's clock, which wrote `until`
    ledger.append({
      e: "start",
      job: job.id,
      n: payload.n,
      worker: workerId,
      token,
      until,
      clockAt,
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
      const ok = yield* Effect.tapError(handle.ack, () => Effect.sync(() => ledger.append({ e: "ackFailed", job: job.id, token })))
      ledger.append({ e: "ack", job: job.id, token, ok })
    }
  })
