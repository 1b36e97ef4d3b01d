/**
 * Handles review (docs/contract.md §3, docs/decisions.md "Automatic heartbeat"): job handles and leases under
 * `process(..., { heartbeat: true })`, on every engine. Time is the TestClock.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Option } from "effect"
import { engines } from "./contract/harness.js"
import { failing } from "./contract/faults.js"
import { advance, optionalMs, queueOf } from "./contract/support.js"
import { settle } from "./contract/workers.js"

for (const engine of engines) {
  describe(`handles review — ${engine.name}`, () => {
    // docs/contract.md §3, Workers: "with `heartbeat: true` each claim's lease is **extended** every third of its
    // visibility timeout (at most a day apart) while its handler runs"; docs/decisions.md, "Automatic heartbeat":
    // "`process(..., { heartbeat: true })` extends each claim every third of its visibility timeout"; the handle
    // table: "`heartbeat(extend?)` | `true`: lease pushed to `now + (extend ?? visibilityTimeout)`".
    // Careful-user expectation: a handler that knows its work is long asks for more with `handle.heartbeat("1 hour")`;
    // the worker's automatic beat only ever extends a lease, it never takes back time the handler was given.
    // Observed: the first automatic beat (at 10 s) moves the lease end from 1 h back to 40 s (now + 30 s). From
    // then on the job is only as safe as the next beat: a storage hiccup of half a minute (beats at 20, 30 and
    // 40 s fail with a SqlError, which the worker logs and shrugs off) lets the lease lapse at 40 s, and another
    // worker takes the job while the first handler still runs — though the handler had asked for an hour, and
    // without `heartbeat: true` its own extension would have kept the job safe.
    it.effect("process with heartbeat: the automatic beat does not shorten a lease the handler extended", () =>
      Effect.gen(function*() {
        const queue = yield* queueOf("extended", { visibilityTimeout: "30 seconds" })
        const id = yield* queue.enqueue({ n: 1 })
        const leaseEnd = Effect.map(queue.getJob(id), (job) => optionalMs(Option.getOrThrow(job).claimedUntil))
        const worker = yield* Effect.forkDaemon(queue.process("w1", (_job, handle) =>
          Effect.zipRight(handle.heartbeat("1 hour"), Effect.sleep("5 minutes")), { heartbeat: true }))
        yield* settle
        const extendedTo = yield* leaseEnd
        expect(extendedTo).toBe(3_600_000)
        yield* advance("10 seconds") // the first automatic beat
        yield* settle
        const afterFirstBeat = yield* leaseEnd
        // a storage hiccup from 15 s to 41 s: the beats at 20, 30 and 40 s fail (logged, the handler goes on)
        yield* advance("5 seconds")
        const fault = failing("__alkstore_jobs", "UPDATE")
        yield* fault.start
        yield* advance("26 seconds")
        yield* settle
        yield* fault.stop
        // 41 s: another worker looks for work while w1's handler still runs on the job it extended to 1 h
        const takenOver = Option.isSome(yield* queue.claim("w2"))
        expect({ afterFirstBeat, takenOver }).toEqual({ afterFirstBeat: extendedTo, takenOver: false })
        yield* Fiber.interrupt(worker)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))), 30_000)
  })
}
