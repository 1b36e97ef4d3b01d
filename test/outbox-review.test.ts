/**
 * A review of the transactional outbox (CONTRACT §6, §8; docs/scheduler-and-outbox.md): delivered iff the
 * application's transaction commits, at least once and in contract order, through failures, interruption
 * and crashes, by many dispatchers; typed errors before anything is written; waking on commit only.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Clock, Deferred, Effect, Exit, Fiber, Layer, Option, Queue } from "effect"
import Sqlite from "better-sqlite3"
import { spawn } from "node:child_process"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import { Outbox, Queues, SqliteStore } from "../src/index.js"
import { engines, freshFile, pgChildDatabase, pgOwned, sqliteOwned } from "./contract/harness.js"
import { advance, eventually, settle, shiftedClock, type StoreServices } from "./contract/support.js"

const realClock = Clock.make()
const realSleep = (ms: number) => Effect.sleep(ms).pipe(Effect.withClock(realClock))



const backing = (name: string) => `__alkstore_outbox:${name}`

const rowsOf = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ id: number; state: string; group_key: string }>`SELECT id, state, group_key FROM __alkstore_jobs WHERE queue = ${backing(name)} ORDER BY id`)

const allJobs = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.map(sql<{ n: number | string }>`SELECT count(*) AS n FROM __alkstore_jobs`, (rows) => Number(rows[0]!.n)))

/** The failure of `effect`, which must be a typed failure (never a defect, never a success). */
const typedFailure = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.map(Effect.exit(effect), (exit) => {
    if (Exit.isSuccess(exit)) return { _tag: "succeeded" } as { _tag: string; field?: string }
    const failure = Cause.failureOption(exit.cause)
    if (Option.isNone(failure)) return { _tag: `defect: ${Cause.pretty(exit.cause).slice(0, 200)}` }
    return failure.value as unknown as { _tag: string; field?: string }
  })

