import { Context, Effect, type Fiber, FiberRef, Metric, MetricBoundaries, Option, Tracer } from "effect"

/**
 * Tracing and metrics, the Effect way (docs/observability.md): spans through
 * the fiber's `Tracer`, metrics through `Metric` (Effect's registry, which
 * any metrics exporter reads).
 *
 * Spans cost an allocation, two clock reads and a context per operation, and
 * Effect's built-in tracer exports nothing: alkstore makes its spans only
 * when another tracer is installed (an OpenTelemetry layer, a test's own)
 * and tracing is enabled, so the hot paths of an untraced application stay
 * as they were. Trace context is captured from any span, native or not.
 */

/** Effect's built-in tracer (what every fiber has unless a layer replaces it). */
const nativeTracer = Effect.runSync(Effect.tracer)

/** Whether this fiber's operations are worth a span: a real tracer is installed and tracing is on. */
export const tracing = (fiber: Fiber.RuntimeFiber<any, any>): boolean =>
  Context.get(fiber.currentDefaultServices, Tracer.Tracer) !== nativeTracer &&
  fiber.getFiberRef(FiberRef.currentTracerEnabled)

/** Span attribute keys. */
export const attr = {
  queue: "alkstore.queue",
  jobId: "alkstore.job.id",
  attempt: "alkstore.job.attempt",
  outcome: "alkstore.outcome",
  workerId: "alkstore.worker.id",
  count: "alkstore.count",
  lock: "alkstore.lock",
  owner: "alkstore.lock.owner",
  token: "alkstore.lock.token",
  schedule: "alkstore.schedule",
  outbox: "alkstore.outbox"
} as const

export type Attributes = Record<string, unknown>

/**
 * `effect` in a span named `name` when this fiber traces (else `effect`
 * itself, at the cost of one fiber-runtime step); `outcome` turns its
 * result into the span's `alkstore.outcome` and further attributes.
 */
export const traced = <A, E, R>(
  name: string,
  attributes: () => Attributes,
  effect: Effect.Effect<A, E, R>,
  outcome?: (a: A, span: Tracer.Span) => void,
  options?: SpanOptions
): Effect.Effect<A, E, R> =>
  Effect.withFiberRuntime((fiber) => (tracing(fiber) ? inSpan(name, attributes(), effect, outcome, options) : effect))

export interface SpanOptions {
  readonly kind?: Tracer.SpanKind
  readonly links?: ReadonlyArray<Tracer.SpanLink>
  readonly root?: boolean
}

/** `effect` in a span, unconditionally (the caller checked `tracing`). */
export const inSpan = <A, E, R>(
  name: string,
  attributes: Attributes,
  effect: Effect.Effect<A, E, R>,
  outcome?: (a: A, span: Tracer.Span) => void,
  options?: SpanOptions
): Effect.Effect<A, E, R> =>
  Effect.useSpan(name, { attributes, captureStackTrace: false, ...options }, (span) => {
    const inner = Effect.withParentSpan(effect, span)
    return outcome === undefined ? inner : Effect.tap(inner, (a) => Effect.sync(() => outcome(a, span)))
  })

/** `make(span)` in a new span (the caller checked `tracing`), for a body that sets its own attributes. */
export const withNewSpan = <A, E, R>(
  name: string,
  attributes: Attributes,
  make: (span: Tracer.Span) => Effect.Effect<A, E, R>,
  options?: SpanOptions
): Effect.Effect<A, E, R> =>
  Effect.useSpan(name, { attributes, captureStackTrace: false, ...options }, (span) => Effect.withParentSpan(make(span), span))

/** The outcome attribute of a boolean fenced operation. */
export const wonOrLost = (won: string) => (ok: boolean, span: Tracer.Span) => span.attribute(attr.outcome, ok ? won : "lost")

// W3C trace context: `00-<32 hex trace id>-<16 hex span id>-<flags>`.
const traceparentPattern = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/

/**
 * The current span of `context` as a W3C `traceparent`, for the row: the
 * handler's span links back to it across processes. `undefined` outside any
 * span, or when the span's ids are not W3C-shaped (a tracer with its own ids).
 */
export const traceparentOf = (context: Context.Context<never>): string | undefined => {
  const span = Context.getOption(context, Tracer.ParentSpan)
  if (Option.isNone(span)) return undefined
  const { sampled, spanId, traceId } = span.value
  const text = `00-${traceId}-${spanId}-${sampled === false ? "00" : "01"}`
  return traceparentPattern.test(text) ? text : undefined
}

/** A stored `traceparent` as a span link (`undefined` when there is none or it is malformed). */
export const linkOf = (traceparent: string | null | undefined): Tracer.SpanLink | undefined => {
  if (traceparent == null) return undefined
  const match = traceparentPattern.exec(traceparent)
  if (match === null) return undefined
  return {
    _tag: "SpanLink",
    span: Tracer.externalSpan({ traceId: match[1]!, spanId: match[2]!, sampled: (parseInt(match[3]!, 16) & 1) === 1 }),
    attributes: { "alkstore.link": "enqueued" }
  }
}

