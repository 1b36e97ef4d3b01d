/**
 * The scheduler and the outbox (CONTRACT §5, §6), every engine.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit, Fiber, Option } from "effect"
import { Outbox, Queues, Scheduler } from "../src/index.js"
import { engines } from "./contract/harness.js"
import { countRows, firedAt, nextFireAtOf } from "./contract/scheduler.js"
import { advance, settle } from "./contract/support.js"

const second = 1_000
const minute = 60 * second

for (const engine of engines) {
  describe(`scheduler, edge cases — ${engine.name}`, () => {
    // Effect's clock never ends one sleep past ~24.8 days: a leader polling, renewing or maintaining on a
    // longer setting would never come round. Such settings are refused when the store is built.
    it.effect("settings waited in one timer are at most 24 days: more is InvalidOptions when the store is built", () =>
      Effect.gen(function*() {
        for (const field of ["fallbackPoll", "maintenanceEvery", "leaderTtl", "leaderRenewEvery"] as const) {
          const exit = yield* Effect.exit(Effect.provide(Scheduler.Scheduler, engine.store({ [field]: "25 days" })))
          expect(Exit.isFailure(exit), field).toBe(true)
          if (Exit.isFailure(exit)) {
            expect(Option.getOrNull(Cause.failureOption(exit.cause))).toMatchObject({ _tag: "InvalidOptions", field })
          }
        }
        const ok = yield* Effect.exit(Effect.provide(Scheduler.Scheduler, engine.store({ fallbackPoll: "24 days" })))
        expect(Exit.isSuccess(ok)).toBe(true)
      }))

    it.effect("a payload string with a lone surrogate: the same outcome on every engine", () =>
      Effect.gen(function*() {
        const scheduler = yield* Scheduler.Scheduler
        const exit = yield* Effect.exit(scheduler.schedule("s", "@every 1s", "lone", { s: "a\ud800b" }))
        if (exit._tag === "Failure") {
          // must be a typed InvalidPayload, and nothing written
          const error = yield* Effect.flip(scheduler.schedule("s", "@every 1s", "lone", { s: "a\ud800b" }))
          expect(error._tag).toBe("InvalidPayload")
          expect(yield* countRows("__alkstore_scheduler_tasks")).toBe(0)
        } else {
          expect(exit.value.payload).toEqual({ s: "a\ud800b" })
          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          yield* advance("1 second")
          const q = yield* (yield* Queues.Queues).queue("lone")
          const job = Option.getOrThrow(yield* q.claim("w"))
          expect(job.job.payload).toEqual({ s: "a\ud800b" })
          yield* Fiber.interrupt(runner)
        }
      }).pipe(Effect.provide(engine.store())))

    it.effect("a registration committed inside the application's transaction wakes the leader", () =>
      Effect.gen(function*() {
        const scheduler = yield* Scheduler.Scheduler
        const sql = yield* SqlClient.SqlClient
        yield* scheduler.schedule("slow", "@every 1h", "slow", {})
        const runner = yield* Effect.fork(scheduler.runSchedules)
        yield* settle
        yield* advance("10 seconds")
        yield* sql.withTransaction(scheduler.schedule("fast", "@every 1s", "fast", {}))
        yield* settle
        yield* advance("1 second")
        expect(yield* firedAt("fast")).toEqual([11 * second])
        // a rolled-back registration leaves nothing
        yield* Effect.exit(sql.withTransaction(
          Effect.zipRight(scheduler.schedule("ghost", "@every 1s", "ghost", {}), Effect.fail("no"))
        ))
        yield* advance("2 seconds")
        expect(yield* firedAt("ghost")).toEqual([])
        yield* Fiber.interrupt(runner)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour", maintenanceEvery: "1 hour" }))))

    it.effect("a spec change while boundaries are due drops them and restarts the phase; unschedule mid-run", () =>
      Effect.gen(function*() {
        const scheduler = yield* Scheduler.Scheduler
        yield* scheduler.schedule("a", "@every 1m", "qa", { v: 1 }, { priority: 3 })
        const runner = yield* Effect.fork(scheduler.runSchedules)
        yield* settle
        yield* advance("1 minute")
        expect(yield* firedAt("qa")).toEqual([minute])
        // move it to another queue, same spec: phase kept, options and payload carried
        yield* scheduler.schedule("a", "@every 1m", "qb", { v: 2 }, { priority: 9, group: "g" })
        yield* settle
        yield* advance("1 minute")
        expect(yield* firedAt("qa")).toEqual([minute])
        expect(yield* firedAt("qb")).toEqual([2 * minute])
        const q = yield* (yield* Queues.Queues).queue("qb")
        const job = Option.getOrThrow(yield* q.claim("w"))
        expect(job.job.payload).toEqual({ v: 2 })
        expect(job.job.priority).toBe(9)
        const groups = yield* Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql<{ group_key: string }>`SELECT group_key FROM __alkstore_jobs WHERE queue = ${"qb"}`)
        expect(groups.map((r) => r.group_key)).toEqual(["g"])
        expect(yield* scheduler.unschedule("a")).toBe(true)
        yield* advance("3 minutes")
        expect(yield* firedAt("qb")).toEqual([2 * minute])
        yield* Fiber.interrupt(runner)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour", maintenanceEvery: "1 hour" }))))

    it.effect("two runSchedules fibers handing over across many boundaries: every boundary exactly once", () =>
      Effect.gen(function*() {
        const scheduler = yield* Scheduler.Scheduler
        yield* scheduler.schedule("t", "@every 1s", "hand", {})
        for (let round = 0; round < 5; round++) {
          const runner = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          yield* advance("3 seconds")
          yield* Fiber.interrupt(runner)
          yield* advance("500 millis")
        }
        const fired = yield* firedAt("hand")
        expect(new Set(fired).size).toBe(fired.length)
        expect(fired).toEqual(Array.from({ length: 17 }, (_, i) => (i + 1) * second))
        expect(yield* nextFireAtOf("t")).toBe(18 * second)
      }).pipe(Effect.provide(engine.store())))
    it.effect("awkward names and payload text survive the batched tick (arrays on PostgreSQL)", () =>
      Effect.gen(function*() {
        const scheduler = yield* Scheduler.Scheduler
        const names = ['a"b', "c\\d", "NULL", "{x,y}", " spaced ", "ü", "😀", "'q'", "a,b", "null"]
        for (const name of names) {
          yield* scheduler.schedule(name, "@every 1s", `q-${name}`, { s: name, t: "\\\"{},NULL\n" })
        }
        const runner = yield* Effect.fork(scheduler.runSchedules)
        yield* settle
        yield* advance("2 seconds")
        yield* Fiber.interrupt(runner)
        for (const name of names) {
          expect(yield* firedAt(`q-${name}`), name).toEqual([second, 2 * second])
          expect(yield* nextFireAtOf(name), name).toBe(3 * second)
          const q = yield* (yield* Queues.Queues).queue(`q-${name}`)
          const job = Option.getOrThrow(yield* q.claim("w"))
          expect(job.job.payload).toEqual({ s: name, t: "\\\"{},NULL\n" })
        }
      }).pipe(Effect.provide(engine.store())))
  })

  // The model drives the scheduler's logic, which both layers of an engine share: it runs on each engine's
  // own layer (the from-client layers run the handover and edge cases above).
  if (!engine.name.includes("layerFromClient")) describe(`scheduler, a random model — ${engine.name}`, () => {
    for (const seed of [1]) {
      it.effect(`random leaders, standbys, redeploys and stops: every boundary fires exactly once (seed ${seed})`, () =>
        Effect.gen(function*() {
          let state = seed * 7919
          const rand = (n: number) => {
            state = (state * 1103515245 + 12345) % 2147483648
            return state % n
          }
          const scheduler = yield* Scheduler.Scheduler
          const specs: ReadonlyArray<readonly [string, number]> = [["@every 1s", 1], ["@every 7s", 7], ["@every 1m", 60]]
          const registered = new Map<string, { interval: number; first: number }>()
          for (const [i, [spec, n]] of specs.entries()) {
            registered.set(`s${i}`, { interval: n * second, first: n * second })
            yield* scheduler.schedule(`s${i}`, spec, `m${i}`, { i })
          }
          let fibers: Array<Fiber.RuntimeFiber<never, unknown>> = []
          for (let step = 0; step < 25; step++) {
            const op = rand(6)
            if (op === 0 && fibers.length < 3) {
              fibers.push(yield* Effect.fork(scheduler.runAsStandby))
            } else if (op === 1 && fibers.length > 0) {
              const k = rand(fibers.length)
              yield* Fiber.interrupt(fibers[k]!)
              fibers = fibers.filter((_, j) => j !== k)
            } else if (op === 2) {
              const i = rand(specs.length)
              yield* scheduler.schedule(`s${i}`, specs[i]![0], `m${i}`, { i, v: step })
            } else if (op === 3 && fibers.length === 0) {
              fibers.push(yield* Effect.fork(scheduler.runAsStandby))
            }
            yield* settle
            yield* advance(`${1 + rand(20)} seconds`)
          }
          // a leader runs at the end; let it catch up, then check
          if (fibers.length === 0) fibers.push(yield* Effect.fork(scheduler.runAsStandby))
          yield* settle
          yield* advance("11 seconds")
          const now = yield* Effect.clockWith((c) => c.currentTimeMillis)
          for (const [name, { interval, first }] of registered) {
            const i = Number(name.slice(1))
            const expected: Array<number> = []
            for (let at = first; at <= now; at += interval) expected.push(at)
            expect(yield* firedAt(`m${i}`), name).toEqual(expected)
          }
          for (const f of fibers) yield* Fiber.interrupt(f)
        }).pipe(Effect.provide(engine.store({ maintenanceEvery: "1 hour" }))), 120_000)
    }
  })

  describe(`outbox, edge cases — ${engine.name}`, () => {
    it.effect("run with concurrency delivers each message once", () =>
      Effect.gen(function*() {
        const box = yield* (yield* Outbox.Outbox).outbox("hooks")
        for (let i = 0; i < 40; i++) yield* box.enqueue({ i })
        const seen: Array<number> = []
        const runner = yield* Effect.fork(box.run("d", (job) =>
          Effect.sync(() => {
            seen.push((job.payload as { i: number }).i)
          }), { concurrency: 4 }))
        for (let k = 0; k < 50 && seen.length < 40; k++) yield* settle
        yield* Fiber.interrupt(runner)
        expect(seen.length).toBe(40)
        expect(new Set(seen).size).toBe(40)
        expect((yield* box.stats).pending).toBe(0)
      }).pipe(Effect.provide(engine.store())))

    it.effect("runOnce: a deliverer that throws synchronously is a defect retried, not an escaped exception", () =>
      Effect.gen(function*() {
        const box = yield* (yield* Outbox.Outbox).outbox("hooks")
        const id = yield* box.enqueue({ n: 1 })
        const claimed = yield* box.runOnce("d", (): Effect.Effect<void> => {
          throw new Error("sync boom")
        })
        expect(claimed).toBe(true)
        const job = Option.getOrThrow(yield* box.getJob(id))
        expect(job.state).toBe("pending")
        expect(job.attempts).toBe(1)
        expect(Option.getOrElse(job.lastError, () => "")).toContain("sync boom")
      }).pipe(Effect.provide(engine.store())))

    it.effect("an outbox name at the length limit works end to end (its backing name is longer)", () =>
      Effect.gen(function*() {
        const name = "x".repeat(1000)
        const box = yield* (yield* Outbox.Outbox).outbox(name)
        const id = yield* box.enqueue({ n: 1 }, { key: "k".repeat(1000), group: "g".repeat(1000) })
        expect((yield* box.stats).pending).toBe(1)
        expect(yield* box.runOnce("d", () => Effect.fail("nope"))).toBe(true)
        yield* advance("10 seconds")
        expect(yield* box.runOnce("d", () => Effect.void)).toBe(true)
        expect(Option.isNone(yield* box.getJob(id))).toBe(true)
      }).pipe(Effect.provide(engine.store())))

    it.effect("runOnce interrupted mid-delivery releases the claim without spending an attempt", () =>
      Effect.gen(function*() {
        const box = yield* (yield* Outbox.Outbox).outbox("hooks")
        const id = yield* box.enqueue({ n: 1 })
        const fiber = yield* Effect.fork(box.runOnce("d", () => Effect.never))
        yield* settle
        yield* Fiber.interrupt(fiber)
        const job = Option.getOrThrow(yield* box.getJob(id))
        expect(job.state).toBe("pending")
        expect(job.attempts).toBe(0)
        expect(yield* box.runOnce("d", () => Effect.void)).toBe(true)
        expect(Option.isNone(yield* box.getJob(id))).toBe(true)
      }).pipe(Effect.provide(engine.store())))
  })
}