for (const engine of engines) {
  describe(`outbox review — ${engine.name}`, () => {
    const store = () => engine.store({ fallbackPoll: "1 hour" })
    // engine-free behaviour runs once per engine; what goes through the application's client, on every client
    const owned = engine === sqliteOwned || engine === pgOwned

    if (owned) it.effect("bad input: every refusal is typed and comes before anything is written", () =>
      Effect.gen(function*() {
        const outboxes = yield* Outbox.Outbox
        const names: Array<[unknown, string]> = [
          ["", "InvalidName"],
          ["__alkstore", "ReservedName"],
          ["__alkstore_outbox:x", "ReservedName"],
          ["a\uD800", "InvalidName"],
          ["\uDC00b", "InvalidName"],
          ["a\u0000b", "InvalidName"],
          ["x".repeat(1001), "InvalidName"]
        ]
        const nameTags = []
        for (const [name] of names) nameTags.push((yield* typedFailure(outboxes.outbox(name as string)))._tag)
        expect(nameTags).toEqual(names.map(([, tag]) => tag))

        const handleOpts: Array<[Record<string, unknown>, string]> = [
          [{ visibilityTimeout: -1 }, "visibilityTimeout"],
          [{ visibilityTimeout: 0 }, "visibilityTimeout"],
          [{ visibilityTimeout: Number.NaN }, "visibilityTimeout"],
          [{ maxAttempts: 0 }, "maxAttempts"],
          [{ maxAttempts: 1.5 }, "maxAttempts"],
          [{ backoffBase: Number.POSITIVE_INFINITY }, "backoffBase"],
          [{ expires: "-1 second" }, "expires"]
        ]
        const handleFields = []
        for (const [opts] of handleOpts) handleFields.push((yield* typedFailure(outboxes.outbox("ok", opts as never))).field)
        expect(handleFields).toEqual(handleOpts.map(([, field]) => field))

        const box = yield* outboxes.outbox("ok")
        const cycle: Record<string, unknown> = {}
        cycle.self = cycle
        const payloads: Array<unknown> = [undefined, 1n, Number.NaN, new Date(0), cycle, { f: () => 1 }, [1, , 3], new Map()]
        const payloadTags = []
        for (const payload of payloads) payloadTags.push((yield* typedFailure(box.enqueue(payload)))._tag)
        expect(payloadTags).toEqual(payloads.map(() => "InvalidPayload"))

        const enqueueOpts: Array<[Record<string, unknown>, string]> = [
          [{ priority: 1.5 }, "priority"],
          [{ priority: Number.MAX_SAFE_INTEGER + 1 }, "priority"],
          [{ maxAttempts: 0 }, "maxAttempts"],
          [{ delay: "1 second", runAt: 0 }, "delay"],
          [{ delay: -5 }, "delay"],
          [{ runAt: Number.NaN }, "runAt"],
          [{ runAt: new Date(Number.NaN) }, "runAt"],
          [{ expires: "1 second", delay: "2 seconds" }, "expires"],
          [{ key: "" }, "key"],
          [{ key: "k\uD800" }, "key"],
          [{ group: "" }, "group"],
          [{ group: "g\uDC00" }, "group"],
          [{ group: "g\u0000" }, "group"],
          [{ group: "g".repeat(1001) }, "group"]
        ]
        const enqueueFields = []
        for (const [opts] of enqueueOpts) enqueueFields.push((yield* typedFailure(box.enqueue({ n: 1 }, opts as never))).field)
        expect(enqueueFields).toEqual(enqueueOpts.map(([, field]) => field))

        // dispatchers: a bad worker id or concurrency is refused before any claim
        const deliverNothing = () => Effect.void
        expect((yield* typedFailure(box.runOnce("", deliverNothing))).field).toBe("workerId")
        expect((yield* typedFailure(box.runOnce("w\uD800", deliverNothing))).field).toBe("workerId")
        expect((yield* typedFailure(box.run("", deliverNothing))).field).toBe("workerId")
        expect((yield* typedFailure(box.run("w", deliverNothing, { concurrency: 0 }))).field).toBe("concurrency")
        expect((yield* typedFailure(box.run("w", deliverNothing, { concurrency: 1.5 }))).field).toBe("concurrency")
        expect(yield* allJobs).toBe(0)
      }).pipe(Effect.provide(store())))

    it.effect("commit iff: rollback, savepoints and an interrupted transaction deliver nothing; a waiting dispatcher is not woken", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const box = yield* (yield* Outbox.Outbox).outbox("iff")
        yield* sql`CREATE TABLE orders (item TEXT NOT NULL)`
        const delivered = yield* Queue.unbounded<unknown>()
        const runner = yield* Effect.fork(box.run("d", (job) => Queue.offer(delivered, job.payload)))
        yield* settle

        // a rollback of the whole transaction
        yield* Effect.exit(sql.withTransaction(Effect.zipRight(box.enqueue({ m: "rolled-back" }), Effect.fail("no"))))
        // an inner savepoint rolled back, the outer committed: only the outer's message
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* box.enqueue({ m: "outer-1" })
          yield* Effect.exit(sql.withTransaction(Effect.zipRight(box.enqueue({ m: "inner-rolled-back" }), Effect.fail("inner"))))
          yield* sql.withTransaction(box.enqueue({ m: "inner-kept" }))
        }))
        // an inner savepoint released, the outer rolled back: nothing
        yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
          yield* sql.withTransaction(box.enqueue({ m: "inner-released-outer-rolled-back" }))
          yield* sql`INSERT INTO orders (item) VALUES (${"x"})`
          return yield* Effect.fail("outer")
        })))
        // an interrupted transaction
        const gate = yield* Deferred.make<void>()
        const interrupted = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
          yield* box.enqueue({ m: "interrupted" })
          yield* Deferred.succeed(gate, undefined)
          return yield* Effect.never
        })))
        yield* Deferred.await(gate)
        yield* Fiber.interrupt(interrupted)
        yield* settle

        const got = [yield* Queue.take(delivered), yield* Queue.take(delivered)]
        expect(got).toEqual([{ m: "outer-1" }, { m: "inner-kept" }])
        yield* settle
        yield* realSleep(50)
        yield* settle
        expect(yield* Queue.size(delivered)).toBe(0)
        expect(yield* rowsOf("iff")).toEqual([])
        expect(yield* allJobs).toBe(0)
        yield* Fiber.interrupt(runner)
      }).pipe(Effect.provide(store())))

    if (owned) it.effect("a failed COMMIT (a deferred foreign key) delivers nothing and wakes nobody; the next commit is delivered", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        if (!engine.capabilities.postgres) yield* sql.unsafe("PRAGMA foreign_keys = ON")
        yield* sql.unsafe("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
        yield* sql.unsafe("CREATE TABLE child (parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)")
        const box = yield* (yield* Outbox.Outbox).outbox("failed-commit")
        const delivered = yield* Queue.unbounded<unknown>()
        const runner = yield* Effect.fork(box.run("d", (job) => Queue.offer(delivered, job.payload)))
        yield* settle
        const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
          yield* sql.unsafe("INSERT INTO child (parent) VALUES (42)")
          yield* box.enqueue({ m: "never" })
        })))
        expect(Exit.isFailure(exit)).toBe(true)
        yield* settle
        yield* realSleep(50)
        yield* settle
        expect(yield* Queue.size(delivered)).toBe(0)
        expect(yield* allJobs).toBe(0)
        yield* sql.withTransaction(box.enqueue({ m: "next" }))
        expect(yield* Queue.take(delivered)).toEqual({ m: "next" })
        yield* Fiber.interrupt(runner)
      }).pipe(Effect.provide(store())))

    if (owned) it.effect("delivery order: priority desc, runAt asc, id asc; a retried message waits its backoff behind the others", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const box = yield* (yield* Outbox.Outbox).outbox("order")
        yield* sql.withTransaction(Effect.gen(function*() {
          yield* box.enqueue({ m: "a" })
          yield* box.enqueue({ m: "b" }, { priority: 5 })
          yield* box.enqueue({ m: "c" }, { delay: "1 second" })
          yield* box.enqueue({ m: "d" }, { priority: 5, group: "g1" })
          yield* box.enqueue({ m: "e" }, { priority: -1 })
          yield* box.enqueue({ m: "f" }, { group: "g2" })
          yield* box.enqueue({ m: "g" }, { runAt: 0 })
        }))
        const seen: Array<string> = []
        let failedOnce = false
        const runner = yield* Effect.fork(box.run("d", (job) =>
          Effect.suspend(() => {
            const m = (job.payload as { m: string }).m
            seen.push(m)
            if (m === "a" && !failedOnce) {
              failedOnce = true
              return Effect.fail(new Error("first a fails"))
            }
            return Effect.void
          })))
        yield* settle
        yield* eventually(Effect.sync(() => expect(seen.length).toBe(6)))
        // "g" was enqueued at runAt 0 = now: it is due with the others, behind them by id
        expect(seen).toEqual(["b", "d", "a", "f", "g", "e"])
        yield* advance("1 second")
        yield* eventually(Effect.sync(() => expect(seen.length).toBe(7)))
        expect(seen[6]).toBe("c")
        yield* advance("4 seconds")
        yield* eventually(Effect.sync(() => expect(seen.length).toBe(8)))
        expect(seen[7]).toBe("a")
        yield* Fiber.interrupt(runner)
        expect(yield* rowsOf("order")).toEqual([])
      }).pipe(Effect.provide(store())))

    if (owned) it.effect("order holds across delayed, retried and fresh messages once all are due (runOnce, one at a time)", () =>
      Effect.gen(function*() {
        const box = yield* (yield* Outbox.Outbox).outbox("due-order")
        const name = (job: { payload: unknown }) => (job.payload as { m: string }).m
        yield* box.enqueue({ m: "delayed-10s" }, { delay: "10 seconds" })
        yield* box.enqueue({ m: "retried" })
        // fails at t=0: due again at 5 s
        expect(yield* box.runOnce("w", () => Effect.fail("boom"))).toBe(true)
        yield* advance("3 seconds")
        yield* box.enqueue({ m: "fresh-3s" })
        yield* box.enqueue({ m: "delayed-1s-hi" }, { delay: "1 second", priority: 1 })
        yield* advance("27 seconds")
        yield* box.enqueue({ m: "fresh-30s" })
        const seen: Array<string> = []
        while (yield* box.runOnce("w", (job) => Effect.sync(() => seen.push(name(job))))) {
          // one by one
        }
        // priority first; then by runAt: fresh-3s (3 s), retried (5 s), delayed-10s (10 s), fresh-30s (30 s)
        expect(seen).toEqual(["delayed-1s-hi", "fresh-3s", "retried", "delayed-10s", "fresh-30s"])
      }).pipe(Effect.provide(store())))

    it.effect("stopping dispatchers at arbitrary moments leaves no claim behind and delivers nothing twice (synchronous deliverer)", () =>
      Effect.gen(function*() {
        const box = yield* (yield* Outbox.Outbox).outbox("stops")
        const ids: Array<number> = []
        for (let i = 0; i < 40; i++) ids.push(yield* box.enqueue({ i }))
        const counts = new Map<number, number>()
        const deliver = (job: { id: number }) => Effect.sync(() => counts.set(job.id, (counts.get(job.id) ?? 0) + 1))
        const claimedLeft: Array<number> = []
        for (let round = 0; round < 8 && counts.size < ids.length; round++) {
          const runner = yield* Effect.fork(box.run(`d${round}`, deliver, { concurrency: 3 }))
          yield* realSleep(round % 3)
          yield* Fiber.interrupt(runner)
          claimedLeft.push((yield* rowsOf("stops")).filter((r) => r.state === "claimed").length)
        }
        expect(claimedLeft.every((n) => n === 0)).toBe(true)
        while (yield* box.runOnce("final", deliver)) {
          // drain
        }
        expect([...counts.keys()].sort((a, b) => a - b)).toEqual(ids)
        expect([...counts.entries()].filter(([, n]) => n !== 1)).toEqual([])
        expect(yield* rowsOf("stops")).toEqual([])
      }).pipe(Effect.provide(store())))

    if (owned) it.effect("group on the outbox: stamped and kept; no limits reach the backing queue, a plain queue's don't leak in", () =>
      Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const box = yield* (yield* Outbox.Outbox).outbox("grouped")
        expect((yield* typedFailure(queues.setLimits(backing("grouped"), { concurrency: 1 })))._tag).toBe("ReservedName")
        expect((yield* typedFailure(queues.limits(backing("grouped"))))._tag).toBe("ReservedName")
        // a plain queue of the outbox's own name, serial per group and one at a time
        yield* queues.setLimits("grouped", { concurrency: 1, groupConcurrency: 1 })
        const ids = [
          yield* box.enqueue({ n: 1 }, { group: "tenant-a" }),
          yield* box.enqueue({ n: 2 }, { group: "tenant-a" }),
          yield* box.enqueue({ n: 3 }, { group: "tenant-b" })
        ]
        expect((yield* rowsOf("grouped")).map((row) => row.group_key)).toEqual(["tenant-a", "tenant-a", "tenant-b"])
        // three deliveries in flight at once: the plain queue's limits do not hold the outbox back
        const inFlight = yield* Deferred.make<void>()
        let started = 0
        const fibers = []
        for (let i = 0; i < 3; i++) {
          fibers.push(yield* Effect.fork(box.runOnce(`w${i}`, () =>
            Effect.suspend(() => {
              started++
              return started === 3 ? Deferred.succeed(inFlight, undefined) : Deferred.await(inFlight)
            }))))
        }
        for (const fiber of fibers) expect(yield* Fiber.join(fiber)).toBe(true)
        expect(started).toBe(3)
        expect(yield* rowsOf("grouped")).toEqual([])
        expect((yield* box.stats).heldBack).toBe(0)
        expect(ids.length).toBe(3)
      }).pipe(Effect.provide(store())))

    if (owned) it.effect("runOnce interrupted mid-delivery releases the claim (no attempt, no error) and the message is delivered later", () =>
      Effect.gen(function*() {
        const box = yield* (yield* Outbox.Outbox).outbox("interrupt")
        const id = yield* box.enqueue({ m: 1 })
        const started = yield* Deferred.make<void>()
        const fiber = yield* Effect.fork(box.runOnce("w", () => Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)))
        yield* Deferred.await(started)
        expect(Exit.isInterrupted(yield* Fiber.interrupt(fiber))).toBe(true)
        const job = Option.getOrThrow(yield* box.getJob(id))
        expect([job.state, job.attempts, Option.getOrNull(job.lastError)]).toEqual(["pending", 0, null])
        const seen: Array<number> = []
        expect(yield* box.runOnce("w", (j) => Effect.sync(() => seen.push(j.attempts)))).toBe(true)
        expect(seen).toEqual([1])
        expect(yield* rowsOf("interrupt")).toEqual([])
      }).pipe(Effect.provide(store())))

    if (owned) it.effect("a delivery that outlives its lease: the message goes to the next dispatcher, the late ack is fenced off", () =>
      Effect.gen(function*() {
        const box = yield* (yield* Outbox.Outbox).outbox("late", { visibilityTimeout: "10 seconds" })
        const id = yield* box.enqueue({ m: 1 })
        const release = yield* Deferred.make<void>()
        const started = yield* Deferred.make<void>()
        const slow = yield* Effect.fork(box.runOnce("slow", (_job, handle) =>
          Effect.gen(function*() {
            yield* Deferred.succeed(started, undefined)
            yield* Deferred.await(release)
            return yield* Effect.map(handle.ack, (acked) => expect(acked).toBe(false))
          })))
        yield* Deferred.await(started)
        yield* advance("10 seconds")
        const seen: Array<[number, number]> = []
        expect(yield* box.runOnce("fast", (job) => Effect.sync(() => seen.push([job.id, job.attempts])))).toBe(true)
        expect(seen).toEqual([[id, 2]])
        yield* Deferred.succeed(release, undefined)
        expect(yield* Fiber.join(slow)).toBe(true)
        expect(yield* rowsOf("late")).toEqual([])
      }).pipe(Effect.provide(store())))

    it.effect("many dispatchers in one process: every committed message delivered exactly once (no failures, no lapses)", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const box = yield* (yield* Outbox.Outbox).outbox("many")
        const counts = new Map<number, number>()
        const deliver = (job: { payload: unknown }) =>
          Effect.gen(function*() {
            const n = (job.payload as { n: number }).n
            counts.set(n, (counts.get(n) ?? 0) + 1)
            yield* Effect.yieldNow()
          })
        const runners = [
          yield* Effect.fork(box.run("d1", deliver, { concurrency: 4 })),
          yield* Effect.fork(box.run("d2", deliver, { concurrency: 3 })),
          yield* Effect.fork(box.run("d3", deliver))
        ]
        yield* settle
        const committed: Array<number> = []
        for (let t = 0; t < 20; t++) {
          const ns = [t * 3, t * 3 + 1, t * 3 + 2]
          const exit = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
            yield* box.enqueue({ n: ns[0] })
            yield* box.enqueue({ n: ns[1] })
            yield* box.enqueue({ n: ns[2] })
            if (t % 4 === 3) return yield* Effect.fail("rolled back")
          })))
          if (Exit.isSuccess(exit)) committed.push(...ns)
        }
        yield* eventually(Effect.map(rowsOf("many"), (rows) => expect(rows).toEqual([])))
        yield* settle
        for (const runner of runners) yield* Fiber.interrupt(runner)
        expect([...counts.keys()].sort((a, b) => a - b)).toEqual(committed)
        expect([...counts.values()].every((c) => c === 1)).toBe(true)
      }).pipe(Effect.provide(store())))
  })
}

