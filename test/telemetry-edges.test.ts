/**
 * Edge cases of telemetry (metrics, spans) and of the outbox's and the
 * scheduler's options reaching the jobs they make.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Metric, Option, Tracer } from "effect"
import { Outbox, Queues, Scheduler, Telemetry } from "../src/index.js"
import { pgOwned, sqliteOwned } from "./contract/harness.js"
import { counts, freshQueue } from "./contract/telemetry.js"
import { advance, eventually, mustClaim, ms, queueOf, settle } from "./contract/support.js"

const depth = (queue: string, state: string) =>
  Effect.map(
    Metric.value(Metric.tagged(Metric.tagged(Telemetry.metrics.depth, "queue", queue), "state", state)),
    (g) => g.value
  )
const age = (queue: string) =>
  Effect.map(Metric.value(Metric.tagged(Telemetry.metrics.oldestPendingAge, "queue", queue)), (g) => g.value)

/** A tracer (Effect's own underneath) whose spans named so throw when `key` is set on them: an exporter's failure. */
const throwingOn = (named: (name: string) => boolean, key: string) => {
  const native = Effect.runSync(Effect.tracer)
  return Tracer.make({
    span: (name, parent, context, links, startTime, kind, options) => {
      const span = native.span(name, parent, context, links, startTime, kind, options)
      if (named(name)) {
        const original = span.attribute.bind(span)
        span.attribute = (k, value) => {
          if (k === key) throw new Error("exporter exploded")
          original(k, value)
        }
      }
      return span
    },
    context: (f) => f()
  })
}

const second = 1000

