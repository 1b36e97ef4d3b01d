import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Effect } from "effect"
import type * as Q from "../Queues.js"
import { Engine, type EngineShape } from "./engine.js"
import { makeLimits } from "./limits.js"
import { checkName } from "./names.js"
import { type QueueOptionsInput, queueDefaults, resolveQueueOptions } from "./options.js"
import { jsonCodec, type PayloadCodec, schemaCodec } from "./payload.js"
import { makeQueue } from "./queue.js"
import { countExpired, setGauges, traced } from "./telemetry.js"

/** The `Queues` service over an engine: queues by name, maintenance, the gauges' sampler and flow-control limits. */
export const makeQueues: Effect.Effect<Q.QueuesShape, never, Engine> = Effect.gen(function*() {
  const engine = yield* Engine
  const queue = (name: string, opts?: QueueOptionsInput) =>
    Effect.gen(function*() {
      const nameError = checkName(name)
      if (nameError !== undefined) return yield* nameError
      const stamp = yield* resolveQueueOptions(queueDefaults, opts)
      const codec = opts?.schema === undefined ? jsonCodec : schemaCodec(opts.schema)
      return makeQueue(engine, name, stamp, codec as PayloadCodec<unknown>)
    })
  return {
    queue: queue as Q.QueuesShape["queue"],
    maintenance: runMaintenance(engine),
    sampleMetrics: makeSampler(engine),
    ...makeLimits(engine)
  }
})

/** One maintenance round (expiry and retention), its expiries counted per queue. */
export const runMaintenance = (engine: EngineShape): Effect.Effect<Q.MaintenanceResult, SqlError> =>
  traced("alkstore.queue.maintenance", () => ({}), Effect.gen(function*() {
    const at = yield* Clock.currentTimeMillis
    const { expired, expiredByQueue, purged } = yield* engine.queues.maintenance(at, at - engine.settings.deadRetentionMillis)
    for (const { count, queue } of expiredByQueue) countExpired(queue, count)
    return { expired, purged }
  }), (result, span) => {
    span.attribute("alkstore.expired", result.expired)
    span.attribute("alkstore.purged", result.purged)
  })

/**
 * Refreshes every queue's depth and oldest-pending-age gauges from one read
 * of all queues; a queue seen before and empty now reads zero.
 */
const makeSampler = (engine: EngineShape): Effect.Effect<void, SqlError> => {
  let seen = new Set<string>()
  return Effect.gen(function*() {
    const at = yield* Clock.currentTimeMillis
    const rows = yield* engine.admin.queueDepths(at)
    const now = new Set<string>()
    for (const row of rows) {
      now.add(row.queue)
      setGauges(row.queue, {
        ...row,
        oldestPendingAgeMillis: row.oldest_pending_run_at === null ? undefined : Math.max(0, at - row.oldest_pending_run_at)
      })
    }
    for (const queue of seen) {
      if (!now.has(queue)) setGauges(queue, { pending: 0, scheduled: 0, claimed: 0, dead: 0, oldestPendingAgeMillis: undefined })
    }
    seen = now
  })
}