for (const engine of engines) {
  describe(`outbox review, two stores on one database — ${engine.name}`, () => {
    it.live("a commit through one store wakes the other's waiting dispatcher; a rollback delivers nothing; each message once", () => {
      const filename = freshFile("two-stores")
      return Effect.gen(function*() {
        const a = yield* Layer.build(engine.store({ filename, fallbackPoll: "1 hour" }))
        const b = yield* Layer.build(engine.store({ filename, fallbackPoll: "1 hour" }))
        const boxA = yield* Effect.provide(Effect.flatMap(Outbox.Outbox, (o) => o.outbox("shared")), a)
        const boxB = yield* Effect.provide(Effect.flatMap(Outbox.Outbox, (o) => o.outbox("shared")), b)
        const sqlA = yield* Effect.provide(SqlClient.SqlClient, a)
        const sqlB = yield* Effect.provide(SqlClient.SqlClient, b)
        const seen: Array<[string, number]> = []
        const runnerB = yield* Effect.fork(Effect.provide(boxB.run("b", (job) => Effect.sync(() => seen.push(["b", (job.payload as { n: number }).n])), { concurrency: 2 }), b))
        yield* realSleep(100)
        // only B dispatches: A's commit must reach it through the engine's cross-store feed
        yield* Effect.provide(sqlA.withTransaction(Effect.zipRight(boxA.enqueue({ n: 1 }), boxA.enqueue({ n: 2 }))), a)
        yield* eventually(Effect.sync(() => expect(seen.length).toBe(2)), 3)
        yield* Effect.provide(Effect.exit(sqlA.withTransaction(Effect.zipRight(boxA.enqueue({ n: -1 }), Effect.fail("no")))), a)
        // now both dispatch
        const runnerA = yield* Effect.fork(Effect.provide(boxA.run("a", (job) => Effect.sync(() => seen.push(["a", (job.payload as { n: number }).n])), { concurrency: 2 }), a))
        for (let n = 3; n <= 30; n++) {
          yield* (n % 2 === 0
            ? Effect.provide(sqlA.withTransaction(boxA.enqueue({ n })), a)
            : Effect.provide(sqlB.withTransaction(boxB.enqueue({ n })), b))
        }
        yield* eventually(Effect.sync(() => expect(seen.length).toBe(30)), 5)
        // a handler's push runs before its dispatcher's ack commits: wait for the acks too (polled, with a
        // deadline), or the interruption below can catch the last ack in flight and leave its row claimed
        yield* eventually(Effect.map(Effect.provide(rowsOf("shared"), a), (rows) => expect(rows).toEqual([])), 10)
        yield* Fiber.interrupt(runnerA)
        yield* Fiber.interrupt(runnerB)
        expect(seen.map(([, n]) => n).sort((x, y) => x - y)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1))
        expect(yield* Effect.provide(rowsOf("shared"), a)).toEqual([])
      }).pipe(Effect.scoped)
    })
  })
}

