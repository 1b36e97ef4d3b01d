/**
 * The namespace rule (CONTRACT §2) at every entry point, and the other
 * strings the store keeps and compares (idempotency keys, worker ids, lock
 * owners): each must be well-formed UTF-16, since a lone surrogate is stored
 * as one byte sequence and read back as another (U+FFFD).
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, Stream } from "effect"
import { Locks, Outbox, Queues, Scheduler } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"
import { jobCount, lockCount, mustClaim, mustGet, queueOf, type StoreServices } from "./support.js"

const loneHigh = "jobs-\uD800"
const loneLow = "\uDC00-jobs"
const reversedPair = "x\uDC00\uD800y"
const notWellFormed = [loneHigh, loneLow, reversedPair, "\uD83D"] as const
const emoji = "inbox-📬-\u{1F680}"

const scheduleCount = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_scheduler_tasks`, (rows) => Number(rows[0]!.n)))

/** Nothing of any mechanism was written. */
const nothingWritten = Effect.gen(function*() {
  expect(yield* jobCount).toBe(0)
  expect(yield* lockCount).toBe(0)
  expect(yield* scheduleCount).toBe(0)
})

export const namesContract = (engine: EngineUnderTest) =>
  describe(`names — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    it.effect("empty and reserved queue names are rejected before storage", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const empty = yield* Effect.flip(queues.queue(""))
        expect(empty._tag).toBe("InvalidName")
        const reserved = yield* Effect.flip(queues.queue("__alkstore_x"))
        expect(reserved).toMatchObject({ _tag: "ReservedName", name: "__alkstore_x" })
        const locks = yield* Locks.Locks
        expect((yield* Effect.flip(locks.acquire("", { ttl: "1 second" })))._tag).toBe("InvalidName")
        expect(yield* jobCount).toBe(0)
      })))

    it.effect("a name with a lone surrogate is InvalidName at every entry point, and nothing is written", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const locks = yield* Locks.Locks
        const scheduler = yield* Scheduler.Scheduler
        const outboxes = yield* Outbox.Outbox
        for (const name of notWellFormed) {
          const invalid = { _tag: "InvalidName", name }
          expect(yield* Effect.flip(queues.queue(name)), `queue ${JSON.stringify(name)}`).toMatchObject(invalid)
          expect(yield* Effect.flip(locks.acquire(name, { ttl: "1 minute" }))).toMatchObject(invalid)
          expect(yield* Effect.flip(locks.withLock(name, "1 minute", Effect.void))).toMatchObject(invalid)
          expect(yield* Effect.flip(scheduler.schedule(name, "@every 1s", "target", {}))).toMatchObject(invalid)
          // the schedule's target queue is a name too
          expect(yield* Effect.flip(scheduler.schedule("tick", "@every 1s", name, {}))).toMatchObject(invalid)
          expect(yield* Effect.flip(scheduler.unschedule(name))).toMatchObject(invalid)
          expect(yield* Effect.flip(outboxes.outbox(name))).toMatchObject(invalid)
        }
        yield* nothingWritten
      })))

    it.effect("keys, worker ids and lock owners with a lone surrogate are InvalidOptions, nothing written", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("q")
        const locks = yield* Locks.Locks
        const outbox = yield* Effect.flatMap(Outbox.Outbox, (outboxes) => outboxes.outbox("o"))
        for (const text of notWellFormed) {
          const field = (name: string) => ({ _tag: "InvalidOptions", field: name })
          expect(yield* Effect.flip(q.enqueue("x", { key: text }))).toMatchObject(field("key"))
          expect(yield* Effect.flip(q.enqueueBatch(["x"], { key: text }))).toMatchObject(field("key"))
          expect(yield* Effect.flip(outbox.enqueue("x", { key: text }))).toMatchObject(field("key"))
          expect(yield* Effect.flip(locks.acquire("l", { ttl: "1 minute", owner: text }))).toMatchObject(field("owner"))
        }
        expect(yield* jobCount).toBe(0)
        expect(yield* lockCount).toBe(0)
        yield* q.enqueue("x")
        yield* outbox.enqueue("x")
        for (const text of notWellFormed) {
          const workerId = { _tag: "InvalidOptions", field: "workerId" }
          expect(yield* Effect.flip(q.claim(text))).toMatchObject(workerId)
          expect(yield* Effect.flip(q.claimBatch(text, 2))).toMatchObject(workerId)
          expect(yield* Effect.flip(q.take(text))).toMatchObject(workerId)
          expect(yield* Effect.flip(Stream.runDrain(q.stream(text)))).toMatchObject(workerId)
          expect(yield* Effect.flip(q.process(text, () => Effect.void))).toMatchObject(workerId)
          expect(yield* Effect.flip(outbox.runOnce(text, () => Effect.void))).toMatchObject(workerId)
        }
        // nothing was claimed
        expect((yield* q.stats).pending).toBe(1)
        expect((yield* outbox.stats).pending).toBe(1)
      })))

    it.effect("names, keys, worker ids and owners up to 1000 UTF-8 bytes are kept; one byte more, or a NUL, is refused, nothing written", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const locks = yield* Locks.Locks
        const scheduler = yield* Scheduler.Scheduler
        const outboxes = yield* Outbox.Outbox
        // 250 four-byte characters: exactly 1000 bytes, 500 UTF-16 units.
        const longest = "\u{1F4EC}".repeat(250)
        for (const tooLong of ["a".repeat(1001), `${longest}x`, "\u{1F4EC}".repeat(100_000), "nul-\u0000-name", "\u0000"]) {
          const invalid = { _tag: "InvalidName", name: tooLong }
          expect(yield* Effect.flip(queues.queue(tooLong))).toMatchObject(invalid)
          expect(yield* Effect.flip(locks.acquire(tooLong, { ttl: "1 minute" }))).toMatchObject(invalid)
          expect(yield* Effect.flip(scheduler.schedule(tooLong, "@every 1s", "target", {}))).toMatchObject(invalid)
          expect(yield* Effect.flip(scheduler.schedule("tick", "@every 1s", tooLong, {}))).toMatchObject(invalid)
          expect(yield* Effect.flip(outboxes.outbox(tooLong))).toMatchObject(invalid)
          const q = yield* queueOf("q")
          expect(yield* Effect.flip(q.enqueue("x", { key: tooLong }))).toMatchObject({ field: "key" })
          expect(yield* Effect.flip(q.claim(tooLong))).toMatchObject({ field: "workerId" })
          expect(yield* Effect.flip(locks.acquire("l", { ttl: "1 minute", owner: tooLong }))).toMatchObject({ field: "owner" })
        }
        yield* nothingWritten

        const q = yield* queueOf(longest)
        const id = yield* q.enqueue("x", { key: longest })
        expect(yield* q.enqueue("y", { key: longest })).toBe(id)
        const handle = yield* mustClaim(q, longest)
        expect(handle.job.queue).toBe(longest)
        expect(yield* q.ackAll([handle])).toEqual([true])
        const lock = Option.getOrThrow(yield* locks.acquire(longest, { ttl: "1 minute", owner: longest }))
        expect(lock).toMatchObject({ name: longest, owner: longest })
        const registered = yield* scheduler.schedule(longest, "@every 1s", longest, {})
        expect(registered).toMatchObject({ name: longest, queue: longest })
        const outbox = yield* outboxes.outbox(longest)
        yield* outbox.enqueue("hook", { key: longest })
        expect((yield* outbox.stats).pending).toBe(1)
      })))

    it.effect("error text with a NUL is kept with U+FFFD in its place (retry with a string or an error, fail), never a SqlError", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("errors", { maxAttempts: 5 })
        const id = yield* q.enqueue("x")
        expect(yield* (yield* mustClaim(q, "w")).retry("bad\u0000byte", 0)).toBe("retried")
        expect(Option.getOrUndefined((yield* mustGet(q, id)).lastError)).toBe("bad\uFFFDbyte")
        expect(yield* (yield* mustClaim(q, "w")).retry(new Error("boom\u0000"), 0)).toBe("retried")
        expect(Option.getOrUndefined((yield* mustGet(q, id)).lastError)).toBe("boom\uFFFD")
        expect(yield* (yield* mustClaim(q, "w")).fail("dead\u0000")).toBe(true)
        expect(Option.getOrUndefined((yield* mustGet(q, id)).lastError)).toBe("dead\uFFFD")
      })))

    it.effect("a well-formed non-BMP name round-trips everywhere, and ackAll takes its queue's own handles", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf(emoji)
        const ids = yield* q.enqueueBatch([1, 2, 3])
        const keyed = yield* q.enqueue(4, { key: `key-${emoji}` })
        expect(keyed).not.toBe(ids[2])
        expect(yield* q.enqueue(5, { key: `key-${emoji}` })).toBe(keyed)
        const first = yield* mustClaim(q, `worker-${emoji}`)
        expect(first.job.queue).toBe(emoji)
        expect(Option.getOrUndefined(first.job.workerId)).toBe(`worker-${emoji}`)
        expect(Option.getOrUndefined((yield* q.getJob(first.job.id)).pipe(Option.map((job) => job.queue)))).toBe(emoji)
        const rest = yield* q.claimBatch("w", 10)
        expect(rest).toHaveLength(3)
        expect(yield* q.ackAll([first, ...rest])).toEqual([true, true, true, true])
        expect(yield* jobCount).toBe(0)

        const locks = yield* Locks.Locks
        const lock = Option.getOrThrow(yield* locks.acquire(emoji, { ttl: "1 minute", owner: `owner-${emoji}` }))
        expect(lock).toMatchObject({ name: emoji, owner: `owner-${emoji}` })
        expect(yield* lock.renew()).toBe(true)
        expect(yield* lock.release).toBe(true)

        const scheduler = yield* Scheduler.Scheduler
        const registered = yield* scheduler.schedule(`every-${emoji}`, "@every 1s", emoji, { to: emoji })
        expect(registered).toMatchObject({ name: `every-${emoji}`, queue: emoji, payload: { to: emoji } })
        expect(yield* scheduler.unschedule(`every-${emoji}`)).toBe(true)

        const outbox = yield* Effect.flatMap(Outbox.Outbox, (outboxes) => outboxes.outbox(emoji))
        yield* outbox.enqueue("hook")
        const delivered: Array<unknown> = []
        expect(yield* outbox.runOnce("w", (job) => Effect.sync(() => delivered.push(job.payload)))).toBe(true)
        expect(delivered).toEqual(["hook"])
        expect(yield* jobCount).toBe(0)
      })))
  })
