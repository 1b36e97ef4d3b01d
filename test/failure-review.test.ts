/**
 * Storage failures from real causes are typed errors, and work survives them
 * (CONTRACT.md §2, §8; DEVELOPERS: "Storage failures are SqlError, never
 * defects. A library never crashes its host process.").
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import Sqlite from "better-sqlite3"
import { Cause, Chunk, Deferred, Effect, Exit, Fiber, Logger, Option, Redacted, Ref } from "effect"
import { Locks, Outbox, Queues, Scheduler } from "../src/index.js"
import { execFileSync } from "node:child_process"
import * as net from "node:net"
import { Admin, PgStore } from "../src/index.js"
import { engines, freshFile, pgDatabaseUrl, pgSchemaFor, pgTestTypes } from "./contract/harness.js"

/** Every failure of `exit` is a typed error of one of `tags`; no defect, no interruption. */
const typedFailure = (exit: Exit.Exit<unknown, unknown>, tags: ReadonlyArray<string> = ["SqlError"]) => {
  if (Exit.isSuccess(exit)) return `succeeded with ${JSON.stringify(exit.value)}`
  if (Cause.isDie(exit.cause)) return `died: ${Cause.pretty(exit.cause)}`
  const failures = Chunk.toReadonlyArray(Cause.failures(exit.cause)) as ReadonlyArray<{ _tag?: string }>
  if (failures.length === 0) return `no failure: ${Cause.pretty(exit.cause)}`
  for (const f of failures) if (!tags.includes(f._tag ?? "")) return `failed with ${String(f._tag)}`
  return "typed"
}

/** Warnings logged while `effect` runs (the background loops' "logged" half). */
const collectingLogs = Effect.gen(function*() {
  const lines = yield* Ref.make<ReadonlyArray<string>>([])
  const logger = Logger.make(({ message }) => {
    Effect.runSync(Ref.update(lines, (all) => [...all, String(Array.isArray(message) ? message[0] : message)]))
  })
  return { lines, logger }
})

const sqliteEngines = engines.filter((e) => e.capabilities.sqliteFile)

for (const engine of sqliteEngines) {
  describe(`disk full (PRAGMA max_page_count pinned at the file's size) — ${engine.name}`, () => {
    it.live("writes that need space answer SqlError; claims and acks go on; once space returns the same store writes again", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* (yield* Queues.Queues).queue("full")
        yield* queue.enqueue({ n: 0 })
        const [pages] = yield* sql<{ page_count: number }>`PRAGMA page_count`
        yield* sql.unsafe(`PRAGMA max_page_count = ${pages!.page_count}`)
        const big = "x".repeat(20_000)
        const outbox = yield* (yield* Outbox.Outbox).outbox("o")
        const exits: Record<string, Exit.Exit<unknown, unknown>> = {
          enqueue: yield* Effect.exit(queue.enqueue({ big })),
          enqueueBatch: yield* Effect.exit(queue.enqueueBatch([{ big }, { big }])),
          schedule: yield* Effect.exit(Effect.flatMap(Scheduler.Scheduler, (s) => s.schedule("s", "@every 1h", "full", { big }))),
          outboxEnqueue: yield* Effect.exit(outbox.enqueue({ big }))
        }
        const outcome = Object.fromEntries(Object.entries(exits).map(([k, e]) => [k, typedFailure(e).slice(0, 200)]))
        expect(outcome).toEqual(Object.fromEntries(Object.keys(exits).map((k) => [k, "typed"])))
        const handle = Option.getOrThrow(yield* queue.claim("w"))
        expect(yield* handle.ack).toBe(true)
        yield* sql.unsafe(`PRAGMA max_page_count = 1073741823`)
        yield* queue.enqueue({ big })
        expect((yield* queue.stats).pending).toBe(1)
      }).pipe(Effect.provide(engine.store())))

    it.live("an enqueue that meets a full disk inside the application's transaction: nothing of that transaction commits", () =>
      Effect.gen(function*() {
        // CONTRACT §3 / §8: an enqueue commits or rolls back with the application's transaction;
        // docs/guarantees.md: a full disk fails operations with SqlError "and leaves every row as it was".
        // SQLite may roll the whole transaction back on SQLITE_FULL; the caller, who handled the failed
        // enqueue, goes on in what it believes is still its transaction.
        const sql = yield* SqlClient.SqlClient
        const queue = yield* (yield* Queues.Queues).queue("full-tx")
        yield* queue.enqueue({ n: 0 })
        const [pages] = yield* sql<{ page_count: number }>`PRAGMA page_count`
        yield* sql.unsafe(`PRAGMA max_page_count = ${pages!.page_count}`)
        const transaction = yield* Effect.exit(sql.withTransaction(Effect.gen(function*() {
          const failed = yield* Effect.exit(queue.enqueue({ big: "x".repeat(20_000) }))
          expect(typedFailure(failed)).toBe("typed")
          yield* queue.enqueue({ n: "after the failure, same transaction" })
        })))
        yield* sql.unsafe(`PRAGMA max_page_count = 1073741823`)
        const jobs = yield* sql<{ payload: string }>`SELECT payload FROM __alkstore_jobs ORDER BY id`
        // Either the transaction commits whole, or nothing of it is in the database.
        expect({
          transaction: Exit.isSuccess(transaction) ? "committed" : "failed",
          jobs: jobs.map((j) => j.payload)
        }).toEqual({
          transaction: "failed",
          jobs: [JSON.stringify({ n: 0 })]
        })
      }).pipe(Effect.provide(engine.store())))
  })
}