// ---- several processes: real children, real SIGKILLs

interface Child {
  readonly pid: number
  /** The first JSON line of stdout that `match` accepts. */
  readonly line: <A>(match: (value: any) => A | undefined) => Effect.Effect<A, Error>
  readonly kill: Effect.Effect<void>
  readonly exited: Effect.Effect<number | null>
}

const child = (args: ReadonlyArray<string>) =>
  Effect.acquireRelease(
    Effect.sync((): Child => {
      const proc = spawn(process.execPath, ["--import", "tsx", "test/fixtures/outbox-review/child.ts", ...args], {
        stdio: ["ignore", "pipe", "pipe"]
      })
      const values: Array<unknown> = []
      let buffered = ""
      let stderr = ""
      let exitCode: number | null | undefined
      const listeners = new Set<() => void>()
      const notify = () => listeners.forEach((l) => l())
      proc.stdout.on("data", (chunk) => {
        buffered += chunk
        const lines = buffered.split("\n")
        buffered = lines.pop()!
        for (const text of lines) {
          try {
            values.push(JSON.parse(text))
          } catch {
            // not ours
          }
        }
        notify()
      })
      proc.stderr.on("data", (chunk) => (stderr += chunk))
      proc.on("exit", (code) => {
        exitCode = code
        notify()
      })
      const line = <A>(match: (value: any) => A | undefined) =>
        Effect.async<A, Error>((resume) => {
          const check = () => {
            for (const value of values) {
              const found = match(value)
              if (found !== undefined) {
                listeners.delete(check)
                return resume(Effect.succeed(found))
              }
            }
            if (exitCode !== undefined) {
              listeners.delete(check)
              resume(Effect.fail(new Error(`child ${args.join(" ")} exited ${exitCode}: ${stderr.slice(0, 2000)}`)))
            }
          }
          listeners.add(check)
          check()
          return Effect.sync(() => listeners.delete(check))
        })
      const exited = Effect.async<number | null>((resume) => {
        if (exitCode !== undefined) return resume(Effect.succeed(exitCode))
        proc.once("exit", (code) => resume(Effect.succeed(code)))
      })
      return {
        pid: proc.pid!,
        line,
        kill: Effect.zipRight(Effect.sync(() => proc.kill("SIGKILL")), Effect.asVoid(exited)),
        exited
      }
    }),
    (c) => c.kill
  )


