/**
 * Standbys and leaders over a fleet's life (CONTRACT §5, §7): a standby's
 * lease attempts are its only writes (every half lease TTL, and at once when
 * a leader releases; none per foreign commit), a transient storage error is
 * logged and retried rather than the end of it, and a runner that failed
 * leaves no wake ticket behind. Contract time is the TestClock; the change
 * watcher that carries another connection's commits runs in real time, so
 * those steps wait for it in real time.
 */
import { describe, expect, it } from "@effect/vitest"
import { Clock, Effect, Exit, Fiber, Layer, Option, TestClock } from "effect"
import { Queues, Scheduler } from "../../src/index.js"
import { countLockAcquires, whileFailing } from "./faults.js"
import { type EngineUnderTest, freshFile } from "./harness.js"
import { advance } from "./support.js"
import { firedAt, leaderLease } from "./scheduler.js"

const second = 1_000
const realClock = Clock.make()
const realSleep = (millis: number) => Effect.withClock(Effect.sleep(millis), realClock)

/** Lets forked fibers run until every one of them waits again (no contract time passes). */
const settle = Effect.gen(function*() {
  for (let i = 0; i < 5; i++) yield* advance("0 millis")
})

/** Settles until `probe` holds, giving the real-time change watcher up to two seconds. */
const eventually = <E, R>(what: string, probe: Effect.Effect<boolean, E, R>) =>
  Effect.gen(function*() {
    for (let i = 0; i < 100; i++) {
      yield* settle
      if (yield* probe) return
      yield* realSleep(20)
    }
    throw new Error(`timed out waiting until ${what}`)
  })

/** Whoever holds the leadership lease at `now`. */
const liveLeader = (now: number) =>
  Effect.map(leaderLease, (row) => Option.filter(row, (r) => Number(r.expires_at) > now))