describe("a corrupt file under a running store (SqliteStore.layer)", () => {
  it.live("every operation answers SqlError; the worker and the standby keep running", () => {
    const filename = freshFile("corrupt")
    return Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const queue = yield* (yield* Queues.Queues).queue("c")
      yield* queue.enqueueBatch(Array.from({ length: 300 }, (_, i) => ({ i, pad: "p".repeat(200) })))
      yield* sql`PRAGMA wal_checkpoint(TRUNCATE)`
      // Another process overwrites every page after the second with 0xFF; another connection's commit
      // (page 1 only) makes the store's connection drop its page cache and read the damage.
      const size = Number(execFileSync("stat", ["-c", "%s", filename]).toString())
      execFileSync("sh", [
        "-c",
        `head -c ${size - 8192} /dev/zero | tr '\\0' '\\377' | dd of=${filename} bs=4096 seek=2 conv=notrunc status=none`
      ])
      const other = new Sqlite(filename)
      other.pragma("user_version = 7")
      other.close()
      const queues = yield* Queues.Queues
      const fiber = yield* Effect.forkScoped(Effect.all([
        queue.process("w", () => Effect.void),
        Effect.flatMap(Scheduler.Scheduler, (s) => s.runAsStandby)
      ], { concurrency: "unbounded" }).pipe(Effect.provide(Logger.remove(Logger.defaultLogger))))
      const exits: Record<string, Exit.Exit<unknown, unknown>> = {
        stats: yield* Effect.exit(queue.stats),
        claim: yield* Effect.exit(queue.claim("x")),
        enqueue: yield* Effect.exit(queue.enqueue({ a: 1 })),
        dead: yield* Effect.exit(queue.dead()),
        maintenance: yield* Effect.exit(queues.maintenance),
        acquire: yield* Effect.exit(Effect.flatMap(Locks.Locks, (l) => l.acquire("l", { ttl: "1 second" }))),
        schedule: yield* Effect.exit(Effect.flatMap(Scheduler.Scheduler, (s) => s.schedule("s", "@every 1s", "c", {}))),
        adminJobs: yield* Effect.exit(Effect.flatMap(Admin.Admin, (a) => a.jobs({ limit: 5 }))),
        take: yield* Effect.exit(queue.take("x"))
      }
      const outcome = Object.fromEntries(Object.entries(exits).map(([k, e]) => [k, typedFailure(e).slice(0, 200)]))
      expect(outcome).toEqual(Object.fromEntries(Object.keys(exits).map((k) => [k, "typed"])))
      yield* sleep(400)
      expect(fiber.unsafePoll()).toBe(null)
    }).pipe(Effect.scoped, Effect.provide(sqliteEngines[0]!.store({ filename, fallbackPoll: "100 millis", leaderTtl: "400 millis", leaderRenewEvery: "100 millis" })))
  })
})