const multiprocess = [
  { engine: sqliteOwned, database: (filename: string) => Effect.succeed(filename) },
  { engine: pgOwned, database: (filename: string) => Effect.promise(() => pgChildDatabase(filename)) }
] as const

for (const { database, engine } of multiprocess) {
  describe(`outbox review, several processes — ${engine.name}`, () => {
    it.live("dispatchers in two processes, an enqueuer SIGKILLed inside its transaction, a dispatcher SIGKILLed mid-delivery: each committed message delivered, once unless its dispatcher died", () => {
      const filename = freshFile("mp-outbox")
      return Effect.gen(function*() {
        const db = yield* database(filename)
        const sql = yield* SqlClient.SqlClient
        yield* sql`CREATE TABLE ob_deliveries (job_id BIGINT NOT NULL, n BIGINT NOT NULL, worker TEXT NOT NULL, attempt BIGINT NOT NULL)`
        yield* sql`CREATE TABLE orders (item TEXT NOT NULL)`
        const box = yield* (yield* Outbox.Outbox).outbox("mp")
        const hangId = yield* sql.withTransaction(box.enqueue({ n: 1000, hang: true }, { priority: 10 }))

        const dispatcher = yield* child([db, "deliver", "p1", "2"])
        // the marked message is the child dispatcher's first: it hangs in it (before the enqueuer starts: on
        // SQLite its last transaction holds the write lock until it is killed, and no claim gets through)
        expect(yield* dispatcher.line((v) => v.hanging)).toBe(hangId)
        const enqueuer = yield* child([db, "enqueue", "0", "60", "then-hang"])
        // a second dispatcher process (this one) joins, woken only by commits
        const delivered: Array<number> = []
        const parentRun = yield* Effect.fork(box.run("p0", (job) =>
          Effect.zipRight(
            sql`INSERT INTO ob_deliveries (job_id, n, worker, attempt) VALUES (${job.id}, ${(job.payload as { n: number }).n}, ${"p0"}, ${job.attempts})`,
            Effect.sync(() => delivered.push(job.id))
          ), { concurrency: 2 }))
        const { committed } = yield* enqueuer.line((v) => (Array.isArray(v.committed) ? v as { committed: Array<number> } : undefined))
        expect(committed.length).toBe(45)
        // the writer is inside its last transaction (on SQLite it holds the write lock): kill it there
        yield* enqueuer.line((v) => (v.inTx === true ? true : undefined))
        yield* enqueuer.kill
        // every other committed message delivered and acked: only the hung one is left (claimed)
        yield* eventually(Effect.map(sql<{ id: number; state: string }>`SELECT id, state FROM __alkstore_jobs`, (rows) =>
          expect(rows.map((r) => [Number(r.id), r.state])).toEqual([[hangId, "claimed"]])), 10)
        // SIGKILL the dispatcher mid-delivery
        yield* dispatcher.kill
        yield* Fiber.interrupt(parentRun)

        // its lease lapses (60 s; the clock moved on): the message is delivered again, here
        const ahead = shiftedClock(61_000)
        const redelivered = yield* box.runOnce("parent", (job) =>
          sql`INSERT INTO ob_deliveries (job_id, n, worker, attempt) VALUES (${job.id}, ${(job.payload as { n: number }).n}, ${"parent"}, ${job.attempts})`
        ).pipe(Effect.withClock(ahead))
        expect(redelivered).toBe(true)
        expect(yield* box.runOnce("parent", () => Effect.void).pipe(Effect.withClock(ahead))).toBe(false)

        const deliveries = (yield* sql<{ job_id: number; n: number; worker: string; attempt: number }>`SELECT job_id, n, worker, attempt FROM ob_deliveries`)
          .map((r) => ({ n: Number(r.n), worker: r.worker, attempt: Number(r.attempt) }))
        const byN = new Map<number, number>()
        for (const d of deliveries) byN.set(d.n, (byN.get(d.n) ?? 0) + 1)
        // exactly the committed messages (never the rolled-back ones, never the killed writer's), each once,
        // and the hung one twice: by the killed dispatcher, then here
        expect([...byN.keys()].sort((a, b) => a - b)).toEqual([...committed, 1000].sort((a, b) => a - b))
        expect([...byN.entries()].filter(([n, c]) => c !== (n === 1000 ? 2 : 1))).toEqual([])
        expect(deliveries.filter((d) => d.n === 1000).map((d) => [d.worker === "parent", d.attempt])).toEqual([[false, 1], [true, 2]])
        // the killed writer's transaction never happened; every dispatcher took part
        expect((yield* sql<{ item: string }>`SELECT item FROM orders`).map((r) => r.item)).not.toContain("never-committed")
        expect(new Set(deliveries.map((d) => d.worker))).toEqual(new Set(["p0", "p1", "parent"]))
        expect(yield* allJobs).toBe(0)
      }).pipe(Effect.scoped, Effect.provide(engine.store({ filename, fallbackPoll: "1 hour" })))
    }, 60_000)
  })
}

