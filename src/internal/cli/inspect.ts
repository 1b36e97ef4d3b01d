import { Args, Command, Options } from "@effect/cli"
import { Clock, DateTime, Duration, Effect, Option } from "effect"
import * as Admin from "../../Admin.js"
import { db, jobId, json, onStore, output } from "./common.js"
import { Refused } from "./exit.js"
import { plainJob, plainLock, plainQueue, plainSchedule, relative, shortDuration } from "./plain.js"
import { clip, fields, table } from "./table.js"

/** The read-only commands: stats, jobs, job, dead, schedules, locks. */

const ms = (instant: DateTime.DateTime) => DateTime.toEpochMillis(instant)
const age = (value: Option.Option<Duration.Duration>) =>
  Option.match(value, { onNone: () => "-", onSome: (d) => shortDuration(Duration.toMillis(d)) })

const queueOption = Options.text("queue").pipe(Options.withDescription("the queue's name"))
const limit = Options.integer("limit").pipe(
  Options.withDefault(50),
  Options.withDescription("at most this many jobs (1–1000), newest first")
)

export const stats = Command.make("stats", { db, json }, ({ db, json }) =>
  onStore(db, Effect.gen(function*() {
    const admin = yield* Admin.Admin
    const queues = yield* admin.queues
    const totals = yield* admin.totals
    yield* output(json, { queues: queues.map(plainQueue), totals }, () =>
      queues.length === 0
        ? "no queues yet"
        : table(
          ["QUEUE", "PENDING", "SCHEDULED", "CLAIMED", "DEAD", "OLDEST PENDING"],
          queues.map((q) => [q.name, q.pending, q.scheduled, q.claimed, q.dead, age(q.oldestPendingAge)])
        ) + `\n\n${totals.live} jobs in the store; ${totals.lastJobId} enqueued since it was created`)
  }))).pipe(Command.withDescription("every queue's depths: pending (due), scheduled, claimed, dead, oldest pending age"))

const jobsTable = (jobs: ReadonlyArray<Admin.JobInfo>, now: number) =>
  jobs.length === 0
    ? "no jobs"
    : table(
      ["ID", "QUEUE", "STATE", "ATTEMPTS", "RUN AT", "PAYLOAD", "LAST ERROR"],
      jobs.map((j) => [
        j.id,
        j.queue,
        j.state,
        `${j.attempts}/${j.maxAttempts}`,
        relative(ms(j.runAt), now),
        clip(JSON.stringify(j.payload) ?? "", 40),
        clip(Option.getOrElse(j.lastError, () => "-"), 50)
      ])
    )

export const jobs = Command.make("jobs", {
  db,
  json,
  queue: Options.optional(queueOption),
  state: Options.choice("state", Admin.jobStates).pipe(Options.optional, Options.withDescription("only jobs in this state")),
  limit
}, ({ db, json, limit, queue, state }) =>
  onStore(db, Effect.gen(function*() {
    const admin = yield* Admin.Admin
    const found = yield* admin.jobs({
      limit,
      ...Option.match(queue, { onNone: () => ({}), onSome: (queue) => ({ queue }) }),
      ...Option.match(state, { onNone: () => ({}), onSome: (state) => ({ state }) })
    })
    const now = yield* Clock.currentTimeMillis
    yield* output(json, found.map(plainJob), () => jobsTable(found, now))
  }))).pipe(Command.withDescription("jobs across queues, filtered by queue and state, newest first"))

export const jobDetail = (job: Admin.JobInfo, now: number) => {
  const at = (instant: DateTime.DateTime) => `${DateTime.formatIso(instant)} (${relative(ms(instant), now)})`
  const optionalAt = (instant: Option.Option<DateTime.DateTime>) => Option.match(instant, { onNone: () => "-", onSome: at })
  return fields([
    ["id", String(job.id)],
    ["queue", job.queue],
    ["state", job.state],
    ["attempts", `${job.attempts} of ${job.maxAttempts}`],
    ["priority", String(job.priority)],
    ["created", at(job.createdAt)],
    ["run at", at(job.runAt)],
    ["claimed until", optionalAt(job.claimedUntil)],
    ["worker", Option.getOrElse(job.workerId, () => "-")],
    ["expires", optionalAt(job.expiresAt)],
    ["died", optionalAt(job.diedAt)],
    ["last error", Option.getOrElse(job.lastError, () => "-")],
    ["visibility", shortDuration(Duration.toMillis(job.visibilityTimeout))],
    ["backoff base", shortDuration(Duration.toMillis(job.backoffBase))],
    // The enqueuer's span, to look the request up in a tracing backend.
    ["trace id", Option.match(job.traceContext, { onNone: () => "-", onSome: (t) => t.traceId })],
    ["span id", Option.match(job.traceContext, { onNone: () => "-", onSome: (t) => t.sampled ? t.spanId : `${t.spanId} (not sampled)` })],
    ["payload", JSON.stringify(job.payload) ?? ""]
  ])
}

