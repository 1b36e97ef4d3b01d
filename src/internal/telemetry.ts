import {
  Context,
  Effect,
  type Fiber,
  FiberRef,
  Metric,
  MetricBoundaries,
  MetricKey,
  type MetricKeyType,
  MetricLabel,
  Option,
  Tracer
} from "effect"

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
  /** The span's parent instead of the fiber's current span (a stream's claim, for its handle's operations). */
  readonly parent?: Tracer.AnySpan
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
    return outcome === undefined ? inner : Effect.tap(inner, (a) => Effect.sync(() => describing(() => outcome(a, span))))
  })

/**
 * Runs `describe` (attributes on a span), ignoring what it throws: the
 * operation it describes has happened (a committed enqueue, a claim), and a
 * tracer's failure must not turn it into a defect (the caller would retry a
 * committed write) or stop a worker holding a claim.
 */
export const describing = (describe: () => void): void => {
  try {
    describe()
  } catch {
    // a tracer's own failure: the span misses an attribute
  }
}

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

/** A stored `traceparent`'s parts (`undefined` when there is none or it is malformed). */
export const parseTraceparent = (
  traceparent: string | null | undefined
): { readonly traceparent: string; readonly traceId: string; readonly spanId: string; readonly sampled: boolean } | undefined => {
  if (traceparent == null) return undefined
  const match = traceparentPattern.exec(traceparent)
  if (match === null) return undefined
  return { traceparent, traceId: match[1]!, spanId: match[2]!, sampled: (parseInt(match[3]!, 16) & 1) === 1 }
}

/** A stored `traceparent` as a span link (`undefined` when there is none or it is malformed). */
export const linkOf = (traceparent: string | null | undefined): Tracer.SpanLink | undefined => {
  const parsed = parseTraceparent(traceparent)
  if (parsed === undefined) return undefined
  return {
    _tag: "SpanLink",
    span: Tracer.externalSpan({ traceId: parsed.traceId, spanId: parsed.spanId, sampled: parsed.sampled }),
    attributes: { "alkstore.link": "enqueued" }
  }
}

// Milliseconds, 1 ms to ~9 h (2^25 ms) on a doubling curve: Effect counts the +Inf bucket in `count`.
const millisBoundaries = MetricBoundaries.exponential({ start: 1, factor: 2, count: 27 })

const keys = {
  enqueued: MetricKey.counter("alkstore.queue.enqueued", { description: "jobs enqueued", incremental: true }),
  claimed: MetricKey.counter("alkstore.queue.claimed", { description: "claims taken", incremental: true }),
  acked: MetricKey.counter("alkstore.queue.acked", { description: "claims acked (the job is done)", incremental: true }),
  retried: MetricKey.counter("alkstore.queue.retried", {
    description: "claims sent back to pending to retry",
    incremental: true
  }),
  dead: MetricKey.counter("alkstore.queue.dead", { description: "jobs moved to dead (expiry included)", incremental: true }),
  expired: MetricKey.counter("alkstore.queue.expired", {
    description: "jobs moved to dead because they expired",
    incremental: true
  }),
  leaseLapses: MetricKey.counter("alkstore.queue.lease_lapses", {
    description: "claims taken from a lapsed lease (its previous claim neither settled nor heartbeat in time)",
    incremental: true
  }),
  wait: MetricKey.histogram("alkstore.queue.wait_ms", millisBoundaries, "from due (enqueue, or retry time) to claim, ms"),
  handler: MetricKey.histogram("alkstore.queue.handler_ms", millisBoundaries, "handler time per job in process, ms"),
  depth: MetricKey.gauge("alkstore.queue.depth", { description: "jobs by state (sampled)" }),
  oldestPendingAge: MetricKey.gauge("alkstore.queue.oldest_pending_age_ms", {
    description: "age of the oldest due pending job, ms (sampled; 0 when none)"
  }),
  schedulerFires: MetricKey.counter("alkstore.scheduler.fires", {
    description: "jobs enqueued by schedules",
    incremental: true
  }),
  leadership: MetricKey.counter("alkstore.scheduler.leadership_changes", {
    description: "scheduler leadership acquired, released or lost, by this process",
    incremental: true
  })
} as const