describe("outbox review, a busy SQLite file — sqlite (SqliteStore.layer)", () => {
  it.effect("interrupting runOnce while its claim waits out another connection's write lock stops it at once", () => {
    const filename = freshFile("busy-outbox")
    return Effect.gen(function*() {
      const box = yield* (yield* Outbox.Outbox).outbox("busy")
      yield* box.enqueue({ m: 1 })
      // another connection (another process, as far as the file knows) holds the write lock
      const other = new Sqlite(filename)
      other.exec("BEGIN IMMEDIATE")
      const delivered: Array<unknown> = []
      const dispatcher = yield* Effect.fork(box.runOnce("w", (job) => Effect.sync(() => delivered.push(job.payload))))
      yield* realSleep(200)
      const started = realClock.unsafeCurrentTimeMillis()
      const stopping = yield* Effect.fork(Fiber.interrupt(dispatcher))
      let stoppedAfter: number | undefined
      while (realClock.unsafeCurrentTimeMillis() - started < 1_000) {
        if (Option.isSome(yield* Fiber.poll(stopping))) {
          stoppedAfter = realClock.unsafeCurrentTimeMillis() - started
          break
        }
        yield* realSleep(10)
      }
      other.exec("ROLLBACK")
      other.close()
      const exit = yield* Fiber.join(stopping)
      // the stop is not held up by the other writer (as a worker's, a take's or a stream's claim is not:
      // docs/decisions.md, "A worker's claim waiting on a busy SQLite file"); nothing was claimed
      expect({ stoppedWithin1s: stoppedAfter !== undefined, interrupted: Exit.isInterrupted(exit) }).toEqual({
        stoppedWithin1s: true,
        interrupted: true
      })
      expect(delivered).toEqual([])
      expect((yield* rowsOf("busy")).map((r) => r.state)).toEqual(["pending"])
    }).pipe(Effect.provide(sqliteOwned.store({ filename, busyPatience: "8 seconds" })))
  })
})