export const job = Command.make("job", { db, json, id: Args.integer({ name: "id" }) }, ({ db, id, json }) =>
  Effect.flatMap(jobId(id), (id) =>
    onStore(db, Effect.gen(function*() {
      const admin = yield* Admin.Admin
      const found = yield* admin.job(id)
      if (Option.isNone(found)) return yield* new Refused({ reason: `no job ${id} (acked and cancelled jobs are deleted)` })
      const now = yield* Clock.currentTimeMillis
      yield* output(json, plainJob(found.value), () => jobDetail(found.value, now))
    })))).pipe(Command.withDescription("one job by id, in whichever queue: state, attempts, timestamps, last error, trace context, payload"))

export const dead = Command.make("dead", { db, json, queue: Options.optional(queueOption), limit }, ({ db, json, limit, queue }) =>
  onStore(db, Effect.gen(function*() {
    const admin = yield* Admin.Admin
    const found = yield* admin.jobs({
      state: "dead",
      limit,
      ...Option.match(queue, { onNone: () => ({}), onSome: (queue) => ({ queue }) })
    })
    const now = yield* Clock.currentTimeMillis
    yield* output(json, found.map(plainJob), () =>
      found.length === 0
        ? "no dead jobs"
        : table(
          ["ID", "QUEUE", "ATTEMPTS", "DIED", "LAST ERROR", "PAYLOAD"],
          found.map((j) => [
            j.id,
            j.queue,
            `${j.attempts}/${j.maxAttempts}`,
            Option.match(j.diedAt, { onNone: () => "-", onSome: (d) => relative(ms(d), now) }),
            clip(Option.getOrElse(j.lastError, () => "-"), 60),
            clip(JSON.stringify(j.payload) ?? "", 40)
          ])
        ))
  }))).pipe(Command.withDescription("dead jobs with their errors (all queues, or one), the newest job (highest id) first"))

export const schedules = Command.make("schedules", { db, json }, ({ db, json }) =>
  onStore(db, Effect.gen(function*() {
    const found = yield* Effect.flatMap(Admin.Admin, (admin) => admin.schedules)
    const now = yield* Clock.currentTimeMillis
    yield* output(json, found.map(plainSchedule), () =>
      found.length === 0
        ? "no schedules"
        : table(
          ["NAME", "SPEC", "QUEUE", "NEXT FIRE", "PRIORITY", "MAX ATTEMPTS", "PAYLOAD"],
          found.map((s) => [
            s.name,
            s.spec,
            s.queue,
            `${DateTime.formatIso(s.nextFireAt)} (${relative(ms(s.nextFireAt), now)})`,
            s.opts.priority,
            s.opts.maxAttempts,
            clip(JSON.stringify(s.payload) ?? "", 40)
          ])
        ))
  }))).pipe(Command.withDescription("registered schedules with their next fire"))

export const locks = Command.make("locks", { db, json }, ({ db, json }) =>
  onStore(db, Effect.gen(function*() {
    const found = yield* Effect.flatMap(Admin.Admin, (admin) => admin.locks)
    const now = yield* Clock.currentTimeMillis
    yield* output(json, found.map(plainLock), () =>
      found.length === 0
        ? "no locks"
        : table(
          ["NAME", "HELD", "OWNER", "TOKEN", "EXPIRES"],
          found.map((l) => [l.name, l.held ? "yes" : "no", l.owner, l.token, relative(ms(l.expiresAt), now)])
        ))
  }))).pipe(Command.withDescription("locks with their last holder, fencing token and lease (the scheduler's leader lock included)"))
