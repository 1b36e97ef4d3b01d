/**
 * Model-based test: random sequences of queue operations run against the
 * engine under `TestClock` and against the in-memory model of the contract
 * (queue-model.ts); after every step each job's state, attempts, run-at and
 * lease, and the queue's counts, agree. On every engine of the harness.
 */
import { describe, expect, it } from "@effect/vitest"
import { fc } from "@fast-check/vitest"
import { Clock, DateTime, Effect, Option, Runtime, TestClock } from "effect"
import { Queues } from "../../src/index.js"
import { engines } from "../contract/harness.js"
import { type EnqueueSpec, type Fence, QueueModel, visibilityMs, backoffBaseMs } from "./queue-model.js"
import { fcParams } from "./settings.js"

type Op =
  | { readonly t: "enqueue"; readonly spec: EnqueueSpec }
  | { readonly t: "claim" }
  | { readonly t: "ack" | "fail" | "heartbeat" | "release"; readonly h: number }
  | { readonly t: "retry"; readonly h: number; readonly delayMs: number | null }
  | { readonly t: "cancel" | "requeueDead"; readonly j: number }
  | { readonly t: "advance"; readonly ms: number }

const spec: fc.Arbitrary<EnqueueSpec> = fc.record({
  priority: fc.integer({ min: -1, max: 1 }),
  delayMs: fc.constantFrom(0, 0, 500, 3_000),
  maxAttempts: fc.integer({ min: 1, max: 3 }),
  expiresMs: fc.constantFrom(null, null, 1_500, 6_000),
  key: fc.constantFrom(null, null, "a", "b")
})

const op: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.record({ t: fc.constant("enqueue" as const), spec }), weight: 4 },
  { arbitrary: fc.constant({ t: "claim" as const }), weight: 4 },
  { arbitrary: fc.record({ t: fc.constantFrom("ack" as const, "fail" as const, "heartbeat" as const, "release" as const), h: fc.nat(9) }), weight: 4 },
  { arbitrary: fc.record({ t: fc.constant("retry" as const), h: fc.nat(9), delayMs: fc.constantFrom(null, 1, 2_500) }), weight: 2 },
  { arbitrary: fc.record({ t: fc.constantFrom("cancel" as const, "requeueDead" as const), j: fc.nat(19) }), weight: 1 },
  { arbitrary: fc.record({ t: fc.constant("advance" as const), ms: fc.constantFrom(1, 400, 1_000, 2_000, 5_000) }), weight: 3 }
)

interface Claim {
  readonly handle: Queues.JobHandle<unknown>
  readonly fence: Fence
  readonly attemptsAtClaim: number
  readonly maxAttempts: number
}

let runs = 0