describe("outbox review, an in-memory database — sqlite (SqliteStore.layerFromClient over @effect/sql-sqlite-node)", () => {
  it.effect("a message committed in the application's transaction wakes the waiting dispatcher (no fallback poll)", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const box = yield* (yield* Outbox.Outbox).outbox("memory")
      const delivered = yield* Queue.unbounded<unknown>()
      const runner = yield* Effect.fork(box.run("d", (job) => Queue.offer(delivered, job.payload)))
      yield* settle
      // outside a transaction: woken at once
      yield* box.enqueue({ m: "alone" })
      yield* eventually(Effect.map(Queue.size(delivered), (n) => expect(n).toBe(1)), 2)
      // inside the application's transaction: woken on its commit (CONTRACT §7), not at the fallback poll (1 hour)
      yield* sql.withTransaction(box.enqueue({ m: "in-transaction" }))
      const woken = yield* Effect.exit(eventually(Effect.map(Queue.size(delivered), (n) => expect(n).toBe(2)), 1))
      yield* Fiber.interrupt(runner)
      expect({ deliveredAfterCommit: Exit.isSuccess(woken), pending: (yield* box.stats).pending }).toEqual({
        deliveredAfterCommit: true,
        pending: 0
      })
    }).pipe(
      Effect.provide(
        SqliteStore.layerFromClient({ fallbackPoll: "1 hour" }).pipe(Layer.provideMerge(SqliteClient.layer({ filename: ":memory:" })))
      )
    ))
})
