/**
 * The queue contract (CONTRACT §3), claiming and the job handle: enqueue
 * (transactions, stamping, ordering, delay/runAt, expiry, idempotency,
 * batches, typed queues), claim, and every handle operation with its fencing.
 * Waiting (`take`, `stream`, `process`) lives in the waking contract.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Data, DateTime, Effect, Option, Schema, TestClock } from "effect"
import { Queues } from "../../src/index.js"
import type { EngineUnderTest } from "./harness.js"
import {
  claimsNothing,
  type StoreServices, durationMs, jobCount, ms, mustClaim, mustGet, optionalMs, queueOf, advance } from "./support.js"

class Boom extends Data.TaggedError("Boom")<{ readonly code: number }> {}

export const queuesContract = (engine: EngineUnderTest) =>
  describe(`queues — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    describe("enqueue and claim", () => {
      it.effect("a claim stamps the lease, the worker and the attempt; ack deletes the job", () =>
        run(Effect.gen(function*() {
          yield* advance("1 second")
          const q = yield* queueOf("emails", { visibilityTimeout: "30 seconds" })
          const id = yield* q.enqueue({ to: "ada@example.com", n: [1, 2, { deep: null }] })
          expect(typeof id).toBe("number")
          const pending = yield* mustGet(q, id)
          expect(pending).toMatchObject({ id, queue: "emails", state: "pending", attempts: 0, priority: 0 })
          expect(pending.payload).toEqual({ to: "ada@example.com", n: [1, 2, { deep: null }] })
          expect(ms(pending.runAt)).toBe(1000)
          expect(ms(pending.createdAt)).toBe(1000)
          expect(Option.isNone(pending.claimedUntil)).toBe(true)
          expect(Option.isNone(pending.workerId)).toBe(true)
          expect(Option.isNone(pending.lastError)).toBe(true)
          expect(Option.isNone(pending.diedAt)).toBe(true)

          yield* advance("2 seconds")
          const handle = yield* mustClaim(q, "w1")
          expect(handle.job.id).toBe(id)
          expect(handle.job.payload).toEqual({ to: "ada@example.com", n: [1, 2, { deep: null }] })
          expect(handle.job.state).toBe("claimed")
          expect(handle.job.attempts).toBe(1)
          expect(optionalMs(handle.job.claimedUntil)).toBe(3000 + 30_000)
          expect(Option.getOrUndefined(handle.job.workerId)).toBe("w1")
          const stored = yield* mustGet(q, id)
          expect(stored).toMatchObject({ state: "claimed", attempts: 1 })
          expect(optionalMs(stored.claimedUntil)).toBe(33_000)
          expect(Option.getOrUndefined(stored.workerId)).toBe("w1")

          yield* claimsNothing(q, "w2")
          expect(yield* handle.ack).toBe(true)
          expect(Option.isNone(yield* q.getJob(id))).toBe(true)
          expect(yield* jobCount).toBe(0)
          expect(yield* handle.ack).toBe(false)
        })))

      it.effect("a claimed job's view is whole: every field on touch, the same value each time, and in its JSON", () =>
        run(Effect.gen(function*() {
          yield* TestClock.adjust("1 second")
          const q = yield* queueOf("view", { visibilityTimeout: "30 seconds", maxAttempts: 4, backoffBase: "2 seconds" })
          const id = yield* q.enqueue({ n: 1 }, { priority: 3, expires: "1 hour" })
          yield* TestClock.adjust("1 second")
          const { job } = yield* mustClaim(q, "w1")
          expect(job).toMatchObject({ id, queue: "view", payload: { n: 1 }, state: "claimed", priority: 3, attempts: 1 })
          expect(job.maxAttempts).toBe(4)
          expect(ms(job.runAt)).toBe(1000)
          expect(ms(job.createdAt)).toBe(1000)
          expect(durationMs(job.visibilityTimeout)).toBe(30_000)
          expect(durationMs(job.backoffBase)).toBe(2000)
          expect(optionalMs(job.expiresAt)).toBe(1000 + 3_600_000)
          expect(optionalMs(job.claimedUntil)).toBe(2000 + 30_000)
          expect(Option.getOrUndefined(job.workerId)).toBe("w1")
          expect(Option.isNone(job.lastError) && Option.isNone(job.diedAt)).toBe(true)
          expect(job.runAt).toBe(job.runAt)
          expect(job.claimedUntil).toBe(job.claimedUntil)
          const json = JSON.parse(JSON.stringify(job)) as Record<string, unknown>
          expect(Object.keys(json).sort()).toEqual([
            "attempts", "backoffBase", "claimedUntil", "createdAt", "diedAt", "expiresAt", "id", "lastError",
            "maxAttempts", "payload", "priority", "queue", "runAt", "state", "visibilityTimeout", "workerId"
          ])
          expect(json.runAt).toBe(new Date(1000).toISOString())
        })))

      it.effect("ids are never reused: a stale id cannot reach a newer job", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("reuse")
          const first = yield* q.enqueue({ n: "first" })
          expect(yield* (yield* mustClaim(q, "w")).ack).toBe(true)
          const second = yield* q.enqueue({ n: "second" })
          expect(second).not.toBe(first)
          expect(Option.isNone(yield* q.getJob(first))).toBe(true)
          expect(yield* q.cancel(first)).toBe(false)
          expect(yield* q.requeueDead(first)).toBe(false)
          expect((yield* mustGet(q, second)).payload).toEqual({ n: "second" })
        })))

      it.effect("claim on an empty queue is none, and claims only its own queue", () =>
        run(Effect.gen(function*() {
          const a = yield* queueOf("a")
          const b = yield* queueOf("b")
          yield* claimsNothing(a)
          yield* b.enqueue("for b")
          yield* claimsNothing(a)
          expect((yield* mustClaim(b, "w")).job.payload).toBe("for b")
        })))

      it.effect("every JSON value round-trips as a payload", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("json")
          const bare = Object.create(null) as Record<string, unknown>
          bare["k"] = "v"
          const payloads: ReadonlyArray<unknown> = [
            null,
            0,
            -1.5,
            "",
            "ünïcødé \u0000 'quoted' \"double\"",
            true,
            [],
            {},
            [1, "two", [3], { four: 4 }],
            { nested: { deeper: { list: [null, false] } } },
            bare
          ]
          const ids = yield* q.enqueueBatch(payloads)
          for (const [i, id] of ids.entries()) {
            expect((yield* mustGet(q, id)).payload).toEqual(JSON.parse(JSON.stringify(payloads[i])))
          }
          for (const payload of payloads) {
            const handle = yield* mustClaim(q, "w")
            expect(handle.job.payload).toEqual(JSON.parse(JSON.stringify(payload)))
            yield* handle.ack
          }
        })))

      it.effect("workerId must be a non-empty string", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("w")
          yield* q.enqueue(1)
          expect(yield* Effect.flip(q.claim(""))).toMatchObject({ _tag: "InvalidOptions", field: "workerId" })
          expect(yield* Effect.flip(q.claimBatch("", 1))).toMatchObject({ _tag: "InvalidOptions", field: "workerId" })
          expect((yield* mustGet(q, 1)).state).toBe("pending")
        })))
    })

    describe("transactions", () => {
      it.effect("an enqueue rolled back with the application's insert leaves no job", () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* sql`CREATE TABLE users (email TEXT NOT NULL)`
          const q = yield* queueOf("emails")
          const outcome = yield* sql.withTransaction(Effect.gen(function*() {
            yield* sql`INSERT INTO users (email) VALUES (${"ada@example.com"})`
            yield* q.enqueue({ to: "ada@example.com" })
            yield* q.enqueueBatch([{ to: "b" }, { to: "c" }])
            return yield* Effect.fail("the application changed its mind" as const)
          })).pipe(Effect.flip)
          expect(outcome).toBe("the application changed its mind")
          expect(yield* jobCount).toBe(0)
          expect(yield* sql`SELECT * FROM users`).toHaveLength(0)
          yield* claimsNothing(q)
        })))

      it.effect("an enqueue committed with the application's insert is there with it", () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          yield* sql`CREATE TABLE users (email TEXT NOT NULL)`
          const q = yield* queueOf("emails")
          const id = yield* sql.withTransaction(Effect.gen(function*() {
            yield* sql`INSERT INTO users (email) VALUES (${"ada@example.com"})`
            return yield* q.enqueue({ to: "ada@example.com" })
          }))
          expect(yield* sql`SELECT * FROM users`).toHaveLength(1)
          expect((yield* mustClaim(q, "w")).job.id).toBe(id)
        })))

      it.effect("a defect inside the transaction rolls the enqueue back too", () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const q = yield* queueOf("emails")
          const exit = yield* sql.withTransaction(Effect.gen(function*() {
            yield* q.enqueue("x")
            return yield* Effect.die("crash")
          })).pipe(Effect.exit)
          expect(exit._tag).toBe("Failure")
          expect(yield* jobCount).toBe(0)
        })))
    })

    describe("stamping", () => {
      it.effect("the contract defaults are stamped onto the row", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("defaults")
          const job = yield* mustGet(q, yield* q.enqueue("x"))
          expect(durationMs(job.visibilityTimeout)).toBe(300_000)
          expect(job.maxAttempts).toBe(3)
          expect(durationMs(job.backoffBase)).toBe(5_000)
          expect(Option.isNone(job.expiresAt)).toBe(true)
          expect(job.priority).toBe(0)
        })))

      it.effect("the handle's options, then EnqueueOpts over them, are stamped; later handles never touch them", () =>
        run(Effect.gen(function*() {
          yield* advance("10 seconds")
          const q = yield* queueOf("stamps", {
            visibilityTimeout: "30 seconds",
            maxAttempts: 7,
            backoffBase: "2 seconds",
            expires: "1 hour"
          })
          const fromHandle = yield* mustGet(q, yield* q.enqueue("a"))
          expect(durationMs(fromHandle.visibilityTimeout)).toBe(30_000)
          expect(fromHandle.maxAttempts).toBe(7)
          expect(durationMs(fromHandle.backoffBase)).toBe(2_000)
          expect(optionalMs(fromHandle.expiresAt)).toBe(10_000 + 3_600_000)

          const overridden = yield* mustGet(
            q,
            yield* q.enqueue("b", { maxAttempts: 2, expires: "10 minutes", priority: -4 })
          )
          expect(overridden.maxAttempts).toBe(2)
          expect(optionalMs(overridden.expiresAt)).toBe(10_000 + 600_000)
          expect(overridden.priority).toBe(-4)
          expect(durationMs(overridden.visibilityTimeout)).toBe(30_000)
          expect(durationMs(overridden.backoffBase)).toBe(2_000)

          // Another handle of the same queue, other options: existing rows keep theirs,
          // and a claim through it leases with the row's own visibility timeout.
          const other = yield* queueOf("stamps", { visibilityTimeout: "5 minutes", maxAttempts: 1, backoffBase: "1 minute" })
          expect(yield* mustGet(other, fromHandle.id)).toEqual(fromHandle)
          const handle = yield* mustClaim(other, "w")
          expect(handle.job.id).toBe(fromHandle.id)
          expect(optionalMs(handle.job.claimedUntil)).toBe(10_000 + 30_000)
          expect(yield* handle.retry("once")).toBe("retried")
          // the row's backoff base (2 s), not the other handle's (1 min)
          expect(ms((yield* mustGet(q, fromHandle.id)).runAt)).toBe(10_000 + 2_000)
          expect((yield* mustGet(q, fromHandle.id)).maxAttempts).toBe(7)
        })))
    })

    describe("ordering", () => {
      it.effect("claims go by priority desc, then runAt asc, then id asc", () =>
        run(Effect.gen(function*() {
          yield* advance("100 seconds")
          const q = yield* queueOf("order")
          const a = yield* q.enqueue("a", { runAt: 50_000 })
          const b = yield* q.enqueue("b", { runAt: 40_000 })
          const c = yield* q.enqueue("c", { priority: 5, runAt: 90_000 })
          const d = yield* q.enqueue("d", { priority: 5, runAt: 10_000 })
          const e = yield* q.enqueue("e", { priority: -1, runAt: 0 })
          const f = yield* q.enqueue("f", { runAt: 40_000 })
          const g = yield* q.enqueue("g", { priority: 5, runAt: 10_000 })
          const expected = [d, g, c, b, f, a, e]
          const claimed: Array<number> = []
          for (let i = 0; i < expected.length; i++) claimed.push((yield* mustClaim(q, "w")).job.id)
          expect(claimed).toEqual(expected)
          yield* claimsNothing(q)
        })))

      it.effect("claimBatch returns at most n, in order", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("batch")
          const ids = yield* q.enqueueBatch(["a", "b", "c", "d", "e"])
          const top = yield* q.enqueue("top", { priority: 1 })
          const first = yield* q.claimBatch("w", 3)
          expect(first.map((h) => h.job.id)).toEqual([top, ids[0], ids[1]])
          const rest = yield* q.claimBatch("w", 10)
          expect(rest.map((h) => h.job.id)).toEqual(ids.slice(2))
          expect(yield* q.claimBatch("w", 10)).toEqual([])
          for (const bad of [0, -1, 1.5, Number.NaN]) {
            expect(yield* Effect.flip(q.claimBatch("w", bad))).toMatchObject({ _tag: "InvalidOptions", field: "batch" })
          }
        })))

      // Every size claims exactly its count, the same sizes again and more distinct sizes than a store keeps
      // a statement for each (SQLite writes a batch's count into its statement: docs/performance.md).
      it.effect("claimBatch of every size from 2 to 45 claims exactly that many, in order", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("sizes", { visibilityTimeout: "10 seconds" })
          const sizes = [...Array.from({ length: 44 }, (_, i) => i + 2), 2, 7, 45]
          const ids = yield* q.enqueueBatch(Array.from({ length: sizes.reduce((a, b) => a + b, 0) }, (_, i) => i))
          let next = 0
          for (const n of sizes) {
            const batch = yield* q.claimBatch("w", n)
            expect(batch.map((h) => h.job.id)).toEqual(ids.slice(next, next + n))
            next += n
          }
          expect(yield* q.claimBatch("w", 3)).toEqual([])
          // leases lapsed: the lapsed side of the claim, at sizes met before and not
          yield* TestClock.adjust("11 seconds")
          next = 0
          for (const n of [45, 46, 3]) {
            expect((yield* q.claimBatch("w", n)).map((h) => h.job.id)).toEqual(ids.slice(next, next + n))
            next += n
          }
        })))

      it.effect("a job whose lease lapsed competes in the same order as pending ones", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("lapsed", { visibilityTimeout: "10 seconds" })
          const high = yield* q.enqueue("high", { priority: 9 })
          yield* mustClaim(q, "w1")
          const low = yield* q.enqueue("low")
          yield* advance("10 seconds")
          const batch = yield* q.claimBatch("w2", 2)
          expect(batch.map((h) => h.job.id)).toEqual([high, low])
          expect(batch[0]!.job.attempts).toBe(2)
        })))
    })

    describe("delay and runAt", () => {
      it.effect("a delayed job is not claimable before its runAt and is claimable at it", () =>
        run(Effect.gen(function*() {
          yield* advance("1 second")
          const q = yield* queueOf("later")
          const id = yield* q.enqueue("x", { delay: "10 seconds" })
          const job = yield* mustGet(q, id)
          expect(ms(job.runAt)).toBe(11_000)
          expect(job.state).toBe("pending")
          yield* advance(9_999)
          yield* claimsNothing(q)
          yield* advance(1)
          expect((yield* mustClaim(q, "w")).job.id).toBe(id)
        })))

      it.effect("runAt accepts a Date, a DateTime and epoch milliseconds; a past runAt is due now", () =>
        run(Effect.gen(function*() {
          yield* advance("10 seconds")
          const q = yield* queueOf("at")
          const date = yield* q.enqueue("date", { runAt: new Date(20_000) })
          const dateTime = yield* q.enqueue("dateTime", { runAt: DateTime.unsafeMake(30_000) })
          const epoch = yield* q.enqueue("epoch", { runAt: 40_000 })
          const past = yield* q.enqueue("past", { runAt: 5_000 })
          expect(ms((yield* mustGet(q, date)).runAt)).toBe(20_000)
          expect(ms((yield* mustGet(q, dateTime)).runAt)).toBe(30_000)
          expect(ms((yield* mustGet(q, epoch)).runAt)).toBe(40_000)
          expect(ms((yield* mustGet(q, past)).runAt)).toBe(5_000)
          expect((yield* mustClaim(q, "w")).job.id).toBe(past)
          yield* claimsNothing(q)
          yield* advance("10 seconds")
          expect((yield* mustClaim(q, "w")).job.id).toBe(date)
          yield* claimsNothing(q)
          yield* advance("20 seconds")
          expect((yield* q.claimBatch("w", 5)).map((h) => h.job.id)).toEqual([dateTime, epoch])
        })))
    })

    describe("expiry", () => {
      it.effect("a job is never delivered at or after enqueue time + expires; claim moves it to dead", () =>
        run(Effect.gen(function*() {
          yield* advance("1 second")
          const q = yield* queueOf("exp")
          const id = yield* q.enqueue("x", { expires: "10 seconds" })
          expect(optionalMs((yield* mustGet(q, id)).expiresAt)).toBe(11_000)
          const survivor = yield* q.enqueue("y")
          yield* advance("10 seconds")
          // the expired job is ahead of `survivor` (same priority, same runAt, lower id)
          expect((yield* mustClaim(q, "w")).job.id).toBe(survivor)
          const dead = yield* mustGet(q, id)
          expect(dead.state).toBe("dead")
          expect(Option.getOrUndefined(dead.lastError)).toBe("expired")
          expect(optionalMs(dead.diedAt)).toBe(11_000)
          expect(dead.attempts).toBe(0)
        })))

      it.effect("a job is still delivered one millisecond before it expires", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("exp", { expires: "10 seconds" })
          const id = yield* q.enqueue("x")
          yield* advance(9_999)
          expect((yield* mustClaim(q, "w")).job.id).toBe(id)
        })))

      it.effect("a lapsed claim past its expiry is not reclaimed: expiry wins over max attempts", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("exp", { visibilityTimeout: "5 seconds", maxAttempts: 1 })
          const id = yield* q.enqueue("x", { expires: "10 seconds" })
          const handle = yield* mustClaim(q, "w1")
          yield* advance("10 seconds")
          yield* claimsNothing(q, "w2")
          const dead = yield* mustGet(q, id)
          expect(dead.state).toBe("dead")
          expect(Option.getOrUndefined(dead.lastError)).toBe("expired")
          expect(yield* handle.ack).toBe(false)
        })))

      it.effect("a retry whose backoff runs past the expiry lets the job expire instead of running late", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("exp", { backoffBase: "1 minute" })
          const id = yield* q.enqueue("x", { expires: "30 seconds" })
          expect(yield* (yield* mustClaim(q, "w")).retry("transient")).toBe("retried")
          yield* advance("1 minute")
          yield* claimsNothing(q)
          const dead = yield* mustGet(q, id)
          expect(dead.state).toBe("dead")
          expect(Option.getOrUndefined(dead.lastError)).toBe("expired")
        })))
    })

    describe("idempotency keys", () => {
      it.effect("while a keyed job is pending or claimed, enqueue returns its id and writes nothing", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("keys")
          const id = yield* q.enqueue({ v: 1 }, { key: "k" })
          expect(yield* q.enqueue({ v: 2 }, { key: "k", priority: 9 })).toBe(id)
          expect(yield* jobCount).toBe(1)
          const job = yield* mustGet(q, id)
          expect(job.payload).toEqual({ v: 1 })
          expect(job.priority).toBe(0)
          const handle = yield* mustClaim(q, "w")
          expect(yield* q.enqueue({ v: 3 }, { key: "k" })).toBe(id)
          expect(yield* jobCount).toBe(1)
          // other queues and other keys are independent
          const other = yield* queueOf("keys-other")
          expect(yield* other.enqueue({ v: 4 }, { key: "k" })).not.toBe(id)
          expect(yield* q.enqueue({ v: 5 }, { key: "k2" })).not.toBe(id)
          expect(yield* jobCount).toBe(3)
          // acked: the key is free again
          yield* handle.ack
          const next = yield* q.enqueue({ v: 6 }, { key: "k" })
          expect((yield* mustGet(q, next)).payload).toEqual({ v: 6 })
        })))

      it.effect("the key is free again after cancel and after the job died", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("keys")
          const first = yield* q.enqueue(1, { key: "k" })
          expect(yield* q.cancel(first)).toBe(true)
          const second = yield* q.enqueue(2, { key: "k" })
          expect((yield* mustGet(q, second)).payload).toBe(2)
          expect(yield* (yield* mustClaim(q, "w")).fail("gave up")).toBe(true)
          const third = yield* q.enqueue(3, { key: "k" })
          expect(third).not.toBe(second)
          expect((yield* mustGet(q, third)).state).toBe("pending")
          expect((yield* mustGet(q, second)).state).toBe("dead")
          // the dead one cannot come back while the key names a live job
          expect(yield* q.requeueDead(second)).toBe(false)
          expect((yield* mustGet(q, second)).state).toBe("dead")
        })))

      it.effect("a delayed keyed job holds its key too", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("keys")
          const id = yield* q.enqueue(1, { key: "k", delay: "1 hour" })
          expect(yield* q.enqueue(2, { key: "k" })).toBe(id)
          expect(yield* jobCount).toBe(1)
        })))

      it.effect("a batch of one may carry a key; a larger batch sharing one key is InvalidOptions on \"key\"", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("keys")
          // one key names one job: sharing it would silently collapse the batch into its first payload
          expect(yield* Effect.flip(q.enqueueBatch(["a", "b"], { key: "k" }))).toMatchObject({
            _tag: "InvalidOptions",
            field: "key"
          })
          expect(yield* jobCount).toBe(0)
          const [id] = yield* q.enqueueBatch(["a"], { key: "k" })
          expect(yield* q.enqueueBatch(["b"], { key: "k" })).toEqual([id])
          expect(yield* q.enqueue("c", { key: "k" })).toBe(id)
          expect(yield* jobCount).toBe(1)
        })))

      it.effect("a keyed enqueue inside a rolled-back transaction leaves the key free", () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const q = yield* queueOf("keys")
          yield* sql.withTransaction(Effect.zipRight(q.enqueue(1, { key: "k" }), Effect.fail("no"))).pipe(Effect.flip)
          expect(yield* jobCount).toBe(0)
          const id = yield* q.enqueue(2, { key: "k" })
          expect((yield* mustGet(q, id)).payload).toBe(2)
        })))
    })

    describe("enqueueBatch", () => {
      it.effect("returns ids in input order, with the options stamped on every row", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("batch", { maxAttempts: 4 })
          const ids = yield* q.enqueueBatch(["a", "b", "c"], { priority: 2, delay: "1 second" })
          expect(ids).toHaveLength(3)
          expect(new Set(ids).size).toBe(3)
          for (const [i, payload] of ["a", "b", "c"].entries()) {
            const job = yield* mustGet(q, ids[i]!)
            expect(job).toMatchObject({ payload, priority: 2, maxAttempts: 4 })
            expect(ms(job.runAt)).toBe(1_000)
          }
          expect(yield* q.enqueueBatch([])).toEqual([])
          // an iterable, not only an array
          const fromSet = yield* q.enqueueBatch(new Set(["x", "y"]))
          expect(fromSet).toHaveLength(2)
          yield* advance("1 second")
          expect((yield* q.claimBatch("w", 10)).map((h) => h.job.id)).toEqual([...ids, ...fromSet])
        })))

      it.effect("a large batch: every id names its own payload, in input order, ids ascending", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("large-batch")
          yield* q.enqueue("before")
          const payloads = Array.from({ length: 257 }, (_, i) => ({ i }))
          const ids = yield* q.enqueueBatch(payloads)
          expect(ids).toHaveLength(257)
          for (let i = 1; i < ids.length; i++) expect(ids[i]!).toBeGreaterThan(ids[i - 1]!)
          for (const [i, id] of ids.entries()) expect((yield* mustGet(q, id)).payload).toEqual({ i })
          const claimed = yield* q.claimBatch("w", 300)
          expect(claimed.map((h) => h.job.payload)).toEqual(["before", ...payloads])
        })))

      it.effect("one invalid payload rejects the whole batch and writes nothing", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("batch")
          const error = yield* Effect.flip(q.enqueueBatch([{ ok: 1 }, { ok: 2 }, { bad: undefined }, { ok: 3 }]))
          expect(error._tag).toBe("InvalidPayload")
          expect(yield* jobCount).toBe(0)
          const late = yield* Effect.flip(q.enqueueBatch([1, 2, 3, 4, Number.NaN]))
          expect(late._tag).toBe("InvalidPayload")
          expect(yield* jobCount).toBe(0)
        })))
    })

    describe("Schema-typed queues", () => {
      const Email = Schema.Struct({ to: Schema.String, at: Schema.Date })

      it.effect("payloads are encoded on enqueue and decoded on claim", () =>
        run(Effect.gen(function*() {
          const queues = yield* Queues.Queues
          const q = yield* queues.queue("typed", { schema: Email })
          const at = new Date(Date.UTC(2024, 0, 2, 3, 4, 5))
          const id = yield* q.enqueue({ to: "ada", at })
          // stored (and read back by getJob) in its encoded form
          expect((yield* mustGet(q, id)).payload).toEqual({ to: "ada", at: at.toISOString() })
          const handle = yield* mustClaim(q, "w")
          expect(handle.job.payload.at).toBeInstanceOf(Date)
          expect(handle.job.payload.at.getTime()).toBe(at.getTime())
          expect(handle.job.payload.to).toBe("ada")
          // a Date is fine on a typed queue, and a batch is encoded too
          const ids = yield* q.enqueueBatch([{ to: "b", at }, { to: "c", at }])
          expect(ids).toHaveLength(2)
        })))

      it.effect("a payload failing the schema on enqueue is InvalidPayload and writes nothing", () =>
        run(Effect.gen(function*() {
          const queues = yield* Queues.Queues
          const q = yield* queues.queue("typed", { schema: Email })
          const bad = { to: 42, at: new Date(0) } as unknown as typeof Email.Type
          expect((yield* Effect.flip(q.enqueue(bad)))._tag).toBe("InvalidPayload")
          const invalidDate = { to: "x", at: new Date(Number.NaN) }
          expect((yield* Effect.flip(q.enqueueBatch([{ to: "ok", at: new Date(0) }, invalidDate])))._tag).toBe(
            "InvalidPayload"
          )
          expect(yield* jobCount).toBe(0)
        })))

      it.effect("an encoded property that is undefined is dropped when the schema decodes the stored form without it", () =>
        run(Effect.gen(function*() {
          const queues = yield* Queues.Queues
          const Mail = Schema.Struct({ to: Schema.String, cc: Schema.optional(Schema.String) })
          const q = yield* queues.queue("optional", { schema: Mail })
          const id = yield* q.enqueue({ to: "ada", cc: undefined })
          expect((yield* mustGet(q, id)).payload).toEqual({ to: "ada" })
          const handle = yield* mustClaim(q, "w")
          expect(handle.job.payload.to).toBe("ada")
          expect(handle.job.payload.cc).toBeUndefined()
          yield* handle.ack
          // a schema that needs the key present cannot read it back: rejected on enqueue
          const Exact = Schema.Struct({ cc: Schema.UndefinedOr(Schema.String) }).annotations({
            parseOptions: { exact: true }
          })
          const exact = yield* queues.queue("exact", { schema: Exact })
          expect((yield* Effect.flip(exact.enqueue({ cc: undefined })))._tag).toBe("InvalidPayload")
          // undefined in an array is never dropped silently (JSON would make it null)
          const List = Schema.Struct({ xs: Schema.Array(Schema.UndefinedOr(Schema.Number)) })
          const list = yield* queues.queue("list", { schema: List })
          expect((yield* Effect.flip(list.enqueue({ xs: [1, undefined] })))._tag).toBe("InvalidPayload")
          expect(yield* jobCount).toBe(0)
        })))

      it.effect("a stored row that fails to decode goes to dead with the decode error and is never returned", () =>
        run(Effect.gen(function*() {
          const queues = yield* Queues.Queues
          const untyped = yield* queues.queue("typed")
          const typed = yield* queues.queue("typed", { schema: Email })
          const rotten = yield* untyped.enqueue({ to: "x", at: "not a date" })
          const alsoRotten = yield* untyped.enqueue({ unexpected: true })
          const good = yield* typed.enqueue({ to: "y", at: new Date(1_000) })
          const handle = yield* mustClaim(typed, "w")
          expect(handle.job.id).toBe(good)
          for (const id of [rotten, alsoRotten]) {
            const dead = yield* mustGet(typed, id)
            expect(dead.state).toBe("dead")
            expect(Option.getOrElse(dead.lastError, () => "")).not.toBe("")
            expect(Option.isSome(dead.diedAt)).toBe(true)
          }
          expect(Option.getOrThrow((yield* mustGet(typed, rotten)).lastError)).toMatch(/Date|date/)
          yield* claimsNothing(typed)
          expect((yield* typed.stats).dead).toBe(2)
          // claimBatch skips them too
          yield* untyped.enqueue({ nope: 1 })
          yield* typed.enqueue({ to: "z", at: new Date(2_000) })
          const batch = yield* typed.claimBatch("w", 5)
          expect(batch.map((h) => h.job.payload.to)).toEqual(["z"])
        })))
    })

    describe("the job handle", () => {
      it.effect("ack after the lease ended, with nobody reclaiming, still succeeds", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("late", { visibilityTimeout: "10 seconds" })
          const id = yield* q.enqueue("x")
          const handle = yield* mustClaim(q, "w")
          yield* advance("1 minute")
          expect(yield* handle.ack).toBe(true)
          expect(Option.isNone(yield* q.getJob(id))).toBe(true)
        })))

      it.effect("a lapsed lease is reclaimable exactly at claimedUntil", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("lease", { visibilityTimeout: "10 seconds" })
          const id = yield* q.enqueue("x")
          yield* mustClaim(q, "w1")
          yield* advance(9_999)
          yield* claimsNothing(q, "w2")
          yield* advance(1)
          const second = yield* mustClaim(q, "w2")
          expect(second.job.id).toBe(id)
          expect(second.job.attempts).toBe(2)
          expect(Option.getOrUndefined(second.job.workerId)).toBe("w2")
        })))

      it.effect("fencing: after another worker reclaimed, every operation of the stale handle reports loss", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("fence", { visibilityTimeout: "10 seconds", maxAttempts: 5 })
          const id = yield* q.enqueue("x")
          const stale = yield* mustClaim(q, "w1")
          yield* advance("10 seconds")
          const fresh = yield* mustClaim(q, "w2")
          expect(fresh.job.id).toBe(id)
          const before = yield* mustGet(q, id)

          expect(yield* stale.ack).toBe(false)
          expect(yield* stale.retry("late")).toBe("lost")
          expect(yield* stale.retry("late", "0 seconds")).toBe("lost")
          expect(yield* stale.fail("late")).toBe(false)
          expect(yield* stale.heartbeat()).toBe(false)
          expect(yield* stale.heartbeat("1 hour")).toBe(false)
          expect(yield* stale.release).toBe(false)
          expect(yield* mustGet(q, id)).toEqual(before)

          expect(yield* fresh.heartbeat()).toBe(true)
          expect(yield* fresh.ack).toBe(true)
        })))

      it.effect("ackAll acks a batch in one go and reports, per handle in order, whether its claim still owned the job", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("acks", { visibilityTimeout: "10 seconds" })
          const ids = yield* q.enqueueBatch(["a", "b", "c"])
          const [a, b, c] = yield* q.claimBatch("w1", 3)
          expect(yield* b!.ack).toBe(true)
          yield* advance("10 seconds")
          const retaken = yield* mustClaim(q, "w2") // c's lease lapsed too, but a comes first
          expect(retaken.job.id).toBe(ids[0])
          expect(yield* q.ackAll([a!, b!, c!])).toEqual([false, false, true])
          expect(Option.isSome(yield* q.getJob(ids[0]!))).toBe(true)
          expect(Option.isNone(yield* q.getJob(ids[2]!))).toBe(true)
          expect(yield* q.ackAll([])).toEqual([])
          expect(yield* q.ackAll([retaken])).toEqual([true])
          expect(yield* jobCount).toBe(0)
        })))

      it.effect("ackAll joins the application's transaction; a handle of another queue is rejected before anything is acked", () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const q = yield* queueOf("acks")
          const other = yield* queueOf("acks-other")
          yield* q.enqueueBatch([1, 2])
          yield* other.enqueue(3)
          const handles = yield* q.claimBatch("w", 2)
          const foreign = yield* mustClaim(other, "w")
          const rejected = yield* Effect.flip(q.ackAll([...handles, foreign]))
          expect(rejected).toMatchObject({ _tag: "InvalidOptions", field: "handles" })
          expect(yield* jobCount).toBe(3)
          const rolledBack = yield* Effect.flip(
            sql.withTransaction(Effect.zipRight(q.ackAll(handles), Effect.fail(new Boom({ code: 1 }))))
          )
          expect(rolledBack).toMatchObject({ _tag: "Boom" })
          expect(yield* jobCount).toBe(3)
          expect(yield* sql.withTransaction(q.ackAll(handles))).toEqual([true, true])
          expect(yield* jobCount).toBe(1)
          expect(yield* foreign.ack).toBe(true)
          expect(yield* jobCount).toBe(0)
        })))

      it.effect("a stale handle with attempts spent cannot bury the job another worker holds", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("fence", { visibilityTimeout: "10 seconds", maxAttempts: 2 })
          const id = yield* q.enqueue("x")
          yield* mustClaim(q, "w1")
          yield* advance("10 seconds")
          const second = yield* mustClaim(q, "w2")
          yield* advance("10 seconds")
          // the lease lapsed on the last attempt: the next claim buries it
          yield* claimsNothing(q, "w3")
          expect(Option.getOrUndefined((yield* mustGet(q, id)).lastError)).toBe("max attempts exceeded")
          expect(yield* second.retry("late")).toBe("lost")
          expect(yield* second.ack).toBe(false)
          expect((yield* mustGet(q, id)).state).toBe("dead")
        })))

      it.effect("retry waits the backoff curve exactly: base × 2^(attempts−1)", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("curve", { backoffBase: "1 second", maxAttempts: 5 })
          const id = yield* q.enqueue("x")
          const waits: Array<number> = []
          for (let attempt = 1; attempt <= 4; attempt++) {
            const handle = yield* mustClaim(q, "w")
            expect(handle.job.attempts).toBe(attempt)
            const now = yield* TestClock.currentTimeMillis
            expect(yield* handle.retry(`failure ${attempt}`)).toBe("retried")
            const job = yield* mustGet(q, id)
            expect(job.state).toBe("pending")
            expect(Option.getOrUndefined(job.lastError)).toBe(`failure ${attempt}`)
            expect(Option.isNone(job.claimedUntil)).toBe(true)
            expect(Option.isNone(job.workerId)).toBe(true)
            const wait = ms(job.runAt) - now
            waits.push(wait)
            yield* advance(wait - 1)
            yield* claimsNothing(q)
            expect((yield* q.stats).scheduled).toBe(1)
            yield* advance(1)
          }
          expect(waits).toEqual([1_000, 2_000, 4_000, 8_000])
          // the fifth claim is the last attempt: retry now buries it with the error
          const last = yield* mustClaim(q, "w")
          expect(last.job.attempts).toBe(5)
          const now = yield* TestClock.currentTimeMillis
          expect(yield* last.retry("final failure")).toBe("dead")
          const dead = yield* mustGet(q, id)
          expect(dead.state).toBe("dead")
          expect(Option.getOrUndefined(dead.lastError)).toBe("final failure")
          expect(optionalMs(dead.diedAt)).toBe(now)
          expect(yield* last.ack).toBe(false)
        })))

      it.effect("the backoff is capped at one hour", () =>
        run(Effect.gen(function*() {
          expect(durationMs(Queues.backoff("5 seconds", 1))).toBe(5_000)
          expect(durationMs(Queues.backoff("5 seconds", 2))).toBe(10_000)
          expect(durationMs(Queues.backoff("5 seconds", 11))).toBe(3_600_000)
          expect(durationMs(Queues.backoff("5 seconds", 1_000))).toBe(3_600_000)
          expect(durationMs(Queues.backoff("2 hours", 1))).toBe(3_600_000)
          const q = yield* queueOf("cap", { backoffBase: "20 minutes", maxAttempts: 10 })
          const id = yield* q.enqueue("x")
          const waits: Array<number> = []
          for (let attempt = 1; attempt <= 3; attempt++) {
            const handle = yield* mustClaim(q, "w")
            const now = yield* TestClock.currentTimeMillis
            yield* handle.retry()
            const wait = ms((yield* mustGet(q, id)).runAt) - now
            waits.push(wait)
            yield* advance(wait)
          }
          expect(waits).toEqual([1_200_000, 2_400_000, 3_600_000])
        })))

      it.effect("retry with an explicit delay uses it instead of the curve; no error keeps lastError", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("explicit", { backoffBase: "1 minute" })
          const id = yield* q.enqueue("x")
          const first = yield* mustClaim(q, "w")
          expect(yield* first.retry("first", "7 seconds")).toBe("retried")
          expect(ms((yield* mustGet(q, id)).runAt)).toBe(7_000)
          yield* advance("7 seconds")
          const second = yield* mustClaim(q, "w")
          expect(yield* second.retry(undefined, 0)).toBe("retried")
          const job = yield* mustGet(q, id)
          expect(ms(job.runAt)).toBe(7_000)
          expect(Option.getOrUndefined(job.lastError)).toBe("first")
          // delay 0: due at once
          expect((yield* mustClaim(q, "w")).job.attempts).toBe(3)
        })))

      it.effect("retry when the attempts are spent is dead, with the default text when no error is given", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("spent", { maxAttempts: 1 })
          const id = yield* q.enqueue("x")
          expect(yield* (yield* mustClaim(q, "w")).retry()).toBe("dead")
          const job = yield* mustGet(q, id)
          expect(job.state).toBe("dead")
          expect(Option.getOrUndefined(job.lastError)).toBe("max attempts exceeded")
          const other = yield* q.enqueue("y", { maxAttempts: 2 })
          expect(yield* (yield* mustClaim(q, "w")).retry("one", "1 hour")).toBe("retried")
          yield* advance("1 hour")
          expect(yield* (yield* mustClaim(q, "w")).retry("two", "1 hour")).toBe("dead")
          expect(Option.getOrUndefined((yield* mustGet(q, other)).lastError)).toBe("two")
        })))

      it.effect("error text: a message, else the tag and its fields as JSON, else String(error)", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("text", { maxAttempts: 10 })
          const id = yield* q.enqueue("x")
          const cases: ReadonlyArray<readonly [unknown, string]> = [
            [new Error("boom"), "boom"],
            [new Boom({ code: 7 }), "Boom {\"code\":7}"],
            ["plain text", "plain text"],
            [42, "42"]
          ]
          for (const [error, text] of cases) {
            yield* (yield* mustClaim(q, "w")).retry(error, 0)
            expect(Option.getOrUndefined((yield* mustGet(q, id)).lastError)).toBe(text)
          }
          yield* (yield* mustClaim(q, "w")).fail(new Boom({ code: 1 }))
          expect(Option.getOrUndefined((yield* mustGet(q, id)).lastError)).toBe("Boom {\"code\":1}")
        })))

      it.effect("fail moves the job to dead now, whatever the attempts left", () =>
        run(Effect.gen(function*() {
          yield* advance("3 seconds")
          const q = yield* queueOf("fail", { maxAttempts: 10 })
          const id = yield* q.enqueue("x")
          const handle = yield* mustClaim(q, "w")
          expect(yield* handle.fail("bad input")).toBe(true)
          const dead = yield* mustGet(q, id)
          expect(dead).toMatchObject({ state: "dead", attempts: 1 })
          expect(Option.getOrUndefined(dead.lastError)).toBe("bad input")
          expect(optionalMs(dead.diedAt)).toBe(3_000)
          expect(Option.isNone(dead.claimedUntil)).toBe(true)
          expect(Option.isNone(dead.workerId)).toBe(true)
          yield* claimsNothing(q)
          expect(yield* handle.fail("again")).toBe(false)
          expect(yield* handle.ack).toBe(false)
          expect(yield* handle.retry()).toBe("lost")
        })))

      it.effect("heartbeat pushes the lease to now + visibilityTimeout (or extend) and keeps others out", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("beat", { visibilityTimeout: "30 seconds" })
          const id = yield* q.enqueue("x")
          const handle = yield* mustClaim(q, "w1")
          yield* advance("20 seconds")
          expect(yield* handle.heartbeat()).toBe(true)
          expect(optionalMs((yield* mustGet(q, id)).claimedUntil)).toBe(50_000)
          yield* advance("20 seconds")
          yield* claimsNothing(q, "w2")
          expect(yield* handle.heartbeat("2 minutes")).toBe(true)
          expect(optionalMs((yield* mustGet(q, id)).claimedUntil)).toBe(40_000 + 120_000)
          yield* advance(119_999)
          yield* claimsNothing(q, "w2")
          // past the lease end with nobody reclaiming, the claim still owns the row
          yield* advance("1 minute")
          expect(yield* handle.heartbeat()).toBe(true)
          yield* advance("30 seconds")
          const thief = yield* mustClaim(q, "w2")
          expect(yield* handle.heartbeat()).toBe(false)
          expect(yield* thief.ack).toBe(true)
          expect(yield* thief.heartbeat()).toBe(false)
        })))

      it.effect("release puts the job back to pending now with the attempt given back; the handle is over", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("release", { maxAttempts: 1 })
          const id = yield* q.enqueue("x", { priority: 3 })
          const handle = yield* mustClaim(q, "w1")
          expect(handle.job.attempts).toBe(1)
          yield* advance("5 seconds")
          expect(yield* handle.release).toBe(true)
          const job = yield* mustGet(q, id)
          expect(job).toMatchObject({ state: "pending", attempts: 0, priority: 3 })
          expect(Option.isNone(job.claimedUntil)).toBe(true)
          expect(Option.isNone(job.workerId)).toBe(true)
          // the released handle reports loss even though nobody reclaimed yet
          expect(yield* handle.ack).toBe(false)
          expect(yield* handle.heartbeat()).toBe(false)
          expect(yield* handle.release).toBe(false)
          expect(yield* handle.fail("x")).toBe(false)
          expect(yield* handle.retry("x")).toBe("lost")
          expect((yield* mustGet(q, id)).state).toBe("pending")
          // with maxAttempts 1, the given-back attempt is what lets it run again
          const again = yield* mustClaim(q, "w2")
          expect(again.job.attempts).toBe(1)
          expect(yield* again.ack).toBe(true)
        })))

      it.effect("a claim that meets a due job with its attempts spent moves it to dead instead", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("spent", { visibilityTimeout: "10 seconds", maxAttempts: 2 })
          const id = yield* q.enqueue("x")
          const next = yield* q.enqueue("y")
          yield* mustClaim(q, "w1")
          yield* advance("10 seconds")
          const second = yield* mustClaim(q, "w1")
          expect(second.job).toMatchObject({ id, attempts: 2 })
          yield* advance("10 seconds")
          expect((yield* mustClaim(q, "w2")).job.id).toBe(next)
          const dead = yield* mustGet(q, id)
          expect(dead).toMatchObject({ state: "dead", attempts: 2 })
          expect(Option.getOrUndefined(dead.lastError)).toBe("max attempts exceeded")
          expect(optionalMs(dead.diedAt)).toBe(20_000)
        })))
    })
  })
