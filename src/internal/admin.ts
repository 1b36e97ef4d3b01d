import type { SqlError } from "@effect/sql/SqlError"
import { Clock, DateTime, Effect, Option, type Tracer } from "effect"
import type * as A from "../Admin.js"
import { InvalidName, InvalidOptions } from "../StoreError.js"
import { Engine, type EngineShape, type JobRow } from "./engine.js"
import { oldestPendingAge, toJob } from "./jobView.js"
import { isJobId, ownOptions, queueDefaults } from "./options.js"
import { isInvalid } from "./duration.js"
import { isWellFormed, notWellFormedReason, nulReason, printable } from "./names.js"
import { jsonCodec } from "./payload.js"
import { makeQueue } from "./queue.js"
import { toSchedule } from "./scheduler.js"
import { attr, parseTraceparent, traced } from "./telemetry.js"

const states = new Set<string>(["pending", "scheduled", "claimed", "dead"])

/** The payload as stored when it is JSON; the raw text otherwise (an operator must still see it). */
const parsePayload = (stored: string): unknown => {
  try {
    return JSON.parse(stored) as unknown
  } catch {
    return stored
  }
}

export const toJobInfo = (row: JobRow): A.JobInfo => ({
  ...toJob(row, parsePayload(row.payload)),
  state: row.state,
  traceContext: Option.fromNullable(parseTraceparent(row.trace_context))
})

const checkId = (id: number) =>
  isJobId(id)
    ? Effect.succeed(id)
    : Effect.fail(new InvalidOptions({ field: "id", reason: "must be a whole number of at least 1" }))

/**
 * Any well-formed non-empty name without NUL (which no engine stores: names.ts): operators read outbox queues
 * too, whose names are not the application's.
 */
const checkQueue = (name: string) =>
  typeof name !== "string" || name.length === 0
    ? Effect.fail(new InvalidName({ name: printable(name), reason: typeof name !== "string" ? "must be a string" : "must not be empty" }))
    : !isWellFormed(name)
    ? Effect.fail(new InvalidName({ name, reason: notWellFormedReason }))
    : name.includes("\u0000")
    ? Effect.fail(new InvalidName({ name, reason: nulReason }))
    : Effect.succeed(name)

const checkFilter = (filter: A.JobsFilter) =>
  Effect.gen(function*() {
    const queue = filter.queue === undefined ? undefined : yield* checkQueue(filter.queue)
    if (filter.state !== undefined && !states.has(filter.state)) {
      return yield* new InvalidOptions({ field: "state", reason: "must be pending, scheduled, claimed or dead" })
    }
    const limit = filter.limit ?? 50
    if (!Number.isSafeInteger(limit) || limit < 1 || limit > 1000) {
      return yield* new InvalidOptions({ field: "limit", reason: "must be a whole number from 1 to 1000" })
    }
    const beforeId = filter.beforeId === undefined ? undefined : yield* checkId(filter.beforeId)
    return { queue, state: filter.state, limit, beforeId }
  })

/** The job's own queue as a handle (defaults only matter for enqueues, which repairs never do). */
const queueOf = (engine: EngineShape, name: string) => makeQueue(engine, name, queueDefaults, jsonCodec)

/**
 * A repair's result as the span's outcome, so a trace tells a refused or missing job from a changed one
 * without reading the reply.
 */
const repairOutcome = (result: A.RepairOutcome, span: Tracer.Span) =>
  span.attribute(attr.outcome, result._tag === "Done" ? "done" : result._tag === "Refused" ? "refused" : "absent")