/** Real-time sleep (these tests wait out real busy patience). */
const sleep = (millis: number) => Effect.sleep(`${millis} millis`)

/** Polls `probe` in real time until it holds (at most `millis`). */
const until = <E, R>(what: string, probe: Effect.Effect<boolean, E, R>, millis = 5_000) =>
  Effect.gen(function*() {
    const deadline = Date.now() + millis
    while (Date.now() < deadline) {
      if (yield* probe) return
      yield* sleep(25)
    }
    throw new Error(`timed out waiting until ${what}`)
  })

for (const engine of sqliteEngines) {
  describe(`the file's write lock held by another connection past the store's patience — ${engine.name}`, () => {
    it.live("every write answers SqlError, reads go on; background work logs, survives, and resumes on the same store", () => {
      const filename = freshFile("locked")
      return Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        yield* sql`PRAGMA busy_timeout = 5`
        const { fiber, gate, guarded, held, lines, locks, outbox, processed, delivered, queue, queues, scheduler, ticks, victim } =
          yield* busyBackground

        // another connection takes the write lock and keeps it
        const other = new Sqlite(filename)
        other.prepare("BEGIN IMMEDIATE").run()
        try {
          yield* Deferred.succeed(gate, undefined)
          const writes: Record<string, Exit.Exit<unknown, unknown>> = {
            enqueue: yield* Effect.exit(queue.enqueue({ n: 3 })),
            enqueueBatch: yield* Effect.exit(queue.enqueueBatch([{ n: 3 }])),
            claim: yield* Effect.exit(queue.claim("x")),
            cancel: yield* Effect.exit(queue.cancel(victim)),
            purgeDead: yield* Effect.exit(queue.purgeDead()),
            maintenance: yield* Effect.exit(queues.maintenance),
            setLimits: yield* Effect.exit(queues.setLimits("work", { concurrency: 5 })),
            acquire: yield* Effect.exit(locks.acquire("other", { ttl: "1 second" })),
            renew: yield* Effect.exit(held.renew()),
            schedule: yield* Effect.exit(scheduler.schedule("t2", "@every 1h", "ticks", {})),
            unschedule: yield* Effect.exit(scheduler.unschedule("tick")),
            outboxEnqueue: yield* Effect.exit(outbox.enqueue({ d: 1 })),
            runOnce: yield* Effect.exit(outbox.runOnce("o2", () => Effect.void))
          }
          const outcome = Object.fromEntries(Object.entries(writes).map(([k, e]) => [k, typedFailure(e).slice(0, 200)]))
          expect(outcome).toEqual(Object.fromEntries(Object.keys(writes).map((k) => [k, "typed"])))
          // reads need no write lock (WAL)
          expect((yield* queue.stats).pending).toBe(0)
          expect(Option.isSome(yield* queue.getJob(victim))).toBe(true)
          // withLock's renewal fails: LockLost, a typed outcome
          const lost = yield* Fiber.join(guarded)
          expect(typedFailure(lost, ["LockLost"])).toBe("typed")
          yield* sleep(1_000) // the worker's ack, the leader's renewal, the standby's tries all meet the lock
          expect(fiber.unsafePoll()).toBe(null)
        } finally {
          other.prepare("ROLLBACK").run()
          other.close()
        }

        // the same store, not reopened: everything works again
        yield* worksAgain({ queue, outbox, processed, delivered, ticks, held, locks, fiber, lines })
      }).pipe(Effect.scoped, Effect.provide(engine.store({
        filename,
        busyPatience: "150 millis",
        leaderTtl: "1 second",
        leaderRenewEvery: "200 millis",
        fallbackPoll: "200 millis"
      })))
    }, 20_000)
  })
}

/**
 * A loopback proxy in front of the test server that can cut every connection
 * it carries and refuse new ones (an outage), then forward again: the store's
 * pool and LISTEN connection go through it; nobody else's do.
 */
