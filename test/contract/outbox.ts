/**
 * The outbox contract (CONTRACT §6), written once and applied to every
 * engine. Time is the TestClock (epoch 0 at the start of each test).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Data, DateTime, Duration, Effect, Exit, Fiber, Option, Queue, TestClock } from "effect"
import { Outbox, Queues } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"
import { countRows } from "./scheduler.js"
import { eventually, settle, advance } from "./support.js"

const second = 1_000
const ms = (instant: DateTime.DateTime) => DateTime.toEpochMillis(instant)

class DeliveryFailed extends Data.TaggedError("DeliveryFailed")<{ readonly status: number }> {}

/** The rows of an outbox's backing queue. */
const backingRows = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ id: number; state: string }>`SELECT id, state FROM __alkstore_jobs WHERE queue = ${`__alkstore_outbox:${name}`} ORDER BY id`)

const webhooks = Effect.flatMap(Outbox.Outbox, (outboxes) => outboxes.outbox("webhooks"))

export const outboxContract = (engine: EngineUnderTest) =>
  describe(`outbox — ${engine.name}`, () => {
    it.effect("outbox names are validated; the backing queue is unreachable through Queues", () =>
      Effect.gen(function*() {
        const outboxes = yield* Outbox.Outbox
        expect(yield* Effect.flip(outboxes.outbox(""))).toMatchObject({ _tag: "InvalidName", name: "" })
        expect(yield* Effect.flip(outboxes.outbox("__alkstore_x"))).toMatchObject({
          _tag: "ReservedName",
          name: "__alkstore_x"
        })
        const queues = yield* Queues.Queues
        expect(yield* Effect.flip(queues.queue("__alkstore_outbox:webhooks"))).toMatchObject({
          _tag: "ReservedName",
          name: "__alkstore_outbox:webhooks"
        })

        const box = yield* outboxes.outbox("webhooks")
        expect(box.name).toBe("webhooks")
        const id = yield* box.enqueue({ url: "https://example.com/hook" })
        const rows = yield* backingRows("webhooks")
        expect(rows.map((row) => Number(row.id))).toEqual([id])
        // a plain queue of the same (unprefixed) name is a different queue
        const plain = yield* queues.queue("webhooks")
        expect(Option.isNone(yield* plain.getJob(id))).toBe(true)
        expect(Option.isNone(yield* plain.claim("w"))).toBe(true)
        expect((yield* box.stats).pending).toBe(1)
      }).pipe(Effect.provide(engine.store())))

    it.effect("enqueue stamps 60 s / 5 / 5 s; EnqueueOpts apply over them", () =>
      Effect.gen(function*() {
        const box = yield* webhooks
        yield* advance("10 seconds")
        const plain = Option.getOrThrow(yield* box.getJob(yield* box.enqueue({ n: 1 })))
        expect(Duration.toMillis(plain.visibilityTimeout)).toBe(60 * second)
        expect(plain.maxAttempts).toBe(5)
        expect(Duration.toMillis(plain.backoffBase)).toBe(5 * second)
        expect(Option.isNone(plain.expiresAt)).toBe(true)
        expect(plain.priority).toBe(0)
        expect(ms(plain.runAt)).toBe(10 * second)
        expect(plain.queue).toBe("__alkstore_outbox:webhooks")

        const custom = Option.getOrThrow(
          yield* box.getJob(
            yield* box.enqueue({ n: 2 }, { maxAttempts: 2, priority: 3, delay: "5 seconds", expires: "1 minute" })
          )
        )
        expect(custom.maxAttempts).toBe(2)
        expect(custom.priority).toBe(3)
        expect(ms(custom.runAt)).toBe(15 * second)
        expect(Option.map(custom.expiresAt, ms)).toEqual(Option.some(70 * second))
        expect(Duration.toMillis(custom.visibilityTimeout)).toBe(60 * second)

        // invalid options and payloads write nothing
        expect(yield* Effect.flip(box.enqueue({ n: 3 }, { maxAttempts: 0 }))).toMatchObject({
          _tag: "InvalidOptions",
          field: "maxAttempts"
        })
        expect((yield* Effect.flip(box.enqueue({ when: new Date(0) })))._tag).toBe("InvalidPayload")
        expect((yield* backingRows("webhooks")).length).toBe(2)
      }).pipe(Effect.provide(engine.store())))

    it.effect("an outbox handle's options override the outbox defaults for what it enqueues", () =>
      Effect.gen(function*() {
        const outboxes = yield* Outbox.Outbox
        const fast = yield* outboxes.outbox("fast", { backoffBase: "500 millis", maxAttempts: 2, visibilityTimeout: "10 seconds" })
        const job = Option.getOrThrow(yield* fast.getJob(yield* fast.enqueue({ n: 1 })))
        expect(Duration.toMillis(job.backoffBase)).toBe(500)
        expect(job.maxAttempts).toBe(2)
        expect(Duration.toMillis(job.visibilityTimeout)).toBe(10 * second)
        expect(yield* Effect.flip(outboxes.outbox("bad", { visibilityTimeout: -1 }))).toMatchObject({
          _tag: "InvalidOptions",
          field: "visibilityTimeout"
        })
        expect((yield* backingRows("bad")).length).toBe(0)
      }).pipe(Effect.provide(engine.store())))

    it.effect("enqueue joins the application's transaction: a rollback leaves no job, a commit leaves one", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const box = yield* webhooks
        yield* sql`CREATE TABLE orders (item TEXT NOT NULL)`

        const failed = yield* Effect.flip(sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO orders (item) VALUES (${"lost"})`
          yield* box.enqueue({ order: "lost" })
          return yield* Effect.fail("payment declined" as const)
        })))
        expect(failed).toBe("payment declined")
        expect(yield* countRows("orders")).toBe(0)
        expect(yield* backingRows("webhooks")).toEqual([])
        expect((yield* box.stats).pending).toBe(0)

        yield* sql.withTransaction(Effect.gen(function*() {
          yield* sql`INSERT INTO orders (item) VALUES (${"kept"})`
          yield* box.enqueue({ order: "kept" })
        }))
        expect(yield* countRows("orders")).toBe(1)
        expect((yield* backingRows("webhooks")).length).toBe(1)
        const delivered: Array<unknown> = []
        expect(yield* box.runOnce("w", (job) => Effect.sync(() => delivered.push(job.payload)))).toBe(true)
        expect(delivered).toEqual([{ order: "kept" }])
      }).pipe(Effect.provide(engine.store())))

    it.effect("runOnce: success acks (the row is gone) and returns true; an empty outbox returns false", () =>
      Effect.gen(function*() {
        const box = yield* webhooks
        expect(yield* box.runOnce("w", () => Effect.void)).toBe(false)
        const id = yield* box.enqueue({ event: "created" })
        const seen: Array<{ payload: unknown; attempts: number; workerId: Option.Option<string> }> = []
        const ran = yield* box.runOnce("worker-1", (job, handle) =>
          Effect.gen(function*() {
            seen.push({ payload: job.payload, attempts: job.attempts, workerId: job.workerId })
            expect(handle.job.id).toBe(id)
            // the handle is the deliverer's own renewal path
            expect(yield* handle.heartbeat("2 minutes")).toBe(true)
          }))
        expect(ran).toBe(true)
        expect(seen).toEqual([{ payload: { event: "created" }, attempts: 1, workerId: Option.some("worker-1") }])
        expect(Option.isNone(yield* box.getJob(id))).toBe(true)
        expect(yield* backingRows("webhooks")).toEqual([])
        const stats = yield* box.stats
        expect([stats.pending, stats.scheduled, stats.claimed, stats.dead]).toEqual([0, 0, 0, 0])
        expect(yield* box.runOnce("worker-1", () => Effect.void)).toBe(false)
        expect((yield* Effect.flip(box.runOnce("", () => Effect.void)))._tag).toBe("InvalidOptions")
      }).pipe(Effect.provide(engine.store())))

    it.effect("runOnce: a failure is retried on the curve with the error's message as last error", () =>
      Effect.gen(function*() {
        const box = yield* webhooks
        const id = yield* box.enqueue({ event: "x" })
        const ran = yield* box.runOnce("w", () => Effect.fail(new Error("smtp down")))
        expect(ran).toBe(true)
        const first = Option.getOrThrow(yield* box.getJob(id))
        expect(first.state).toBe("pending")
        expect(first.attempts).toBe(1)
        expect(ms(first.runAt)).toBe(5 * second)
        expect(first.lastError).toEqual(Option.some("smtp down"))
        // not due before the delay
        expect(yield* box.runOnce("w", () => Effect.void)).toBe(false)
        yield* advance("4999 millis")
        expect(yield* box.runOnce("w", () => Effect.void)).toBe(false)
        yield* advance("1 millis")

        // a tagged error without a message: its tag and fields
        expect(yield* box.runOnce("w", () => Effect.fail(new DeliveryFailed({ status: 503 })))).toBe(true)
        const second_ = Option.getOrThrow(yield* box.getJob(id))
        expect(second_.attempts).toBe(2)
        expect(ms(second_.runAt)).toBe(5 * second + 10 * second)
        expect(second_.lastError).toEqual(Option.some(`DeliveryFailed {"status":503}`))

        yield* advance("10 seconds")
        expect(yield* box.runOnce("w", () => Effect.fail("plain string"))).toBe(true)
        const third = Option.getOrThrow(yield* box.getJob(id))
        expect(ms(third.runAt)).toBe(15 * second + 20 * second)
        expect(third.lastError).toEqual(Option.some("plain string"))
      }).pipe(Effect.provide(engine.store())))

    it.effect("runOnce: a defect is retried too, with the pretty cause, and the runner survives", () =>
      Effect.gen(function*() {
        const box = yield* webhooks
        const id = yield* box.enqueue({ event: "x" })
        const ran = yield* box.runOnce("w", () => Effect.die(new Error("kaboom")))
        expect(ran).toBe(true)
        const job = Option.getOrThrow(yield* box.getJob(id))
        expect(job.state).toBe("pending")
        expect(job.attempts).toBe(1)
        expect(ms(job.runAt)).toBe(5 * second)
        const lastError = Option.getOrThrow(job.lastError)
        expect(lastError).toContain("kaboom")

        // a thrown exception inside the delivery is a defect as well
        yield* advance("5 seconds")
        const thrown = yield* box.runOnce("w", () =>
          Effect.sync(() => {
            throw new Error("thrown inside")
          }))
        expect(thrown).toBe(true)
        const again = Option.getOrThrow(yield* box.getJob(id))
        expect(again.attempts).toBe(2)
        expect(Option.getOrThrow(again.lastError)).toContain("thrown inside")
        expect(ms(again.runAt)).toBe(15 * second)
      }).pipe(Effect.provide(engine.store())))

    it.effect("runOnce: after its attempts (5 by default) a delivery is dead with the last error", () =>
      Effect.gen(function*() {
        const box = yield* webhooks
        const id = yield* box.enqueue({ event: "x" })
        const delays: Array<number> = []
        for (let attempt = 1; attempt <= 5; attempt++) {
          const before = Option.getOrThrow(yield* box.getJob(id))
          const now = ms(before.runAt)
          yield* TestClock.setTime(now)
          expect(yield* box.runOnce("w", () => Effect.fail(new Error(`failure #${attempt}`)))).toBe(true)
          const after = Option.getOrThrow(yield* box.getJob(id))
          if (attempt < 5) {
            expect(after.state).toBe("pending")
            delays.push(ms(after.runAt) - now)
          } else {
            expect(after.state).toBe("dead")
            expect(after.lastError).toEqual(Option.some("failure #5"))
            expect(after.attempts).toBe(5)
            expect(Option.map(after.diedAt, ms)).toEqual(Option.some(now))
          }
        }
        expect(delays).toEqual([5 * second, 10 * second, 20 * second, 40 * second])
        expect(yield* box.runOnce("w", () => Effect.void)).toBe(false)
        const dead = yield* box.dead()
        expect(dead.map((job) => job.id)).toEqual([id])
        expect((yield* box.stats).dead).toBe(1)

        // repair: requeue, deliver, purge
        expect(yield* box.requeueDead(id)).toBe(true)
        expect(yield* box.runOnce("w", () => Effect.void)).toBe(true)
        expect(yield* countRows("__alkstore_jobs")).toBe(0)

        // a maxAttempts override exhausts sooner
        const once = yield* box.enqueue({ event: "y" }, { maxAttempts: 1 })
        expect(yield* box.runOnce("w", () => Effect.fail(new Error("only try")))).toBe(true)
        const buried = Option.getOrThrow(yield* box.getJob(once))
        expect(buried.state).toBe("dead")
        expect(buried.lastError).toEqual(Option.some("only try"))
        expect(yield* box.purgeDead()).toBe(1)
      }).pipe(Effect.provide(engine.store())))

    it.effect("run delivers continuously with the given concurrency until interrupted", () =>
      Effect.gen(function*() {
        const box = yield* webhooks
        const delivered = yield* Queue.unbounded<unknown>()
        const runner = yield* Effect.fork(
          box.run("runner", (job) => Effect.asVoid(Queue.offer(delivered, job.payload)), { concurrency: 2 })
        )
        yield* settle
        yield* box.enqueue({ n: 1 })
        yield* box.enqueue({ n: 2 })
        yield* box.enqueue({ n: 3 })
        const got = [yield* Queue.take(delivered), yield* Queue.take(delivered), yield* Queue.take(delivered)]
        expect(got).toEqual(expect.arrayContaining([{ n: 1 }, { n: 2 }, { n: 3 }]))
        yield* settle
        yield* eventually(Effect.map(backingRows("webhooks"), (rows) => expect(rows).toEqual([])))

        // a failing delivery is retried by the runner on the curve
        let calls = 0
        yield* Fiber.interrupt(runner)
        const failing = yield* Effect.fork(
          box.run("runner", () =>
            Effect.suspend(() => {
              calls++
              return calls === 1 ? Effect.fail(new Error("first fails")) : Effect.asVoid(Queue.offer(delivered, "ok"))
            }))
        )
        yield* settle
        const id = yield* box.enqueue({ n: 4 })
        yield* settle
        yield* eventually(
          Effect.map(box.getJob(id), (job) => expect(Option.getOrThrow(job).lastError).toEqual(Option.some("first fails")))
        )
        yield* advance("5 seconds")
        expect(yield* Queue.take(delivered)).toBe("ok")
        expect(calls).toBe(2)
        yield* Fiber.interrupt(failing)
        expect(yield* backingRows("webhooks")).toEqual([])
      }).pipe(Effect.provide(engine.store())))

    it.effect("run with heartbeat delivers one job after another, extending each lease while it is delivered", () =>
      Effect.gen(function*() {
        const box = yield* webhooks // 60 s visibility: beats every 20 s
        // a daemon, so that a worker stuck in its first job fails the assertions below rather than the test's teardown
        const ids = [yield* box.enqueue({ n: 1 }), yield* box.enqueue({ n: 2 }), yield* box.enqueue({ n: 3 })]
        const leases: Array<readonly [number, number | undefined]> = []
        const runner = yield* Effect.forkDaemon(
          box.run("beating", (job) =>
            Effect.gen(function*() {
              yield* Effect.sleep("50 seconds")
              const until = Option.getOrThrow(yield* box.getJob(job.id)).claimedUntil
              leases.push([job.id, Option.getOrUndefined(Option.map(until, ms))])
            }), { heartbeat: true })
        )
        for (let i = 0; i < 3; i++) {
          yield* advance("0 millis")
          yield* advance("50 seconds")
        }
        yield* advance("0 millis")
        // each claimed at i × 50 s, beaten at +20 s and +40 s: its lease ends 100 s after its claim
        expect(leases).toEqual(ids.map((id, i) => [id, i * 50 * second + 100 * second]))
        expect(yield* backingRows("webhooks")).toEqual([])
        // interruption returns
        expect(Exit.isInterrupted(yield* Fiber.interrupt(runner))).toBe(true)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour" }))))
  })