export const standbyContract = (engine: EngineUnderTest) =>
  describe(`scheduler standby — ${engine.name}`, () => {
    it.effect("an idle standby makes no lease attempt per foreign commit: every half TTL, and at once on a release", () => {
      const filename = freshFile("standby-idle")
      return Effect.gen(function*() {
        // another process: a second store on the same file leads
        const elsewhere = yield* Layer.build(engine.store({ filename }))
        const inElsewhere = Effect.provide(elsewhere)
        const leader = yield* Effect.fork(inElsewhere(Effect.flatMap(Scheduler.Scheduler, (s) => s.runSchedules)))
        yield* settle
        const theirs = Option.getOrThrow(yield* leaderLease)

        const attempts = yield* countLockAcquires("__alkstore_scheduler")
        const standby = yield* Effect.fork(Effect.flatMap(Scheduler.Scheduler, (s) => s.runAsStandby))
        yield* settle
        expect(yield* attempts).toBe(1) // its first try, refused

        // 40 commits by the other connection, each seen by this store's change watcher
        const busy = yield* inElsewhere(Effect.flatMap(Queues.Queues, (q) => q.queue("busy")))
        for (let i = 0; i < 40; i++) {
          yield* inElsewhere(busy.enqueue({ i }))
          yield* realSleep(5)
        }
        yield* realSleep(100)
        yield* settle
        expect((yield* Effect.flatMap(Queues.Queues, (q) => q.queue("busy")).pipe(Effect.flatMap((q) => q.stats))).pending)
          .toBe(40)
        expect(yield* attempts).toBe(1)
        expect(Option.getOrThrow(yield* leaderLease).owner).toBe(theirs.owner)

        // half a lease TTL later (5 s of 10 s) it tries again, once; still refused (renewed every 2 s)
        yield* advance("4999 millis")
        expect(yield* attempts).toBe(1)
        yield* advance("1 millis")
        expect(yield* attempts).toBe(2)
        yield* advance("5 seconds")
        expect(yield* attempts).toBe(3)
        expect(Option.getOrThrow(yield* liveLeader(10 * second)).owner).toBe(theirs.owner)

        // the leader elsewhere stops and releases: the standby takes over at once (no contract time passes)
        yield* Fiber.interrupt(leader)
        yield* eventually(
          "the standby leads",
          Effect.map(liveLeader(10 * second), (row) => Option.isSome(row) && row.value.owner !== theirs.owner)
        )
        expect(yield* attempts).toBe(4)
        expect(Option.getOrThrow(yield* leaderLease).token).toBe(theirs.token + 1)
        expect(Option.isNone(yield* Fiber.poll(standby))).toBe(true)
        yield* Fiber.interrupt(standby)
      }).pipe(Effect.scoped, Effect.provide(engine.store({ filename })))
    })

    it.effect("a standby that meets a storage failure keeps trying, and takes over once it clears", () =>
      Effect.gen(function*() {
        const scheduler = yield* Scheduler.Scheduler
        yield* scheduler.schedule("tick", "@every 1s", "ticks", {})
        const standby = yield* whileFailing(
          "__alkstore_locks",
          "INSERT",
          Effect.gen(function*() {
            const standby = yield* Effect.fork(scheduler.runAsStandby)
            yield* settle
            yield* advance("3 seconds")
            // every try so far failed with a SqlError; the standby is still there, nothing fired
            expect(Option.isNone(yield* Fiber.poll(standby))).toBe(true)
            expect(Option.isNone(yield* leaderLease)).toBe(true)
            return standby
          })
        )
        // cleared: at its next try (within half a lease TTL) it leads and catches up on the boundaries
        yield* advance("5 seconds")
        expect(Option.isSome(yield* liveLeader(8 * second))).toBe(true)
        expect((yield* firedAt("ticks")).length).toBe(8)

        // a failure while leading (the tick's insert) ends that leadership, not the standby
        yield* whileFailing(
          "__alkstore_jobs",
          "INSERT",
          Effect.gen(function*() {
            yield* advance("3 seconds")
            expect(Option.isNone(yield* Fiber.poll(standby))).toBe(true)
            expect((yield* firedAt("ticks")).length).toBe(8)
          })
        )
        yield* advance("5 seconds")
        expect(Option.isSome(yield* liveLeader(16 * second))).toBe(true)
        expect(yield* firedAt("ticks")).toEqual(Array.from({ length: 16 }, (_, i) => (i + 1) * second))
        expect(Option.isNone(yield* Fiber.poll(standby))).toBe(true)
        const exit = yield* Fiber.interrupt(standby)
        expect(Exit.isInterrupted(exit)).toBe(true)
        expect(Option.isNone(yield* liveLeader(16 * second))).toBe(true)
      }).pipe(Effect.provide(engine.store())))

    it.effect("a runner that failed leaves no ticket to swallow the next registration's wake", () =>
      Effect.gen(function*() {
        const scheduler = yield* Scheduler.Scheduler
        const jobs = yield* (yield* Queues.Queues).queue("expiring")
        yield* jobs.enqueue({ n: 1 }, { expires: "1 second" })
        yield* advance("2 seconds")
        // each runner takes its ticket, ticks, and fails in its first maintenance (the expired job's update)
        const failures = yield* whileFailing(
          "__alkstore_jobs",
          "UPDATE",
          Effect.all(Array.from({ length: 5 }, () => Effect.flip(scheduler.runSchedules)))
        )
        expect(failures.map((error) => error._tag)).toEqual(Array.from({ length: 5 }, () => "SqlError"))

        const runner = yield* Effect.fork(scheduler.runSchedules)
        yield* settle
        // the runner now sleeps an hour (nothing is due); a registration must wake it at once
        yield* scheduler.schedule("fast", "@every 1s", "fast", {})
        yield* settle
        yield* advance("1 second")
        expect(yield* firedAt("fast")).toEqual([3 * second])
        yield* Fiber.interrupt(runner)
      }).pipe(Effect.provide(engine.store({ fallbackPoll: "1 hour", maintenanceEvery: "1 hour" }))))
  })