/** Every metric alkstore keeps (untagged: tag them to read one queue's). */
export const metrics = {
  enqueued: Metric.fromMetricKey(keys.enqueued),
  claimed: Metric.fromMetricKey(keys.claimed),
  acked: Metric.fromMetricKey(keys.acked),
  retried: Metric.fromMetricKey(keys.retried),
  dead: Metric.fromMetricKey(keys.dead),
  expired: Metric.fromMetricKey(keys.expired),
  leaseLapses: Metric.fromMetricKey(keys.leaseLapses),
  wait: Metric.fromMetricKey(keys.wait),
  handler: Metric.fromMetricKey(keys.handler),
  depth: Metric.fromMetricKey(keys.depth),
  oldestPendingAge: Metric.fromMetricKey(keys.oldestPendingAge),
  schedulerFires: Metric.fromMetricKey(keys.schedulerFires),
  leadership: Metric.fromMetricKey(keys.leadership)
} as const

const none: ReadonlyArray<never> = []

/**
 * One metric tagged for good: its registry entry is looked up once and kept
 * (`Metric.tagged` would build and hash a tagged key on every update), so an
 * update is a direct, synchronous write.
 */
const taggedOnce = <T extends MetricKeyType.MetricKeyType<any, any>>(
  key: MetricKey.MetricKey<T>,
  tags: ReadonlyArray<readonly [string, string]>
) => Metric.fromMetricKey(MetricKey.taggedWithLabels(key, tags.map(([k, v]) => MetricLabel.make(k, v))))

/** One queue's metric instances: updates without effects, for the hot paths. */
export const queueMetrics = (queue: string) => {
  const tags = [["queue", queue]] as const
  const enqueued = taggedOnce(keys.enqueued, tags)
  const claimed = taggedOnce(keys.claimed, tags)
  const acked = taggedOnce(keys.acked, tags)
  const retried = taggedOnce(keys.retried, tags)
  const dead = taggedOnce(keys.dead, tags)
  const expired = taggedOnce(keys.expired, tags)
  const leaseLapses = taggedOnce(keys.leaseLapses, tags)
  const wait = taggedOnce(keys.wait, tags)
  const handler = taggedOnce(keys.handler, tags)
  return {
    enqueued: (n: number) => enqueued.unsafeUpdate(n, none),
    claimed: (n: number) => claimed.unsafeUpdate(n, none),
    acked: (n: number) => acked.unsafeUpdate(n, none),
    retried: () => retried.unsafeUpdate(1, none),
    dead: (n: number) => dead.unsafeUpdate(n, none),
    expired: (n: number) => {
      expired.unsafeUpdate(n, none)
      dead.unsafeUpdate(n, none)
    },
    leaseLapse: () => leaseLapses.unsafeUpdate(1, none),
    wait: (millis: number) => wait.unsafeUpdate(millis, none),
    handler: (millis: number) => handler.unsafeUpdate(millis, none)
  }
}

export type QueueMetrics = ReturnType<typeof queueMetrics>

/** The gauges of one queue, from a depth reading (off the hot path: tagged per call). */
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
  for (const state of ["pending", "scheduled", "claimed", "dead"] as const) {
    taggedOnce(keys.depth, [["queue", queue], ["state", state]]).unsafeUpdate(depth[state], none)
  }
  taggedOnce(keys.oldestPendingAge, [["queue", queue]]).unsafeUpdate(depth.oldestPendingAgeMillis ?? 0, none)
}

/** Counts expiries of a queue (maintenance's, by queue): each is also a death. */
/**
 * Counts the holders of a key that a keyed enqueue or a `requeueDead` moved
 * to dead on the way, by the `last_error` each got (`expired`, else spent).
 */
export const countHoldersBuried = (queue: string, lastErrors: ReadonlyArray<unknown>): void => {
  if (lastErrors.length === 0) return
  const m = queueMetrics(queue)
  for (const error of lastErrors) {
    if (error === "expired") m.expired(1)
    else m.dead(1)
  }
}

export const countExpired = (queue: string, count: number): void => {
  if (count > 0) queueMetrics(queue).expired(count)
}

/** Counts `count` fires of schedules into `queue`. */
export const countFires = (queue: string, count: number): void =>
  taggedOnce(keys.schedulerFires, [["queue", queue]]).unsafeUpdate(count, none)

/** Counts a leadership change of this process's scheduler runner. */
export const countLeadership = (change: "acquired" | "released" | "lost"): void =>
  taggedOnce(keys.leadership, [["change", change]]).unsafeUpdate(1, none)