const outageProxy = (target: URL) =>
  Effect.acquireRelease(
    Effect.async<{ port: number; down: () => void; up: () => void; close: () => void }>((resume) => {
      const open = new Set<net.Socket>()
      let refusing = false
      const server = net.createServer((client) => {
        client.on("error", () => {})
        if (refusing) return void client.destroy()
        const upstream = net.connect(Number(target.port), target.hostname)
        upstream.on("error", () => client.destroy())
        client.on("error", () => upstream.destroy())
        client.on("close", () => upstream.destroy())
        upstream.on("close", () => client.destroy())
        client.pipe(upstream)
        upstream.pipe(client)
        open.add(client)
        open.add(upstream)
        client.on("close", () => open.delete(client))
        upstream.on("close", () => open.delete(upstream))
      })
      const cut = () => {
        for (const socket of open) socket.destroy()
      }
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          port: (server.address() as net.AddressInfo).port,
          down: () => {
            refusing = true
            cut()
          },
          up: () => {
            refusing = false
          },
          close: () => {
            cut()
            server.close()
          }
        })))
    }),
    (proxy) => Effect.sync(proxy.close)
  )

describe("PostgreSQL: an outage (every connection cut, new ones refused) and its end", () => {
  it.live("operations answer SqlError during it; workers, outbox, standby and locks carry on, on the same store", () =>
    Effect.gen(function*() {
      const url = new URL(yield* Effect.promise(pgDatabaseUrl))
      const proxy = yield* outageProxy(url)
      const via = new URL(url)
      via.port = String(proxy.port)
      const schema = pgSchemaFor(freshFile("pg-outage"))
      via.searchParams.set("options", `-c search_path=${schema},public`)
      const store = PgStore.layer({
        url: Redacted.make(via.toString()),
        schema,
        types: pgTestTypes,
        leaderTtl: "1 second",
        leaderRenewEvery: "200 millis",
        fallbackPoll: "200 millis",
        listenHeartbeat: "200 millis"
      })
      yield* Effect.gen(function*() {
        const { fiber, gate, guarded, held, lines, locks, outbox, processed, delivered, queue, queues, scheduler, ticks, victim } =
          yield* busyBackground

        proxy.down()
        yield* Deferred.succeed(gate, undefined)
        const during: Record<string, Exit.Exit<unknown, unknown>> = {
          enqueue: yield* Effect.exit(queue.enqueue({ n: 3 })),
          enqueueBatch: yield* Effect.exit(queue.enqueueBatch([{ n: 3 }])),
          claim: yield* Effect.exit(queue.claim("x")),
          stats: yield* Effect.exit(queue.stats),
          getJob: yield* Effect.exit(queue.getJob(victim)),
          cancel: yield* Effect.exit(queue.cancel(victim)),
          maintenance: yield* Effect.exit(queues.maintenance),
          acquire: yield* Effect.exit(locks.acquire("other", { ttl: "1 second" })),
          renew: yield* Effect.exit(held.renew()),
          schedule: yield* Effect.exit(scheduler.schedule("t2", "@every 1h", "ticks", {})),
          outboxEnqueue: yield* Effect.exit(outbox.enqueue({ d: 1 })),
          transaction: yield* Effect.exit(Effect.flatMap(SqlClient.SqlClient, (sql) => sql.withTransaction(queue.enqueue({ n: 5 }))))
        }
        const outcome = Object.fromEntries(Object.entries(during).map(([k, e]) => [k, typedFailure(e).slice(0, 200)]))
        expect(outcome).toEqual(Object.fromEntries(Object.keys(during).map((k) => [k, "typed"])))
        expect(typedFailure(yield* Fiber.join(guarded), ["LockLost"])).toBe("typed")
        yield* sleep(1_200)
        expect(fiber.unsafePoll()).toBe(null)
        proxy.up()

        yield* worksAgain({ queue, outbox, processed, delivered, ticks, held, locks, fiber, lines })
      }).pipe(Effect.provide(store))
    }).pipe(Effect.scoped), 20_000)
})

