/**
 * Trace context across processes: a job enqueued inside a traced request in
 * one OS process is processed in another, whose `alkstore.queue.process`
 * span links back to the enqueuer's span (same trace id, the enqueue span's
 * id) through the row alone.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Option } from "effect"
import { Queues } from "../src/index.js"
import { lastJson, runChild } from "./child.js"
import { type EngineUnderTest, freshFile, pgChildDatabase, pgOwned, sqliteOwned } from "./contract/harness.js"
import { eventually } from "./contract/support.js"
import { collectingTracer } from "./contract/telemetry.js"

interface Report {
  readonly id: number
  readonly traceId: string
  readonly requestSpanId: string
  readonly enqueueSpanId: string
}

const variants: ReadonlyArray<{ engine: EngineUnderTest; database: (filename: string) => Effect.Effect<string> }> = [
  { engine: sqliteOwned, database: (filename) => Effect.succeed(filename) },
  { engine: pgOwned, database: (filename) => Effect.promise(() => pgChildDatabase(filename)) }
]

for (const { database, engine } of variants) describe(`trace context across processes — ${engine.name}`, () => {
  it.live("the handler's span in this process links to the request that enqueued the job in another", () => {
    const filename = freshFile("trace")
    const { named, tracer } = collectingTracer()
    return Effect.gen(function*() {
      const queue = yield* (yield* Queues.Queues).queue("traced")
      const child = yield* runChild("test/fixtures/traced-enqueue.ts", [yield* database(filename), "traced"])
      expect(child.stderr).toBe("")
      expect(child.code).toBe(0)
      const report = lastJson<Report>(child.stdout)!
      const seen: Array<{ id: number; parent: string | undefined }> = []
      const worker = yield* Effect.fork(queue.process("here", (job) =>
        Effect.withSpan("handler")(Effect.map(Effect.currentSpan, (span) => {
          seen.push({ id: job.id, parent: Option.getOrUndefined(span.parent)?.spanId })
        }))))
      yield* eventually(Effect.sync(() => expect(seen.map((s) => s.id)).toEqual([report.id])), 20)
      yield* Fiber.interrupt(worker)

      const [process] = named("alkstore.queue.process")
      expect(process).toBeDefined()
      expect(process!.attributes.get("alkstore.job.id")).toBe(report.id)
      expect(process!.links.map((link) => [link.span.traceId, link.span.spanId])).toEqual([[
        report.traceId,
        report.enqueueSpanId
      ]])
      // a new trace of its own, linked (not parented) to the enqueuer's
      expect(process!.traceId).not.toBe(report.traceId)
      expect(seen[0]!.parent).toBe(process!.spanId)
      expect(report.enqueueSpanId).not.toBe(report.requestSpanId)
    }).pipe(Effect.provide(engine.store({ filename })), Effect.withTracer(tracer))
  }, 60_000)
})
