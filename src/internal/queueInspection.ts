import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Effect, Option } from "effect"
import type * as Q from "../Queues.js"
import { isInvalid, optionalDurationMillis } from "./duration.js"
import { type EngineShape, signalOnCommit } from "./engine.js"
import { oldestPendingAge, storedJob } from "./jobView.js"
import { isJobId, ownOptions, positiveCount } from "./options.js"
import { wakingAfter } from "./patience.js"
import { inRounds } from "./rounds.js"
import { attr, setGauges, traced } from "./telemetry.js"


/**
 * A queue's inspection and repair (`getJob`, `cancel`, `stats`, `dead`,
 * `requeueDead`, `purgeDead`), scoped to the queue: a job id from another
 * queue is absent and unchanged. `freed` wakes waiters a limited queue held
 * back when a cancel frees a slot (flow control).
 */
export const makeInspection = <A>(
  engine: EngineShape,
  name: string,
  freed: Effect.Effect<void, SqlError>
): Pick<Q.Queue<A>, "getJob" | "cancel" | "stats" | "dead" | "requeueDead" | "purgeDead"> => {
  const storage = engine.queues
  const flow = engine.flow
  const now = Clock.currentTimeMillis
  const signal = (count: number) => signalOnCommit(engine, name, count)
  const queueAttributes = () => ({ [attr.queue]: name })
  return {
    getJob: (id) => isJobId(id) ? Effect.map(storage.get(name, id), Option.map(storedJob)) : Effect.succeedNone,
    cancel: (id) =>
      traced(
        "alkstore.queue.cancel",
        () => ({ [attr.queue]: name, [attr.jobId]: id }),
        isJobId(id)
          // A cancel whose wake an interruption cut off after its write tells this process's waiters anyway
          // (patience.ts `wakingAfter`), as a settle does.
          ? wakingAfter(storage.cancel(name, id), freed)
          : Effect.succeed(false),
        (ok, span) => span.attribute(attr.outcome, ok ? "cancelled" : "absent")
      ),
    // A stats reading also refreshes the queue's gauges.
    stats: traced("alkstore.queue.stats", queueAttributes, Effect.gen(function*() {
      const at = yield* now
      const row = yield* storage.stats(name, at)
      setGauges(name, { ...row, oldestPendingAgeMillis: row.oldestPendingRunAt === null ? undefined : Math.max(0, at - row.oldestPendingRunAt) })
      engine.gaugedQueues.add(name) // the sampler zeroes them once the queue is empty
      const claimable = row.pending === 0 ? undefined : yield* flow.claimablePending(name, at)
      return {
        pending: row.pending,
        scheduled: row.scheduled,
        claimed: row.claimed,
        dead: row.dead,
        oldestPendingAge: oldestPendingAge(at, row.oldestPendingRunAt),
        heldBack: claimable === undefined ? 0 : Math.max(0, row.pending - claimable)
      }
    })),
    dead: (given) =>
      Effect.suspend(() => {
        const opts = ownOptions(given)
        if (isInvalid(opts)) return Effect.fail(opts)
        return Effect.flatMap(positiveCount("limit", opts?.limit ?? 100), (limit) =>
          Effect.map(storage.dead(name, limit), (rows) => rows.map(storedJob)))
      }),
    requeueDead: (id) =>
      traced(
        "alkstore.queue.requeue_dead",
        () => ({ [attr.queue]: name, [attr.jobId]: id }),
        isJobId(id)
          ? wakingAfter(Effect.flatMap(now, (at) => storage.requeueDead(name, id, at)), signal(1))
          : Effect.succeed(false),
        (ok, span) => span.attribute(attr.outcome, ok ? "requeued" : "unchanged")
      ),
    // In bounded rounds, as maintenance's purge (src/internal/rounds.ts): a queue of a million dead jobs is
    // not one statement.
    purgeDead: (olderThan) =>
      traced("alkstore.queue.purge_dead", queueAttributes, Effect.gen(function*() {
        const age = yield* optionalDurationMillis("olderThan", olderThan)
        const diedBefore = age === undefined ? undefined : (yield* now) - age
        const limit = storage.maintenanceRows
        let purged = 0
        const rounds = yield* inRounds(Effect.map(storage.purgeDead(name, diedBefore, limit), (n) => {
          purged += n
          return n === limit
        }))
        return { purged, rounds }
      }), ({ purged, rounds }, span) => {
        span.attribute(attr.count, purged)
        span.attribute("alkstore.rounds", rounds)
      }).pipe(Effect.map(({ purged }) => purged))
  }
}
