import { Args, Command, Options } from "@effect/cli"
import { Effect, Option } from "effect"
import * as Admin from "../../Admin.js"
import * as Scheduler from "../../Scheduler.js"
import { db, jobId, json, onStore, output, parseAge, parseJson } from "./common.js"
import { Refused, UsageError } from "./exit.js"
import { plainJob, plainSchedule } from "./plain.js"
import { sanitize } from "./table.js"

/** The commands that change the store: requeue, cancel, purge, schedule add|remove, migrate. */

const repairCommand = (
  name: "requeue" | "cancel",
  description: string,
  run: (admin: Admin.AdminShape, id: number) => ReturnType<Admin.AdminShape["requeue"]>
) =>
  Command.make(name, { db, json, id: Args.integer({ name: "id" }) }, ({ db, id, json }) =>
    Effect.flatMap(jobId(id), (id) =>
      onStore(db, Effect.gen(function*() {
        const outcome = yield* run(yield* Admin.Admin, id)
        switch (outcome._tag) {
          case "NotFound":
            return yield* new Refused({ reason: `no job ${id}` })
          case "Refused":
            return yield* new Refused({ reason: outcome.reason })
          case "Done":
            return yield* output(json, { [name === "requeue" ? "requeued" : "cancelled"]: plainJob(outcome.job) }, () =>
              name === "requeue"
                ? `requeued job ${id} (queue ${sanitize(outcome.job.queue)}): ${outcome.job.state}, attempts reset`
                : `cancelled job ${id} (queue ${sanitize(outcome.job.queue)})`)
        }
      })))).pipe(Command.withDescription(description))

export const requeue = repairCommand(
  "requeue",
  "a dead job back to pending now, attempts reset (its queue is looked up)",
  (admin, id) => admin.requeue(id)
)

export const cancel = repairCommand(
  "cancel",
  "deletes a pending or claimed job (its queue is looked up)",
  (admin, id) => admin.cancel(id)
)

export const purge = Command.make("purge", {
  db,
  json,
  queue: Options.text("queue").pipe(Options.withDescription("the queue whose dead jobs are deleted")),
  olderThan: Options.text("older-than").pipe(
    Options.optional,
    Options.withDescription("only jobs that died longer ago than this (30s, 15m, 12h, 7d); all dead jobs without it")
  )
}, ({ db, json, olderThan, queue }) =>
  Effect.gen(function*() {
    const age = Option.isSome(olderThan) ? yield* parseAge("--older-than", olderThan.value) : undefined
    yield* onStore(db, Effect.gen(function*() {
      const purged = yield* (yield* Admin.Admin).purgeDead(queue, age)
      yield* output(json, { queue, purged }, () => `purged ${purged} dead job${purged === 1 ? "" : "s"} from ${sanitize(queue)}`)
    }))
  })).pipe(Command.withDescription("deletes a queue's dead jobs"))

const specOf = (every: string) =>
  /^\d+[smhd]$/.test(every)
    ? Effect.succeed(`@every ${every}`)
    : Effect.fail(new UsageError({ reason: `invalid --every ${JSON.stringify(every)}: use <n><s|m|h|d>, e.g. 30s or 1h` }))

export const scheduleAdd = Command.make("add", {
  db,
  json,
  name: Args.text({ name: "name" }),
  every: Options.text("every").pipe(Options.withDescription("the interval: <n><s|m|h|d>, e.g. 30s, 15m, 1h, 1d")),
  queue: Options.text("queue").pipe(Options.withDescription("the queue each fire enqueues into")),
  payload: Options.text("payload").pipe(Options.withDefault("null"), Options.withDescription("each job's payload, as JSON")),
  priority: Options.integer("priority").pipe(Options.optional, Options.withDescription("each job's priority (default 0)")),
  maxAttempts: Options.integer("max-attempts").pipe(Options.optional, Options.withDescription("each job's attempts (default 3)"))
}, (o) =>
  Effect.gen(function*() {
    const spec = yield* specOf(o.every)
    const payload = yield* parseJson("--payload", o.payload)
    yield* onStore(o.db, Effect.gen(function*() {
      const scheduler = yield* Scheduler.Scheduler
      const schedule = yield* scheduler.schedule(o.name, spec, o.queue, payload, {
        ...Option.match(o.priority, { onNone: () => ({}), onSome: (priority) => ({ priority }) }),
        ...Option.match(o.maxAttempts, { onNone: () => ({}), onSome: (maxAttempts) => ({ maxAttempts }) })
      })
      const plain = plainSchedule(schedule)
      yield* output(o.json, plain, () => `scheduled ${sanitize(plain.name)}: ${plain.spec} into ${sanitize(plain.queue)}, next fire ${plain.nextFireAt}`)
    }))
  })).pipe(Command.withDescription("registers (or updates) a schedule; a process running the scheduler fires it"))

export const scheduleRemove = Command.make("remove", { db, json, name: Args.text({ name: "name" }) }, ({ db, json, name }) =>
  onStore(db, Effect.gen(function*() {
    const removed = yield* (yield* Scheduler.Scheduler).unschedule(name)
    if (!removed) return yield* new Refused({ reason: `no schedule ${JSON.stringify(name)}` })
    yield* output(json, { removed: name }, () => `removed schedule ${sanitize(name)}`)
  }))).pipe(Command.withDescription("removes a schedule"))

export const schedule = Command.make("schedule").pipe(
  Command.withDescription("registers or removes schedules"),
  Command.withSubcommands([scheduleAdd, scheduleRemove])
)

export const migrate = Command.make("migrate", { db, json }, ({ db, json }) =>
  onStore(db, Effect.gen(function*() {
    // Opening the store ran the migrations (each engine its own way); this reads what is applied.
    const migrations = yield* (yield* Admin.Admin).migrations
    yield* output(json, { migrations }, () => `schema up to date: ${migrations.join(", ")}`)
  }), { create: true })).pipe(Command.withDescription("creates the database when missing and applies the engine's migrations"))

