/**
 * Tracing and metrics (docs/observability.md), written once and applied to
 * every engine: spans read back through a collecting `Tracer`, metrics
 * through `Metric.value`. Metrics live in Effect's process-wide registry,
 * so every test uses queue names of its own. Time is the TestClock.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Metric, Option, TestClock, Tracer } from "effect"
import { Locks, Outbox, Queues, Scheduler, Telemetry } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"
import { advance, eventually, mustClaim, queueOf, settle } from "./support.js"

/** A tracer that records every span it makes (Effect's own spans underneath). */
export const collectingTracer = () => {
  const native = Effect.runSync(Effect.tracer)
  const spans: Array<Tracer.Span> = []
  const tracer = Tracer.make({
    span: (name, parent, context, links, startTime, kind, options) => {
      const span = native.span(name, parent, context, links, startTime, kind, options)
      spans.push(span)
      return span
    },
    context: (f) => f()
  })
  const named = (name: string) => spans.filter((span) => span.name === name)
  const one = (name: string) => {
    const found = named(name)
    expect(found.map((s) => s.name)).toEqual([name])
    return found[0]!
  }
  return { tracer, spans, named, one }
}

let unique = 0
/** A queue name no other test (nor engine) in this process uses: metrics are process-wide. */
export const freshQueue = (label: string) => `${label}-${process.pid}-${++unique}`

const counter = (metric: Metric.Metric.Counter<number>, queue: string) =>
  Effect.map(Metric.value(Metric.tagged(metric, "queue", queue)), (state) => state.count)

export const counts = (queue: string) =>
  Effect.all({
    enqueued: counter(Telemetry.metrics.enqueued, queue),
    claimed: counter(Telemetry.metrics.claimed, queue),
    acked: counter(Telemetry.metrics.acked, queue),
    retried: counter(Telemetry.metrics.retried, queue),
    dead: counter(Telemetry.metrics.dead, queue),
    expired: counter(Telemetry.metrics.expired, queue),
    leaseLapses: counter(Telemetry.metrics.leaseLapses, queue)
  })

const histogram = (metric: typeof Telemetry.metrics.wait, queue: string) =>
  Metric.value(Metric.tagged(metric, "queue", queue))

const attribute = (span: Tracer.Span, key: string) => span.attributes.get(key)

const traceparentPattern = /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/