const execute = (ops: ReadonlyArray<Op>) =>
  Effect.gen(function*() {
    const queue = yield* (yield* Queues.Queues).queue(`model-${++runs}`, {
      visibilityTimeout: visibilityMs,
      backoffBase: backoffBaseMs
    })
    const model = new QueueModel()
    const claims: Array<Claim> = []
    const ids: Array<number> = []
    const steps: Array<string> = []
    const pick = <A>(items: ReadonlyArray<A>, i: number) => (items.length === 0 ? undefined : items[i % items.length])

    for (const step of ops) {
      const now = yield* Clock.currentTimeMillis
      steps.push(JSON.stringify(step))
      const where = () => `after ${steps.join(" → ")}`
      switch (step.t) {
        case "enqueue": {
          const s = step.spec
          const expected = model.enqueue(s, now)
          const enqueued = yield* Effect.either(queue.enqueue({ step: steps.length }, {
            priority: s.priority,
            maxAttempts: s.maxAttempts,
            ...(s.delayMs > 0 ? { delay: s.delayMs } : {}),
            ...(s.expiresMs !== null ? { expires: s.expiresMs } : {}),
            ...(s.key !== null ? { key: s.key } : {})
          }))
          if (expected !== undefined && "invalid" in expected) {
            expect(enqueued, `refused ${where()}`).toMatchObject({ _tag: "Left", left: { _tag: "InvalidOptions", field: expected.invalid } })
            break
          }
          expect(enqueued._tag, `enqueue ${where()}`).toBe("Right")
          const id = (enqueued as { right: number }).right
          if (expected !== undefined) expect(id, `keyed enqueue returns the live holder ${where()}`).toBe(expected.existing)
          else {
            expect(ids, `a new id ${where()}`).not.toContain(id)
            model.insert(id, s, now)
            ids.push(id)
          }
          break
        }
        case "claim": {
          const expected = model.claim(now)
          const claimed = yield* queue.claim("w")
          expect(Option.map(claimed, (h) => h.job.id), `claim ${where()}`).toEqual(Option.fromNullable(expected?.id))
          if (Option.isSome(claimed) && expected !== undefined) {
            const job = claimed.value.job
            claims.push({
              handle: claimed.value,
              fence: { id: job.id, token: expected.token },
              attemptsAtClaim: job.attempts,
              maxAttempts: job.maxAttempts
            })
          }
          break
        }
        case "ack":
        case "fail":
        case "heartbeat":
        case "release": {
          const c = pick(claims, step.h)
          if (c === undefined) break
          const got = step.t === "ack"
            ? yield* c.handle.ack
            : step.t === "fail"
            ? yield* c.handle.fail("model fail")
            : step.t === "heartbeat"
            ? yield* c.handle.heartbeat()
            : yield* c.handle.release
          const want = step.t === "ack"
            ? model.ack(c.fence)
            : step.t === "fail"
            ? model.fail(c.fence)
            : step.t === "heartbeat"
            ? model.heartbeat(c.fence, now)
            : model.release(c.fence)
          expect(got, `${step.t} ${where()}`).toBe(want)
          break
        }
        case "retry": {
          const c = pick(claims, step.h)
          if (c === undefined) break
          const got = yield* c.handle.retry("model retry", step.delayMs ?? undefined)
          expect(got, `retry ${where()}`).toBe(model.retry(c.fence, c.attemptsAtClaim, c.maxAttempts, step.delayMs, now))
          break
        }
        case "cancel":
        case "requeueDead": {
          const id = pick(ids, step.j)
          if (id === undefined) break
          const got = step.t === "cancel" ? yield* queue.cancel(id) : yield* queue.requeueDead(id)
          const want = step.t === "cancel" ? model.cancel(id) : model.requeueDead(id, now)
          expect(got, `${step.t} ${where()}`).toBe(want)
          break
        }
        case "advance":
          yield* TestClock.adjust(step.ms)
          break
      }
      // every job agrees, and so do the counts
      for (const id of ids) {
        const stored = yield* queue.getJob(id)
        const modelled = model.jobs.get(id)
        expect(Option.isSome(stored), `job ${id} exists ${where()}`).toBe(modelled !== undefined)
        if (Option.isNone(stored) || modelled === undefined) continue
        const job = stored.value
        expect({
          state: job.state,
          attempts: job.attempts,
          runAt: DateTime.toEpochMillis(job.runAt),
          claimedUntil: Option.getOrNull(Option.map(job.claimedUntil, DateTime.toEpochMillis))
        }, `job ${id} ${where()}`).toEqual({
          state: modelled.state,
          attempts: modelled.attempts,
          runAt: modelled.runAt,
          claimedUntil: modelled.claimedUntil
        })
      }
      const stats = yield* queue.stats
      const counts = model.counts()
      expect({ waiting: stats.pending + stats.scheduled, claimed: stats.claimed, dead: stats.dead }, `stats ${where()}`)
        .toEqual(counts)
    }
  })

/**
 * Found by a random run: a keyed enqueue meeting a holder whose lease lapsed on its last attempt buries it and
 * writes a new job (`keyHolderGone` in each engine's queueStatements.ts); the model returned the holder.
 */
const lapsedLastAttemptHolder: ReadonlyArray<Op> = [
  { t: "enqueue", spec: { priority: 0, delayMs: 0, maxAttempts: 1, expiresMs: null, key: "a" } },
  { t: "claim" },
  { t: "advance", ms: 2000 },
  { t: "enqueue", spec: { priority: 0, delayMs: 0, maxAttempts: 1, expiresMs: null, key: "a" } }
]

for (const engine of engines) {
  describe(`queue operations against the contract's model — ${engine.name}`, () => {
    it.effect("random sequences of enqueue, claim, ack, retry, fail, heartbeat, release, cancel, requeue and time", () =>
      Effect.gen(function*() {
        const run = Runtime.runPromise(yield* Effect.runtime<Queues.Queues>())
        yield* Effect.promise(() =>
          fc.assert(
            fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 40 }), (ops) => run(execute(ops))),
            { ...fcParams(150), examples: [[lapsedLastAttemptHolder]] }
          )
        )
      }).pipe(Effect.provide(engine.store())), 120_000)
  })
}