// Milliseconds, 1 ms to ~9 h on a doubling curve.
const millisBoundaries = MetricBoundaries.exponential({ start: 1, factor: 2, count: 26 })

/**
 * Every metric alkstore keeps. Counters and histograms are tagged with the
 * queue; their instances per queue are built once (`queueMetrics`) so the
 * hot path's update is a direct, synchronous `unsafeUpdate`.
 */
export const metrics = {
  enqueued: Metric.counter("alkstore.queue.enqueued", { description: "jobs enqueued", incremental: true }),
  claimed: Metric.counter("alkstore.queue.claimed", { description: "claims taken", incremental: true }),
  acked: Metric.counter("alkstore.queue.acked", { description: "claims acked (the job is done)", incremental: true }),
  retried: Metric.counter("alkstore.queue.retried", { description: "claims sent back to pending to retry", incremental: true }),
  dead: Metric.counter("alkstore.queue.dead", { description: "jobs moved to dead (expiry included)", incremental: true }),
  expired: Metric.counter("alkstore.queue.expired", { description: "jobs moved to dead because they expired", incremental: true }),
  leaseLapses: Metric.counter("alkstore.queue.lease_lapses", {
    description: "claims taken from a lapsed lease (its previous claim neither settled nor heartbeat in time)",
    incremental: true
  }),
  wait: Metric.histogram("alkstore.queue.wait_ms", millisBoundaries, "from due (enqueue, or retry time) to claim, ms"),
  handler: Metric.histogram("alkstore.queue.handler_ms", millisBoundaries, "handler time per job in process, ms"),
  depth: Metric.gauge("alkstore.queue.depth", { description: "jobs by state (sampled)" }),
  oldestPendingAge: Metric.gauge("alkstore.queue.oldest_pending_age_ms", {
    description: "age of the oldest due pending job, ms (sampled; 0 when none)"
  }),
  schedulerFires: Metric.counter("alkstore.scheduler.fires", { description: "jobs enqueued by schedules", incremental: true }),
  leadership: Metric.counter("alkstore.scheduler.leadership_changes", {
    description: "scheduler leadership acquired or lost, by this process",
    incremental: true
  })
} as const

const tagged = <T, I, O>(metric: Metric.Metric<T, I, O>, queue: string) => Metric.tagged(metric, "queue", queue)

/** One queue's metric instances: updates without effects, for the hot paths. */
export const queueMetrics = (queue: string) => {
  const enqueued = tagged(metrics.enqueued, queue)
  const claimed = tagged(metrics.claimed, queue)
  const acked = tagged(metrics.acked, queue)
  const retried = tagged(metrics.retried, queue)
  const dead = tagged(metrics.dead, queue)
  const expired = tagged(metrics.expired, queue)
  const leaseLapses = tagged(metrics.leaseLapses, queue)
  const wait = tagged(metrics.wait, queue)
  const handler = tagged(metrics.handler, queue)
  const none: ReadonlyArray<never> = []
  return {
    enqueued: (n: number) => enqueued.unsafeUpdate(n, none),
    claimed: (n: number) => claimed.unsafeUpdate(n, none),
    acked: (n: number) => acked.unsafeUpdate(n, none),
    retried: () => retried.unsafeUpdate(1, none),
    dead: (n: number) => dead.unsafeUpdate(n, none),
    expired: (n: number) => expired.unsafeUpdate(n, none),
    leaseLapse: () => leaseLapses.unsafeUpdate(1, none),
    wait: (millis: number) => wait.unsafeUpdate(millis, none),
    handler: (millis: number) => handler.unsafeUpdate(millis, none)
  }
}

export type QueueMetrics = ReturnType<typeof queueMetrics>

/** The gauges of one queue, from a depth reading. */
export const setGauges = (
  queue: string,
  depth: {
    readonly pending: number
    readonly scheduled: number
    readonly claimed: number
    readonly dead: number
    readonly oldestPendingAgeMillis: number | undefined
  }
): void => {
  const none: ReadonlyArray<never> = []
  for (const state of ["pending", "scheduled", "claimed", "dead"] as const) {
    Metric.tagged(Metric.tagged(metrics.depth, "queue", queue), "state", state).unsafeUpdate(depth[state], none)
  }
  tagged(metrics.oldestPendingAge, queue).unsafeUpdate(depth.oldestPendingAgeMillis ?? 0, none)
}

/** Counts expiries per queue (maintenance, or a claim meeting an expired candidate): each is also a death. */
export const countExpired = (queue: string, count: number): void => {
  if (count <= 0) return
  const none: ReadonlyArray<never> = []
  tagged(metrics.expired, queue).unsafeUpdate(count, none)
  tagged(metrics.dead, queue).unsafeUpdate(count, none)
}