/**
 * After the failure ended, on the same store (not reopened): job 1, whose claim returned when its lease lapsed,
 * and a new job are processed, the outbox delivers, the standby leads again and fires, the held lock renews,
 * withLock works, the background fiber is still running and has logged the storage error.
 */
const worksAgain = (s: {
  readonly queue: Queues.Queue<unknown>
  readonly outbox: Outbox.OutboxHandle
  readonly processed: Ref.Ref<ReadonlyArray<number>>
  readonly delivered: Ref.Ref<number>
  readonly ticks: Queues.Queue<unknown>
  readonly held: Locks.LockHandle
  readonly locks: Locks.LocksShape
  readonly fiber: Fiber.RuntimeFiber<unknown, unknown>
  readonly lines: Ref.Ref<ReadonlyArray<string>>
}) =>
  Effect.gen(function*() {
    yield* s.queue.enqueue({ n: 4 })
    yield* s.outbox.enqueue({ d: 2 })
    yield* until("job 1 and job 4 are processed", Effect.map(Ref.get(s.processed), (all) => all.includes(1) && all.includes(4)))
    yield* until("the outbox delivered", Effect.map(Ref.get(s.delivered), (n) => n >= 1))
    yield* until("the standby leads again and fires", Effect.map(s.ticks.stats, (t) => t.pending >= 1), 6_000)
    expect(yield* s.held.renew()).toBe(true)
    expect(yield* s.locks.withLock("guarded", "1 second", Effect.succeed("again"))).toBe("again")
    expect(s.fiber.unsafePoll()).toBe(null)
    expect((yield* Ref.get(s.lines)).some((l) => l.includes("storage error"))).toBe(true)
  })

/**
 * A worker holding job 1 (its handler waits for `gate`), an outbox dispatcher and a scheduler standby in the
 * background (logging to `lines`), a job scheduled an hour ahead (`victim`), a lock held for an hour and one
 * whose `withLock` body is running (`guarded`): the work a storage failure meets.
 */
const busyBackground = Effect.gen(function*() {
  const { lines, logger } = yield* collectingLogs
  const queues = yield* Queues.Queues
  const locks = yield* Locks.Locks
  const scheduler = yield* Scheduler.Scheduler
  const queue = yield* queues.queue("work", { visibilityTimeout: "1 second", backoffBase: "10 millis" })
  const outbox = yield* (yield* Outbox.Outbox).outbox("hooks")
  const processed = yield* Ref.make<ReadonlyArray<number>>([])
  const delivered = yield* Ref.make(0)
  const gate = yield* Deferred.make<void>()
  yield* scheduler.schedule("tick", "@every 1s", "ticks", { t: 1 })
  const ticks = yield* queues.queue("ticks")
  const fiber = yield* Effect.forkScoped(Effect.all([
    queue.process("w", (job) =>
      Effect.zipRight(
        (job.payload as { n: number }).n === 1 ? Deferred.await(gate) : Effect.void,
        Ref.update(processed, (all) => [...all, (job.payload as { n: number }).n])
      )),
    outbox.run("o", () => Ref.update(delivered, (n) => n + 1)),
    scheduler.runAsStandby
  ], { concurrency: "unbounded" }).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger))))
  yield* queue.enqueue({ n: 1 }) // its handler waits for `gate`: it ends while the storage fails
  yield* until("the worker holds job 1", Effect.map(queue.stats, (s) => s.claimed === 1))
  const victim = yield* queue.enqueue({ n: 2 }, { delay: "1 hour" })
  const held = Option.getOrThrow(yield* locks.acquire("held", { ttl: "1 hour" }))
  const inside = yield* Deferred.make<void>()
  const guarded = yield* Effect.fork(
    Effect.exit(locks.withLock("guarded", "600 millis", Effect.zipRight(Deferred.succeed(inside, undefined), Effect.never)))
  )
  yield* Deferred.await(inside)
  return { fiber, gate, guarded, held, lines, locks, outbox, processed, delivered, queue, queues, scheduler, ticks, victim }
})