export const makeAdmin: Effect.Effect<A.AdminShape, never, Engine> = Effect.gen(function*() {
  const engine = yield* Engine
  const now = Clock.currentTimeMillis
  // Spans through `traced` (telemetry.ts): named as every alkstore span, and made only when a tracer is installed.
  const job = (id: number) =>
    traced(
      "alkstore.admin.job",
      () => ({ [attr.jobId]: id }),
      Effect.flatMap(checkId(id), (id) =>
        Effect.flatMap(now, (at) => Effect.map(engine.admin.job(id, at), Option.map(toJobInfo)))),
      (found, span) => span.attribute(attr.outcome, Option.isSome(found) ? "found" : "absent")
    )

  /** Looks the job up, checks its state, runs the repair on its queue, tells what happened. */
  const repair = (
    id: number,
    allowed: ReadonlyArray<A.JobState>,
    run: (queue: string, id: number) => Effect.Effect<boolean, SqlError>,
    refusal: string
  ) =>
    Effect.gen(function*() {
      const found = yield* job(id)
      if (Option.isNone(found)) return { _tag: "NotFound" } as const
      const before = found.value
      if (!allowed.includes(before.state)) {
        return { _tag: "Refused", job: before, reason: `job ${id} is ${before.state}: ${refusal}` } as const
      }
      if (!(yield* run(before.queue, id))) {
        const after = yield* job(id)
        return Option.isNone(after)
          ? ({ _tag: "NotFound" } as const)
          : ({ _tag: "Refused", job: after.value, reason: `job ${id} could not be changed (now ${after.value.state}); a live job may hold its key` } as const)
      }
      const after = yield* job(id)
      return { _tag: "Done", job: Option.getOrElse(after, () => before) } as const
    })

  const admin: A.AdminShape = {
    queues: traced("alkstore.admin.queues", () => ({}), Effect.gen(function*() {
      const at = yield* now
      const rows = yield* engine.admin.queueDepths(at)
      const byName = new Map<string, A.QueueSummary>()
      for (const row of rows) {
        byName.set(row.queue, {
          name: row.queue,
          pending: row.pending,
          scheduled: row.scheduled,
          claimed: row.claimed,
          dead: row.dead,
          oldestPendingAge: oldestPendingAge(at, row.oldest_pending_run_at)
        })
      }
      // A queue a schedule feeds is worth seeing before its first job.
      for (const schedule of yield* engine.admin.schedules) {
        if (!byName.has(schedule.queue)) {
          byName.set(schedule.queue, {
            name: schedule.queue,
            pending: 0,
            scheduled: 0,
            claimed: 0,
            dead: 0,
            oldestPendingAge: Option.none()
          })
        }
      }
      return [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    }), (queues, span) => span.attribute(attr.count, queues.length)),
    totals: traced("alkstore.admin.totals", () => ({}), Effect.gen(function*() {
      const at = yield* now
      const rows = yield* engine.admin.queueDepths(at)
      const live = rows.reduce((sum, row) => sum + row.pending + row.scheduled + row.claimed + row.dead, 0)
      return { lastJobId: yield* engine.admin.lastJobId, live }
    })),
    jobs: (given) =>
      Effect.suspend(() => {
        const read = ownOptions(given) // `null` is no filter; a throwing getter InvalidOptions
        if (isInvalid(read)) return Effect.fail(read)
        const filter: A.JobsFilter = read ?? {}
        return traced(
          "alkstore.admin.jobs",
          () => (typeof filter.queue !== "string" ? {} : { [attr.queue]: filter.queue }),
          Effect.gen(function*() {
            const checked = yield* checkFilter(filter)
            const rows = yield* engine.admin.jobs(checked, yield* now)
            return rows.map(toJobInfo)
          }),
          (jobs, span) => span.attribute(attr.count, jobs.length)
        )
      }),
    job,
    requeue: (id) =>
      traced(
        "alkstore.admin.requeue",
        () => ({ [attr.jobId]: id }),
        repair(id, ["dead"], (queue, id) => queueOf(engine, queue).requeueDead(id), "only dead jobs are requeued"),
        repairOutcome
      ),
    cancel: (id) =>
      traced(
        "alkstore.admin.cancel",
        () => ({ [attr.jobId]: id }),
        repair(
          id,
          ["pending", "scheduled", "claimed"],
          (queue, id) => queueOf(engine, queue).cancel(id),
          "dead jobs are purged, not cancelled"
        ),
        repairOutcome
      ),
    purgeDead: (queue, olderThan) =>
      traced(
        "alkstore.admin.purge_dead",
        () => ({ [attr.queue]: queue }),
        Effect.flatMap(checkQueue(queue), (name) => queueOf(engine, name).purgeDead(olderThan)),
        (purged, span) => span.attribute(attr.count, purged)
      ),
    schedules: traced(
      "alkstore.admin.schedules",
      () => ({}),
      Effect.map(engine.admin.schedules, (rows) => rows.map(toSchedule)),
      (schedules, span) => span.attribute(attr.count, schedules.length)
    ),
    locks: traced("alkstore.admin.locks", () => ({}), Effect.gen(function*() {
      const at = yield* now
      const rows = yield* engine.admin.locks
      return rows.map((row): A.LockInfo => ({
        name: row.name,
        owner: row.owner,
        token: row.token,
        expiresAt: DateTime.unsafeMake(row.expires_at) as DateTime.Utc,
        held: row.expires_at > at
      }))
    }), (locks, span) => span.attribute(attr.count, locks.length)),
    migrations: traced("alkstore.admin.migrations", () => ({}), engine.admin.migrations)
  }
  return admin
})