// Each engine's own layer: telemetry is engine-free above the storage calls.
for (const engine of [sqliteOwned, pgOwned]) {
  describe(`telemetry edges — ${engine.name}`, () => {
    it.effect("gauges set by stats are zeroed by sampleMetrics once the queue empties", () =>
      Effect.gen(function*() {
        const name = freshQueue("stats-gauge")
        const queues = yield* Queues.Queues
        const queue = yield* queueOf(name)
        yield* queue.enqueue({ n: 1 })
        yield* queue.enqueue({ n: 2 })
        yield* advance("3 seconds")
        yield* queue.stats
        expect(yield* depth(name, "pending")).toBe(2)
        expect(yield* age(name)).toBe(3_000)
        // the queue empties (acked); the process's sampler runs as docs/observability.md suggests
        yield* (yield* mustClaim(queue, "w")).ack
        yield* (yield* mustClaim(queue, "w")).ack
        yield* queues.sampleMetrics
        expect([yield* depth(name, "pending"), yield* depth(name, "claimed"), yield* age(name)]).toEqual([0, 0, 0])
      }).pipe(Effect.provide(engine.store())))

    it.effect("outbox enqueue: group, key, priority, delay and maxAttempts reach the backing job", () =>
      Effect.gen(function*() {
        const outboxName = freshQueue("box")
        const box = yield* (yield* Outbox.Outbox).outbox(outboxName)
        const backing = `__alkstore_outbox:${outboxName}`
        const id = yield* box.enqueue({ a: 1 }, { group: "tenant-1", key: "k1", priority: 7, delay: "10 seconds", maxAttempts: 2 })
        const again = yield* box.enqueue({ a: 2 }, { key: "k1" })
        expect(again).toBe(id)
        const job = Option.getOrThrow(yield* box.getJob(id))
        expect(job.priority).toBe(7)
        expect(job.maxAttempts).toBe(2)
        expect(ms(job.runAt)).toBe(10 * second)
        expect(job.payload).toEqual({ a: 1 })
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ group_key: string }>`SELECT group_key FROM __alkstore_jobs WHERE queue = ${backing}`
        expect(rows.map((r) => r.group_key)).toEqual(["tenant-1"])
        expect((yield* counts(backing)).enqueued).toBe(2)
        // not due before its delay
        expect(yield* box.runOnce("w", () => Effect.void)).toBe(false)
        yield* advance("10 seconds")
        // dead after its 2 attempts, each delivered once
        let deliveries = 0
        expect(yield* box.runOnce("w", () => Effect.suspend(() => (deliveries++, Effect.fail("no"))))).toBe(true)
        yield* advance("5 seconds")
        expect(yield* box.runOnce("w", () => Effect.suspend(() => (deliveries++, Effect.fail("no"))))).toBe(true)
        expect(deliveries).toBe(2)
        const dead = Option.getOrThrow(yield* box.getJob(id))
        expect(dead.state).toBe("dead")
        expect(yield* counts(backing)).toMatchObject({ claimed: 2, retried: 1, dead: 1, acked: 0 })
      }).pipe(Effect.provide(engine.store())))

    it.effect("ScheduleOpts: group, priority, maxAttempts, expires and the payload reach each fired job", () =>
      Effect.gen(function*() {
        const scheduler = yield* Scheduler.Scheduler
        const target = freshQueue("sched-target")
        const registered = yield* scheduler.schedule(freshQueue("sched"), "@every 1m", target, { hello: "world" }, {
          group: "g-1",
          priority: 3,
          maxAttempts: 9,
          expires: "30 seconds"
        })
        expect(Option.getOrUndefined(registered.opts.group)).toBe("g-1")
        const runner = yield* Effect.fork(scheduler.runSchedules)
        yield* settle
        yield* advance("1 minute")
        yield* Fiber.interrupt(runner)
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{
          group_key: string
          priority: number
          max_attempts: number
          expires_at: number | string | null
          run_at: number | string
          payload: unknown
        }>`SELECT group_key, priority, max_attempts, expires_at, run_at, payload FROM __alkstore_jobs WHERE queue = ${target}`
        expect(rows.length).toBe(1)
        const row = rows[0]!
        expect(row.group_key).toBe("g-1")
        expect(Number(row.priority)).toBe(3)
        expect(Number(row.max_attempts)).toBe(9)
        expect(Number(row.expires_at)).toBe(Number(row.run_at) + 30 * second)
        const queue = yield* queueOf(target)
        const handle = yield* mustClaim(queue, "w")
        expect(handle.job.payload).toEqual({ hello: "world" })
        expect(handle.job.maxAttempts).toBe(9)
      }).pipe(Effect.provide(engine.store())))

    it.effect("outbox run: a failed delivery is retried on the backoff, counted once per attempt, handler_ms per job", () =>
      Effect.gen(function*() {
        const outboxName = freshQueue("box-run")
        const box = yield* (yield* Outbox.Outbox).outbox(outboxName, { maxAttempts: 2 })
        const backing = `__alkstore_outbox:${outboxName}`
        let calls = 0
        const runner = yield* Effect.fork(box.run("r", () => Effect.suspend(() => (calls++, Effect.fail("down")))))
        yield* settle
        const id = yield* box.enqueue({ x: 1 })
        yield* eventually(Effect.map(box.getJob(id), (job) => expect(Option.getOrThrow(job).attempts).toBe(1)))
        yield* settle
        expect(calls).toBe(1)
        yield* advance("4 seconds")
        expect(calls).toBe(1)
        yield* advance("1 second")
        yield* eventually(Effect.map(box.getJob(id), (job) => expect(Option.getOrThrow(job).state).toBe("dead")))
        yield* Fiber.interrupt(runner)
        expect(calls).toBe(2)
        expect(yield* counts(backing)).toMatchObject({ claimed: 2, retried: 1, dead: 1, acked: 0, enqueued: 1 })
        const handler = yield* Metric.value(Metric.tagged(Telemetry.metrics.handler, "queue", backing))
        expect(handler.count).toBe(2)
      }).pipe(Effect.provide(engine.store())))

    it.effect("wait_ms of a claim taken from a lapsed lease counts from its lapse, not its first due", () =>
      Effect.gen(function*() {
        const name = freshQueue("lapse-wait")
        const queue = yield* queueOf(name, { visibilityTimeout: "10 seconds" })
        yield* queue.enqueue({ n: 1 })
        yield* mustClaim(queue, "w1") // wait 0
        yield* advance("10 seconds")
        yield* mustClaim(queue, "w2")
        const wait = yield* Metric.value(Metric.tagged(Telemetry.metrics.wait, "queue", name))
        expect(wait.count).toBe(2)
        expect((yield* counts(name)).leaseLapses).toBe(1)
        // record what the second wait is (documented: from due — runAt — to claim)
        expect(wait.sum).toBeLessThanOrEqual(10_000)
      }).pipe(Effect.provide(engine.store())))

    it.effect("a tracer whose spans throw on attribute() throwing on the job-id attribute does not turn a committed enqueue into a defect", () => {
      const tracer = throwingOn((name) => name.startsWith("alkstore."), "alkstore.job.id")
      return Effect.gen(function*() {
        const name = freshQueue("throwing-tracer")
        const queue = yield* queueOf(name)
        const exit = yield* Effect.exit(queue.enqueue({ n: 1 }))
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ id: number }>`SELECT id FROM __alkstore_jobs WHERE queue = ${name}`.pipe(
          Effect.withTracerEnabled(false)
        )
        // the job was written: the enqueue must report it, not die after the commit
        expect({ committedRows: rows.length, exit: exit._tag }).toEqual({ committedRows: 1, exit: "Success" })
      }).pipe(Effect.provide(engine.store()), Effect.withTracer(tracer))
    })

    it.effect("a tracer throwing on the outcome attribute does not end a process worker", () => {
      const tracer = throwingOn((name) => name === "alkstore.queue.process", "alkstore.outcome")
      return Effect.gen(function*() {
        const name = freshQueue("throwing-worker")
        const queue = yield* queueOf(name)
        let handled = 0
        const worker = yield* Effect.fork(queue.process("w", () => Effect.sync(() => void handled++)))
        yield* settle
        yield* queue.enqueue({ n: 1 })
        yield* queue.enqueue({ n: 2 })
        yield* eventually(Effect.sync(() => expect(handled).toBe(2)), 2).pipe(Effect.exit)
        yield* settle
        const status = worker.unsafePoll()
        const stats = yield* queue.stats.pipe(Effect.withTracerEnabled(false))
        yield* Fiber.interrupt(worker)
        expect({ workerEnded: status !== null, handled, pending: stats.pending, claimed: stats.claimed })
          .toEqual({ workerEnded: false, handled: 2, pending: 0, claimed: 0 })
      }).pipe(Effect.provide(engine.store()), Effect.withTracer(tracer))
    })
  })
}

