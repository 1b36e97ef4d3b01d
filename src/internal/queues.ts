import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Effect, Schema } from "effect"
import type * as Q from "../Queues.js"
import { InvalidOptions } from "../StoreError.js"
import { fromChecked } from "./duration.js"
import { Engine, type EngineShape, signalOnCommit } from "./engine.js"
import { makeLimits } from "./limits.js"
import { checkName } from "./names.js"
import { ownOptions, type QueueOptionsInput, queueDefaults, resolveQueueOptions } from "./options.js"
import { jsonCodec, type PayloadCodec, schemaCodec } from "./payload.js"
import { makeQueue } from "./queue.js"
import { inRounds } from "./rounds.js"
import { countExpired, setGauges, traced } from "./telemetry.js"

/** The `Queues` service over an engine: queues by name, maintenance, the gauges' sampler and flow-control limits. */
export const makeQueues: Effect.Effect<Q.QueuesShape, never, Engine> = Effect.gen(function*() {
  const engine = yield* Engine
  const queue = (name: string, opts?: QueueOptionsInput) =>
    Effect.gen(function*() {
      const nameError = checkName(name)
      if (nameError !== undefined) return yield* nameError
      const read = yield* fromChecked(ownOptions(opts))
      const stamp = yield* resolveQueueOptions(queueDefaults, read)
      const schema = read?.schema
      if (schema !== undefined && !Schema.isSchema(schema)) {
        return yield* new InvalidOptions({ field: "schema", reason: "must be an Effect Schema" })
      }
      const codec = schema === undefined ? jsonCodec : schemaCodec(schema)
      return makeQueue(engine, name, stamp, codec as PayloadCodec<unknown>)
    })
  return {
    queue: queue as Q.QueuesShape["queue"],
    maintenance: runMaintenance(engine),
    sampleMetrics: makeSampler(engine),
    ...makeLimits(engine)
  }
})

/**
 * A maintenance run (expiry and retention) at one instant, in bounded rounds
 * (src/internal/rounds.ts) of at most the engine's `maintenanceRows` of each
 * kind (expired jobs, dead jobs past retention, flow control's stale claim-log
 * scopes), until none is left: a backlog (a million jobs that died in an
 * outage, purged a week later; a queue's expired jobs after its workers were
 * down) no longer runs as one statement. Expiries counted per queue.
 */
export const runMaintenance = (engine: EngineShape): Effect.Effect<Q.MaintenanceResult, SqlError> =>
  traced("alkstore.queue.maintenance", () => ({}), Effect.gen(function*() {
    const at = yield* Clock.currentTimeMillis
    const purgeDiedBefore = at - engine.settings.deadRetentionMillis
    const limit = engine.queues.maintenanceRows
    let expired = 0
    let purged = 0
    const round = Effect.tap(engine.queues.maintenance(at, purgeDiedBefore, limit), (round) => expiriesFreed(engine, round.expiredByQueue))
    const rounds = yield* inRounds(Effect.map(round, (round) => {
      for (const { count, queue } of round.expiredByQueue) countExpired(queue, count)
      expired += round.expired
      purged += round.purged
      return round.expired === limit || round.purged === limit || round.pruned === limit
    }))
    return { expired, purged, rounds }
  }), (result, span) => {
    span.attribute("alkstore.expired", result.expired)
    span.attribute("alkstore.purged", result.purged)
    span.attribute("alkstore.rounds", result.rounds)
  }).pipe(Effect.map(({ expired, purged }) => ({ expired, purged })))

/**
 * An expired job no longer holds its slot or its group's place (flow
 * control): waiters of the queues a round expired jobs of are woken here,
 * and elsewhere where the queue has limits (PostgreSQL's NOTIFY; SQLite's
 * commits tell other processes by themselves).
 */
const expiriesFreed = (engine: EngineShape, queues: ReadonlyArray<{ readonly queue: string }>) =>
  Effect.forEach(queues, ({ queue }) =>
    Effect.zipRight(signalOnCommit(engine, queue, 1), engine.flow.freedIfLimited(queue)), { discard: true })

/**
 * Refreshes every queue's depth and oldest-pending-age gauges from one read
 * of all queues; a queue whose gauges this store set before (here, or by a
 * queue's `stats`) and empty now reads zero.
 */
const makeSampler = (engine: EngineShape): Effect.Effect<void, SqlError> => {
  const seen = engine.gaugedQueues
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
    seen.clear()
    for (const queue of now) seen.add(queue)
  })
}
