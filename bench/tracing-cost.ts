/**
 * What the telemetry costs (docs/performance.md "Telemetry"): CPU µs per
 * operation of alkstore's hot paths, in a fresh process per run, on a WAL
 * SQLite file in os.tmpdir(). CPU time (process.cpuUsage), not wall time:
 * on a machine shared with other work it is the steadier measure of the
 * library's own cost.
 *
 *   ALK_SRC=path/to/src/index.ts   the library to measure (default this tree's; point it at another
 *                                  checkout's src to compare before/after in interleaved runs)
 *   ALK_TRACER=none|otel           none: Effect's built-in tracer (alkstore makes no spans);
 *                                  otel: @effect/opentelemetry's NodeSdk with a BatchSpanProcessor to an
 *                                  exporter that drops the spans (the SDK's own cost, no I/O)
 *   ALK_N=n                        jobs per workload (default 20000)
 *   ALK_ONLY=a,b                   only these workloads (the others still run when a later one needs their jobs)
 *
 * Prints one JSON line: { workload: cpuMicrosPerOp }.
 */
import { Deferred, Effect, Fiber, Layer, Option, Ref, Stream } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { pathToFileURL } from "node:url"
import type * as Alkstore from "../src/index.js"

const src = process.env.ALK_SRC ?? path.resolve(import.meta.dirname, "../src/index.ts")
const tracerMode = process.env.ALK_TRACER ?? "none"
const N = Number(process.env.ALK_N ?? 20_000)
const only = process.env.ALK_ONLY === undefined ? undefined : new Set(process.env.ALK_ONLY.split(","))
const { Queues, SqliteStore } = (await import(pathToFileURL(src).href)) as typeof Alkstore
const { SqlClient } = await import("@effect/sql")

const tracing = async (): Promise<Layer.Layer<never>> => {
  if (tracerMode === "none") return Layer.empty
  const { NodeSdk } = await import("@effect/opentelemetry")
  const { BatchSpanProcessor } = await import("@opentelemetry/sdk-trace-base")
  const dropping = {
    export: (_spans: unknown, done: (result: { code: number }) => void) => done({ code: 0 }),
    shutdown: () => Promise.resolve()
  }
  return NodeSdk.layer(() => ({
    resource: { serviceName: "bench" },
    spanProcessor: new BatchSpanProcessor(dropping as never, { maxQueueSize: 100_000, maxExportBatchSize: 1000 })
  }))
}

const cpu = () => {
  const u = process.cpuUsage()
  return u.user + u.system
}
const payload = (n: number) => ({ n, body: "x".repeat(64) })

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-tracing-cost-"))
const results: Record<string, number> = {}

const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const queues = yield* Queues.Queues
  const q = yield* queues.queue("bench")
  const measure = <E, R>(label: string, ops: number, body: Effect.Effect<void, E, R>) =>
    Effect.gen(function*() {
      const c0 = cpu()
      yield* body
      if (only === undefined || only.has(label)) results[label] = (cpu() - c0) / ops
    })
  const preload = Effect.gen(function*() {
    for (let i = 0; i < N; i += 1000) yield* q.enqueueBatch(Array.from({ length: 1000 }, (_, j) => payload(i + j)))
  })

  yield* measure("enqueue-1tx", N, Effect.gen(function*() {
    for (let i = 0; i < N; i++) yield* q.enqueue(payload(i))
  }))
  yield* sql`DELETE FROM __alkstore_jobs`
  yield* measure("enqueue-100tx", N, Effect.gen(function*() {
    for (let i = 0; i < N; i += 100) {
      yield* sql.withTransaction(Effect.gen(function*() {
        for (let j = i; j < i + 100; j++) yield* q.enqueue(payload(j))
      }))
    }
  }))
  yield* sql`DELETE FROM __alkstore_jobs`
  yield* measure("enqueue-batch100", N, Effect.gen(function*() {
    for (let i = 0; i < N; i += 100) yield* q.enqueueBatch(Array.from({ length: 100 }, (_, j) => payload(i + j)))
  }))
  // the queue now holds N jobs
  yield* measure("drain-1", N, Effect.gen(function*() {
    for (let i = 0; i < N; i++) {
      const handle = yield* q.claim("w")
      if (Option.isNone(handle)) return yield* Effect.die(new Error(`empty after ${i}`))
      yield* handle.value.ack
    }
  }))
  yield* preload
  const count = yield* Ref.make(0)
  const all = yield* Deferred.make<void>()
  yield* measure("drain-1-process", N, Effect.gen(function*() {
    const worker = yield* Effect.fork(q.process("w", () =>
      Effect.flatMap(Ref.updateAndGet(count, (n) => n + 1), (n) => (n === N ? Deferred.succeed(all, undefined) : Effect.void))))
    yield* Deferred.await(all)
    yield* Fiber.interrupt(worker)
  }))
  yield* sql`DELETE FROM __alkstore_jobs`
  yield* preload
  yield* measure("drain-batch100", N, Effect.gen(function*() {
    for (let done = 0; done < N;) {
      const handles = yield* q.claimBatch("w", 100)
      yield* q.ackAll(handles)
      done += handles.length
    }
  }))
  yield* preload
  // Traced, each handle a stream hands on carries its job's span (opened on the way out, ended by its ack).
  yield* measure("drain-stream100", N, q.stream("w", { batch: 100 }).pipe(
    Stream.take(N),
    Stream.runForEach((handle) => handle.ack)
  ))
})

await Effect.runPromise(
  program.pipe(
    Effect.provide(SqliteStore.layer({ filename: path.join(dir, "bench.db") })),
    Effect.provide(await tracing())
  )
)
fs.rmSync(dir, { recursive: true, force: true })
process.stdout.write(JSON.stringify({ src, tracer: tracerMode, n: N, cpuMicrosPerOp: results }) + "\n")