export const telemetryContract = (engine: EngineUnderTest) =>
  describe(`telemetry — ${engine.name}`, () => {
    describe("spans", () => {
      it.effect("enqueue, claim, ack, retry, fail and release each make a span with queue, job id, attempt and outcome", () => {
        const { one, tracer } = collectingTracer()
        return Effect.gen(function*() {
          const name = freshQueue("spans")
          const queue = yield* queueOf(name, { maxAttempts: 2 })
          const id = yield* queue.enqueue({ n: 1 })
          expect(attribute(one("alkstore.queue.enqueue"), "alkstore.queue")).toBe(name)
          expect(attribute(one("alkstore.queue.enqueue"), "alkstore.job.id")).toBe(id)
          expect(one("alkstore.queue.enqueue").kind).toBe("producer")

          const first = yield* mustClaim(queue, "w1")
          const claim = one("alkstore.queue.claim")
          expect(Object.fromEntries(claim.attributes)).toMatchObject({
            "alkstore.queue": name,
            "alkstore.worker.id": "w1",
            "alkstore.job.id": id,
            "alkstore.job.attempt": 1,
            "alkstore.outcome": "claimed"
          })
          expect(yield* first.retry("boom", "1 second")).toBe("retried")
          expect(Object.fromEntries(one("alkstore.queue.retry").attributes)).toMatchObject({
            "alkstore.job.id": id,
            "alkstore.job.attempt": 1,
            "alkstore.outcome": "retried"
          })
          yield* advance("1 second")
          const second = yield* mustClaim(queue, "w1")
          expect(yield* second.release).toBe(true)
          expect(attribute(one("alkstore.queue.release"), "alkstore.outcome")).toBe("released")
          const third = yield* mustClaim(queue, "w1")
          expect(yield* third.ack).toBe(true)
          expect(Object.fromEntries(one("alkstore.queue.ack").attributes)).toMatchObject({
            "alkstore.queue": name,
            "alkstore.job.id": id,
            "alkstore.job.attempt": 2,
            "alkstore.outcome": "acked"
          })
          // a stale handle's operations report loss on their spans
          expect(yield* first.fail("late")).toBe(false)
          expect(attribute(one("alkstore.queue.fail"), "alkstore.outcome")).toBe("lost")
        }).pipe(Effect.provide(engine.store()), Effect.withTracer(tracer))
      })

      it.effect("a job enqueued inside a span stores that span as a W3C traceparent; outside any span, none", () => {
        const { one, tracer } = collectingTracer()
        return Effect.gen(function*() {
          const name = freshQueue("context")
          const queue = yield* queueOf(name)
          const inside = yield* Effect.withSpan(queue.enqueue({ n: 1 }), "request")
          const outside = yield* queue.enqueue({ n: 2 }).pipe(Effect.withTracerEnabled(false))
          const [batchId] = yield* Effect.withSpan(queue.enqueueBatch([{ n: 3 }, { n: 4 }]), "batch-request")
          const sql = yield* SqlClient.SqlClient
          const rows = yield* sql<{ id: number | string; trace_context: string | null }>`
            SELECT id, trace_context FROM __alkstore_jobs WHERE queue = ${name} ORDER BY id`
          const stored = new Map(rows.map((row) => [Number(row.id), row.trace_context]))
          const enqueueSpan = one("alkstore.queue.enqueue")
          expect(enqueueSpan.parent.pipe(Option.map((p) => p.spanId), Option.getOrUndefined)).toBe(one("request").spanId)
          expect(stored.get(inside)).toBe(`00-${enqueueSpan.traceId}-${enqueueSpan.spanId}-01`)
          expect(stored.get(inside)).toMatch(traceparentPattern)
          expect(stored.get(outside)).toBeNull()
          const batchSpan = one("alkstore.queue.enqueue_batch")
          expect(attribute(batchSpan, "alkstore.count")).toBe(2)
          expect(stored.get(batchId!)).toBe(`00-${batchSpan.traceId}-${batchSpan.spanId}-01`)
        }).pipe(Effect.provide(engine.store()), Effect.withTracer(tracer))
      })

      it.effect("process: each job in its own alkstore.queue.process span, linked to its enqueuer; the handler's span is its child", () => {
        const { named, one, tracer } = collectingTracer()
        return Effect.gen(function*() {
          const name = freshQueue("process")
          const queue = yield* queueOf(name, { maxAttempts: 1 })
          const okId = yield* Effect.withSpan(queue.enqueue({ ok: true }), "request")
          const badId = yield* queue.enqueue({ ok: false }).pipe(Effect.withTracerEnabled(false))
          const done: Array<number> = []
          const worker = yield* Effect.fork(queue.process("w1", (job) =>
            Effect.withSpan("handler")(Effect.gen(function*() {
              done.push(job.id)
              if (!(job.payload as { ok: boolean }).ok) return yield* Effect.fail("refused")
            }))))
          yield* eventually(Effect.sync(() => {
            expect(named("alkstore.queue.process").map((span) => attribute(span, "alkstore.outcome"))).toEqual(["acked", "dead"])
          }))
          expect(done).toEqual([okId, badId])
          yield* Fiber.interrupt(worker)

          const processes = named("alkstore.queue.process")
          expect(processes.map((span) => attribute(span, "alkstore.job.id"))).toEqual([okId, badId])
          const [ok, bad] = processes as [Tracer.Span, Tracer.Span]
          expect(Object.fromEntries(ok.attributes)).toMatchObject({
            "alkstore.queue": name,
            "alkstore.worker.id": "w1",
            "alkstore.job.attempt": 1,
            "alkstore.outcome": "acked"
          })
          expect(attribute(bad, "alkstore.outcome")).toBe("dead")
          expect(ok.kind).toBe("consumer")
          // one trace per job, linked to the span that enqueued it
          expect(Option.isNone(ok.parent)).toBe(true)
          const enqueueSpan = named("alkstore.queue.enqueue").find((s) => attribute(s, "alkstore.job.id") === okId)!
          expect(ok.links.map((link) => [link.span.traceId, link.span.spanId])).toEqual([[
            enqueueSpan.traceId,
            enqueueSpan.spanId
          ]])
          expect(ok.links[0]!.span.traceId).toBe(one("request").traceId)
          // enqueued with tracing off: no context stored, no link
          expect(bad.links).toEqual([])
          const handlers = named("handler")
          expect(handlers.map((span) => Option.getOrUndefined(span.parent)?.spanId)).toEqual([ok.spanId, bad.spanId])
          expect(ok.status._tag).toBe("Ended")
        }).pipe(Effect.provide(engine.store()), Effect.withTracer(tracer))
      })

      it.effect("outbox deliveries, scheduler ticks and lock operations have their spans", () => {
        const { named, one, tracer } = collectingTracer()
        return Effect.gen(function*() {
          const outboxes = yield* Outbox.Outbox
          const box = yield* outboxes.outbox(freshQueue("box"))
          const id = yield* Effect.withSpan(box.enqueue({ to: "a" }), "request")
          expect(yield* box.runOnce("d1", () => Effect.withSpan(Effect.void, "deliver-handler"))).toBe(true)
          const deliver = one("alkstore.outbox.deliver")
          expect(Object.fromEntries(deliver.attributes)).toMatchObject({
            "alkstore.outbox": box.name,
            "alkstore.job.id": id,
            "alkstore.outcome": "acked"
          })
          expect(deliver.links.map((l) => l.span.traceId)).toEqual([one("request").traceId])
          expect(Option.getOrUndefined(one("deliver-handler").parent)?.spanId).toBe(deliver.spanId)
          // `run` names its per-job spans for the outbox too
          const second = yield* box.enqueue({ to: "b" })
          const runner0 = yield* Effect.fork(box.run("d2", () => Effect.void))
          yield* eventually(Effect.sync(() => expect(named("alkstore.outbox.deliver").length).toBe(2)))
          yield* Fiber.interrupt(runner0)
          expect(Object.fromEntries(named("alkstore.outbox.deliver")[1]!.attributes)).toMatchObject({
            "alkstore.outbox": box.name,
            "alkstore.job.id": second,
            "alkstore.worker.id": "d2",
            "alkstore.outcome": "acked"
          })

          const scheduler = yield* Scheduler.Scheduler
          const target = freshQueue("fired")
          yield* scheduler.schedule(freshQueue("every-minute"), "@every 1m", target, { n: 1 })
          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          yield* advance("1 minute")
          const fired = named("alkstore.scheduler.tick").filter((s) => attribute(s, "alkstore.outcome") === "fired")
          expect(fired.map((s) => attribute(s, "alkstore.fired"))).toEqual([1])
          // the fired job carries the tick's trace context
          const queue = yield* queueOf(target)
          const handle = yield* mustClaim(queue, "w")
          expect(handle.job.payload).toEqual({ n: 1 })
          const sql = yield* SqlClient.SqlClient
          const rows = yield* sql<{ trace_context: string | null }>`
            SELECT trace_context FROM __alkstore_jobs WHERE queue = ${target}`
          expect(rows.map((r) => r.trace_context)).toEqual([`00-${fired[0]!.traceId}-${fired[0]!.spanId}-01`])
          yield* Fiber.interrupt(runner)

          const locks = yield* Locks.Locks
          const lock = Option.getOrThrow(yield* locks.acquire("telemetry-lock", { ttl: "10 seconds", owner: "a" }))
          expect(Option.isNone(yield* locks.acquire("telemetry-lock", { ttl: "10 seconds", owner: "b" }))).toBe(true)
          expect(yield* lock.renew()).toBe(true)
          expect(yield* lock.release).toBe(true)
          const acquires = named("alkstore.lock.acquire").filter((s) => attribute(s, "alkstore.lock") === "telemetry-lock")
          expect(acquires.map((s) => [attribute(s, "alkstore.lock.owner"), attribute(s, "alkstore.outcome")])).toEqual([
            ["a", "acquired"],
            ["b", "unavailable"]
          ])
          expect(attribute(acquires[0]!, "alkstore.lock.token")).toBe(lock.token)
          expect(attribute(named("alkstore.lock.renew").at(-1)!, "alkstore.outcome")).toBe("renewed")
          expect(attribute(named("alkstore.lock.release").at(-1)!, "alkstore.outcome")).toBe("released")
        }).pipe(Effect.provide(engine.store()), Effect.withTracer(tracer))
      })

      it.effect("with Effect's built-in tracer (none installed), alkstore makes no spans of its own", () =>
        Effect.gen(function*() {
          const name = freshQueue("untraced")
          const queue = yield* queueOf(name)
          // a request span of the application's own still reaches the row
          const [id, request] = yield* Effect.withSpan(
            Effect.zip(queue.enqueue({ n: 1 }), Effect.currentSpan),
            "request"
          )
          const handle = yield* mustClaim(queue, "w")
          expect(handle.job.id).toBe(id)
          const sql = yield* SqlClient.SqlClient
          const rows = yield* sql<{ trace_context: string | null }>`SELECT trace_context FROM __alkstore_jobs WHERE queue = ${name}`
          expect(rows[0]!.trace_context).toBe(`00-${request.traceId}-${request.spanId}-01`)
          expect(yield* handle.ack).toBe(true)
          // a handler runs in the worker's span: no per-job span was made
          yield* queue.enqueue({ n: 2 })
          const seen: Array<string> = []
          const worker = yield* Effect.fork(queue.process("w", () =>
            Effect.map(Effect.currentSpan, (span) => {
              seen.push(span.name)
            })))
          yield* eventually(Effect.sync(() => expect(seen).toEqual(["alkstore.queue.worker"])))
          yield* Fiber.interrupt(worker)
        }).pipe(Effect.provide(engine.store())))
    })

    describe("metrics", () => {
      it.effect("per-queue counters: enqueued, claimed, acked, retried, dead", () =>
        Effect.gen(function*() {
          const name = freshQueue("counters")
          const other = freshQueue("counters-other")
          const queue = yield* queueOf(name, { maxAttempts: 2 })
          yield* queue.enqueue({ n: 1 })
          yield* queue.enqueueBatch([{ n: 2 }, { n: 3 }, { n: 4 }])
          yield* (yield* queueOf(other)).enqueue({ n: 0 })
          const [a, b, c, d] = yield* queue.claimBatch("w", 4)
          expect(yield* a!.ack).toBe(true)
          expect(yield* queue.ackAll([b!])).toEqual([true])
          expect(yield* c!.retry("again", 0)).toBe("retried")
          expect(yield* d!.fail("no")).toBe(true)
          const again = yield* mustClaim(queue, "w")
          expect(yield* again.retry("spent")).toBe("dead")
          expect(yield* counts(name)).toEqual({
            enqueued: 4,
            claimed: 5,
            acked: 2,
            retried: 1,
            dead: 2,
            expired: 0,
            leaseLapses: 0
          })
          expect((yield* counts(other)).enqueued).toBe(1)
        }).pipe(Effect.provide(engine.store())))

      // The same rules with limits on the queue (its claims take the flow walk, docs/flow-control.md).
      for (const limits of [undefined, { concurrency: 10 }, {}] as const) {
        const label = limits === undefined ? "" : ` (limited: ${JSON.stringify(limits)})`
        const limitQueue = (name: string) =>
          limits === undefined ? Effect.void : Effect.flatMap(Queues.Queues, (q) => q.setLimits(name, limits))

        it.effect(`expiry (maintenance or a claim meeting it), spent attempts met by a claim and lease lapses are counted${label}`, () =>
          Effect.gen(function*() {
            const name = freshQueue("lapses")
            yield* limitQueue(name)
            const queue = yield* queueOf(name, { visibilityTimeout: "10 seconds", maxAttempts: 2 })
            const queues = yield* Queues.Queues
            yield* queue.enqueue({ n: 1 }, { expires: "5 seconds" })
            yield* queue.enqueue({ n: 2 }, { expires: "5 seconds" })
            yield* queue.enqueue({ n: 3 })
            yield* advance("6 seconds")
            // the claim meets the first two expired (moved to dead on the way), then claims the third
            const handle = yield* mustClaim(queue, "w1")
            expect(handle.job.payload).toEqual({ n: 3 })
            expect(yield* counts(name)).toMatchObject({ claimed: 1, dead: 2, expired: 2 })
            // its lease lapses: the next claim takes it over
            yield* advance("10 seconds")
            const taken = yield* mustClaim(queue, "w2")
            expect(taken.job.id).toBe(handle.job.id)
            expect(yield* counts(name)).toMatchObject({ claimed: 2, leaseLapses: 1 })
            // lapsed again with the attempts spent: the claim buries it
            yield* advance("10 seconds")
            expect(Option.isNone(yield* queue.claim("w3"))).toBe(true)
            expect(yield* counts(name)).toMatchObject({ claimed: 2, dead: 3, expired: 2, leaseLapses: 1 })
            expect((yield* queue.dead()).map((job) => [job.payload, Option.getOrNull(job.lastError)])).toEqual([
              [{ n: 3 }, "max attempts exceeded"],
              [{ n: 2 }, "expired"],
              [{ n: 1 }, "expired"]
            ])
            // maintenance's expiries, by queue
            yield* queue.enqueue({ n: 4 }, { expires: "6 seconds", delay: "5 seconds" })
            yield* advance("7 seconds")
            expect((yield* queues.maintenance).expired).toBe(1)
            expect(yield* counts(name)).toMatchObject({ dead: 4, expired: 3 })
          }).pipe(Effect.provide(engine.store())))

        it.effect(`a batch claim counts the lapsed leases it takes and the candidates it buries${label}`, () =>
          Effect.gen(function*() {
            const name = freshQueue("lapses-batch")
            yield* limitQueue(name)
            const queue = yield* queueOf(name, { visibilityTimeout: "10 seconds", maxAttempts: 1 })
            const again = yield* queueOf(name, { visibilityTimeout: "10 seconds", maxAttempts: 3 })
            yield* again.enqueue({ n: 1 }) // claimed, then its lease lapses: taken over
            yield* queue.enqueue({ n: 2 }) // claimed once, then its lease lapses with its one attempt spent: buried
            yield* queue.enqueue({ n: 3 }, { expires: "5 seconds" }) // expired when the batch meets it: buried
            yield* again.enqueue({ n: 4 })
            yield* again.enqueue({ n: 5 })
            expect((yield* queue.claimBatch("w1", 2)).map((h) => h.job.payload)).toEqual([{ n: 1 }, { n: 2 }])
            yield* advance("11 seconds")
            const batch = yield* queue.claimBatch("w2", 3)
            expect(batch.map((h) => h.job.payload).sort((a, b) => (a as { n: number }).n - (b as { n: number }).n))
              .toEqual([{ n: 1 }, { n: 4 }, { n: 5 }])
            expect(yield* counts(name)).toMatchObject({ claimed: 5, dead: 2, expired: 1, leaseLapses: 1 })
            expect((yield* queue.dead()).map((job) => Option.getOrNull(job.lastError)).sort()).toEqual(["expired", "max attempts exceeded"])
            expect(yield* queue.ackAll(batch)).toEqual([true, true, true])
            expect((yield* queue.stats)).toMatchObject({ pending: 0, claimed: 0, dead: 2 })
          }).pipe(Effect.provide(engine.store())))
      }

      it.effect("histograms: the wait from due to claim, and the handler's time", () =>
        Effect.gen(function*() {
          const name = freshQueue("histograms")
          const queue = yield* queueOf(name)
          yield* queue.enqueue({ n: 1 })
          yield* queue.enqueue({ n: 2 }, { delay: "10 seconds" })
          yield* advance("3 seconds")
          yield* (yield* mustClaim(queue, "w")).ack
          yield* advance("10 seconds") // the delayed job has been due for 3 s
          const worker = yield* Effect.fork(queue.process("w", () => TestClock.adjust("2 seconds")))
          yield* eventually(Effect.map(histogram(Telemetry.metrics.handler, name), (h) => expect(h.count).toBe(1)))
          yield* Fiber.interrupt(worker)
          const wait = yield* histogram(Telemetry.metrics.wait, name)
          expect(wait.count).toBe(2)
          expect(wait.sum).toBe(6_000)
          const handler = yield* histogram(Telemetry.metrics.handler, name)
          expect(handler.count).toBe(1)
          expect(handler.sum).toBe(2_000)
        }).pipe(Effect.provide(engine.store())))

      it.effect("gauges: sampleMetrics reads every queue's depth and oldest pending age; an emptied queue reads zero", () =>
        Effect.gen(function*() {
          const name = freshQueue("gauges")
          const queues = yield* Queues.Queues
          const queue = yield* queueOf(name)
          yield* queue.enqueue({ n: 1 })
          yield* queue.enqueue({ n: 2 })
          yield* queue.enqueue({ n: 3 }, { delay: "1 hour" })
          yield* advance("4 seconds")
          yield* mustClaim(queue, "w")
          yield* queues.sampleMetrics
          const depth = (state: string) =>
            Effect.map(
              Metric.value(Metric.tagged(Metric.tagged(Telemetry.metrics.depth, "queue", name), "state", state)),
              (g) => g.value
            )
          const age = Effect.map(
            Metric.value(Metric.tagged(Telemetry.metrics.oldestPendingAge, "queue", name)),
            (g) => g.value
          )
          expect([yield* depth("pending"), yield* depth("scheduled"), yield* depth("claimed"), yield* depth("dead")])
            .toEqual([1, 1, 1, 0])
          expect(yield* age).toBe(4_000)
          const sql = yield* SqlClient.SqlClient
          yield* sql`DELETE FROM __alkstore_jobs WHERE queue = ${name}`
          yield* queues.sampleMetrics
          expect([yield* depth("pending"), yield* depth("scheduled"), yield* depth("claimed"), yield* age])
            .toEqual([0, 0, 0, 0])
          // stats refreshes its own queue's gauges too
          yield* queue.enqueue({ n: 4 })
          yield* queue.stats
          expect(yield* depth("pending")).toBe(1)
        }).pipe(Effect.provide(engine.store())))

      it.effect("scheduler fires per target queue and leadership changes", () =>
        Effect.gen(function*() {
          const leadership = (change: string) =>
            Effect.map(
              Metric.value(Metric.tagged(Telemetry.metrics.leadershipChanges, "change", change)),
              (c) => c.count
            )
          const before = { acquired: yield* leadership("acquired"), released: yield* leadership("released") }
          const scheduler = yield* Scheduler.Scheduler
          const target = freshQueue("fires")
          yield* scheduler.schedule(freshQueue("fires-schedule"), "@every 1m", target, {})
          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          yield* advance("3 minutes")
          const fires = yield* Metric.value(Metric.tagged(Telemetry.metrics.schedulerFires, "queue", target))
          expect(fires.count).toBe(3)
          expect((yield* counts(target)).enqueued).toBe(0) // fires are not enqueue calls
          yield* Fiber.interrupt(runner)
          expect((yield* leadership("acquired")) - before.acquired).toBe(1)
          expect((yield* leadership("released")) - before.released).toBe(1)
        }).pipe(Effect.provide(engine.store())))
    })
  })
