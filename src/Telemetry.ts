/**
 * Tracing and metrics (docs/observability.md). alkstore's operations make
 * spans through the fiber's `Tracer` when one is installed (an
 * OpenTelemetry layer from `@effect/opentelemetry`, say) and update
 * Effect `Metric`s tagged with the queue; any metrics exporter reads them.
 * This module names them, for dashboards, alerts and tests.
 *
 * @module
 */
import type { Context } from "effect"
import * as internal from "./internal/telemetry.js"

/**
 * Every metric alkstore updates. Per-queue metrics carry the tag `queue`
 * (an outbox's is `__alkstore_outbox:{name}`); `depth` also `state`
 * (`pending`, `scheduled`, `claimed`, `dead`); `leadershipChanges` carries
 * `change` (`acquired`, `released`, `lost`). Histograms are in milliseconds.
 *
 * - `enqueued` — jobs written by `enqueue`/`enqueueBatch` (a key meeting its live job counts too)
 * - `claimed` — claims taken (`claim`, `claimBatch`, `take`, `stream`, `process`, an outbox's runs)
 * - `acked` — claims acked (the job is done)
 * - `retried` — claims sent back to pending by `retry` (or a failed handler)
 * - `dead` — jobs moved to dead: `fail`, `retry` with the attempts spent, a claim meeting a spent or expired job, an undecodable payload, and expiry
 * - `expired` — jobs moved to dead because they expired (maintenance, or a claim meeting one)
 * - `leaseLapses` — claims taken from a lapsed lease (a worker that neither settled nor heartbeat in time)
 * - `wait` — from due (`runAt`: the enqueue, the retry's instant, the schedule's boundary) to claim
 * - `handler` — a `process` (or outbox `run`) handler's time per job
 * - `depth`, `oldestPendingAge` — gauges, refreshed by `Queues.sampleMetrics` and by `queue.stats`
 * - `schedulerFires` — jobs enqueued by schedules (tagged with the target queue)
 * - `leadershipChanges` — this process's scheduler runners taking, releasing and losing leadership
 */
export const metrics = {
  enqueued: internal.metrics.enqueued,
  claimed: internal.metrics.claimed,
  acked: internal.metrics.acked,
  retried: internal.metrics.retried,
  dead: internal.metrics.dead,
  expired: internal.metrics.expired,
  leaseLapses: internal.metrics.leaseLapses,
  wait: internal.metrics.wait,
  handler: internal.metrics.handler,
  depth: internal.metrics.depth,
  oldestPendingAge: internal.metrics.oldestPendingAge,
  schedulerFires: internal.metrics.schedulerFires,
  leadershipChanges: internal.metrics.leadership
} as const

/** The span attributes alkstore sets (`alkstore.queue`, `alkstore.job.id`, …). */
export const attributes = internal.attr

/**
 * The W3C `traceparent` of the current span of `context`, as alkstore
 * stores it with a job enqueued there (`undefined` outside any span).
 */
export const traceparent: (context: Context.Context<never>) => string | undefined =
  internal.traceparentOf
