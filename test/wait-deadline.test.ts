/**
 * A waiting take sleeps until its deadline — a delayed job's run time, a rate
 * window's reopening — counted from when it starts to sleep, not from when its
 * round began. On PostgreSQL a round's reads are round trips, and a round
 * starts at any moment of a wait (its fallback poll, a LISTEN reconnect,
 * another process's commit): the time its reads spent on the server used to
 * be added to the sleep, and the waiter woke that much past its instant (a CI
 * run of flow-edges failed so: a round began just before the test clock moved
 * on).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Option, TestClock } from "effect"
import { Scheduler } from "../src/index.js"
import { channelOf, everything } from "../src/internal/pg/notify.js"
import { advance, mustClaim, queueOf, setLimits, settle } from "./contract/support.js"
import { otherSession, pgStoreLayer } from "./support/pgSessions.js"

const schema = "wait_deadline"

/** Real-time polls (5 s at most) until a session waits for a lock on `table`: the store's read is stuck behind the test's. */
const untilReadWaitsOnLock = (session: Effect.Effect.Success<typeof otherSession>, table: string) =>
  Effect.gen(function*() {
    for (let i = 0; i < 500; i++) {
      const { rows } = yield* Effect.promise(() =>
        session.query<{ n: string }>("SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND relation = $1::regclass", [table])
      )
      if (Number(rows[0]?.n) > 0) return
      yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 10)))
    }
    expect.fail("the waiter's read never waited on the test's lock")
  })

describe("a waiter's sleep counts from when it sleeps — postgresql", () => {
  for (const held of ["by a group rate", "until a delayed job's run time"] as const) {
    it.scoped(`held ${held} until 10 s, a round whose read waits from 4 s to 8 s sleeps to 10 s, not 12 s`, () =>
      Effect.gen(function*() {
        const name = held === "by a group rate" ? "wd-rate" : "wd-delay"
        const q = yield* queueOf(name)
        if (held === "by a group rate") {
          yield* setLimits(name, { groupRate: { limit: 1, per: "10 seconds" } })
          yield* q.enqueueBatch(["g1", "g2"], { group: "g" })
          yield* Effect.flatMap(mustClaim(q, "w"), (h) => h.ack) // the window reopens at 10 s
        } else {
          yield* q.enqueue("later", { delay: "10 seconds" })
        }
        const taker = yield* Effect.fork(q.take("waiter"))
        yield* settle
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)

        // Another session locks the jobs table; the waiter's fallback poll (4 s) starts a round whose read
        // waits for that lock while the clock moves on to 8 s.
        const locker = yield* otherSession
        yield* Effect.promise(() => locker.query("BEGIN"))
        yield* Effect.promise(() => locker.query(`LOCK TABLE ${schema}.__alkstore_jobs IN ACCESS EXCLUSIVE MODE`))
        yield* TestClock.setTime(4_000)
        yield* untilReadWaitsOnLock(locker, `${schema}.__alkstore_jobs`)
        yield* TestClock.setTime(8_000)
        yield* Effect.promise(() => locker.query("COMMIT"))
        yield* settle

        yield* advance("1999 millis")
        expect(Option.isNone(yield* Fiber.poll(taker))).toBe(true)
        yield* advance("1 millis")
        yield* settle
        expect(Option.isSome(yield* Fiber.poll(taker))).toBe(true)
      }).pipe(Effect.provide(pgStoreLayer({ schema, fallbackPoll: "4 seconds" }))))
  }
})

describe("the scheduler leader's wait counts from when it waits — postgresql", () => {
  it.scoped("a boundary at 10 s fires at 10 s although the leader's look from 4 s to 8 s waited on the server", () =>
    Effect.gen(function*() {
      const scheduler = yield* Scheduler.Scheduler
      const fired = yield* queueOf("wd-fired")
      yield* scheduler.schedule("wd-every", "@every 10s", "wd-fired", {})
      const leader = yield* Effect.fork(scheduler.runSchedules)
      yield* settle
      const firedBefore = (yield* fired.stats).pending

      // The leader waits for its fallback poll (4 s); its look then reads the schedules, which another
      // session has locked, while the clock moves on to 8 s.
      const locker = yield* otherSession
      yield* Effect.promise(() => locker.query("BEGIN"))
      yield* Effect.promise(() => locker.query(`LOCK TABLE ${schema}_leader.__alkstore_scheduler_tasks IN ACCESS EXCLUSIVE MODE`))
      yield* TestClock.setTime(4_000)
      yield* untilReadWaitsOnLock(locker, `${schema}_leader.__alkstore_scheduler_tasks`)
      yield* TestClock.setTime(8_000)
      yield* Effect.promise(() => locker.query("COMMIT"))
      yield* settle

      yield* advance("1999 millis")
      expect((yield* fired.stats).pending).toBe(firedBefore)
      yield* advance("1 millis")
      yield* settle
      expect((yield* fired.stats).pending).toBe(firedBefore + 1)
      yield* Fiber.interrupt(leader)
    }).pipe(Effect.provide(pgStoreLayer({ schema: `${schema}_leader`, fallbackPoll: "4 seconds" }))))
})

describe("a standby's wait for its turn counts from when it waits — postgresql", () => {
  it.scoped("half a TTL after its try (10 s), it tries again at 10 s although its look from 0 s to 4 s waited on the server", () =>
    Effect.gen(function*() {
      const standbySchema = `${schema}_standby`
      const locker = yield* otherSession
      const notifier = yield* otherSession
      const leaseOwner = Effect.map(
        Effect.promise(() =>
          locker.query<{ owner: string }>(`SELECT owner FROM ${standbySchema}.__alkstore_locks WHERE name = '__alkstore_scheduler'`)
        ),
        ({ rows }) => rows[0]?.owner
      )
      // A leader that died: its lease lapses at 9 s and is never renewed.
      yield* Effect.promise(() =>
        locker.query(`INSERT INTO ${standbySchema}.__alkstore_locks VALUES ('__alkstore_scheduler', 'dead-leader', 1, 9000)`)
      )
      const scheduler = yield* Scheduler.Scheduler
      const standby = yield* Effect.fork(scheduler.runAsStandby)
      yield* settle // tried at 0 s; its turn comes again at 10 s (half the 20 s TTL)

      // A commit elsewhere (a notification for every topic) wakes it to look at the lease, which another
      // session has locked while the clock moves on to 4 s.
      yield* Effect.promise(() => locker.query("BEGIN"))
      yield* Effect.promise(() => locker.query(`LOCK TABLE ${standbySchema}.__alkstore_locks IN ACCESS EXCLUSIVE MODE`))
      yield* Effect.promise(() => notifier.query("SELECT pg_notify($1, $2)", [channelOf(standbySchema), everything]))
      yield* untilReadWaitsOnLock(locker, `${standbySchema}.__alkstore_locks`)
      yield* TestClock.setTime(4_000)
      yield* Effect.promise(() => locker.query("COMMIT"))
      yield* settle

      yield* advance("5999 millis")
      expect(yield* leaseOwner).toBe("dead-leader")
      yield* advance("1 millis")
      yield* settle
      expect(yield* leaseOwner).not.toBe("dead-leader")
      yield* Fiber.interrupt(standby)
    }).pipe(Effect.provide(pgStoreLayer({ schema: `${schema}_standby`, leaderTtl: "20 seconds" }))))
})
