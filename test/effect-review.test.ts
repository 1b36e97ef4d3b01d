/**
 * Effect semantics of the public API under interruption, concurrency and configuration: operations
 * interrupted at awkward points leave no partial state, many fibers on one store never deadlock (the
 * SQLite store's one connection above all), `layerConfig` fails typed, and the documented defaults hold.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import {
  Cause,
  Clock,
  Config,
  Context,
  ConfigError,
  ConfigProvider,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  Layer,
  Option,
  Redacted,
  TestClock
} from "effect"
import * as net from "node:net"
import Pg from "pg"
import * as PgClient from "@effect/sql-pg/PgClient"
import { Locks, Outbox, PgStore, Queues, Scheduler, SqliteStore } from "../src/index.js"
import {
  engines,
  type EngineUnderTest,
  freshFile,
  pgDatabaseUrl,
  pgSchemaFor,
  pgTestTypes,
  sqliteOwned
} from "./contract/harness.js"
import type { StoreServices } from "./contract/support.js"

const realClock = Clock.make()
const realSleep = (ms: number) => Effect.sleep(ms).pipe(Effect.withClock(realClock))

/** Lets forked fibers run (real time; the TestClock is untouched). */
const settle = Effect.zipRight(Effect.yieldNow(), realSleep(5))

/** Re-runs `probe` every 10 ms of real time until it holds or `ms` passed; its last answer. */
const pollUntil = <E, R>(probe: Effect.Effect<boolean, E, R>, ms = 10_000) =>
  Effect.gen(function*() {
    const deadline = realClock.unsafeCurrentTimeMillis() + ms
    let ok = yield* probe
    while (!ok && realClock.unsafeCurrentTimeMillis() < deadline) {
      yield* realSleep(10)
      ok = yield* probe
    }
    return ok
  })

/** `effect` must end within `ms` of real time, else the test fails with "hung". */
const within = <A, E, R>(ms: number, effect: Effect.Effect<A, E, R>) =>
  effect.pipe(Effect.timeoutFail({ duration: ms, onTimeout: () => "hung" as const }), Effect.withClock(realClock))

const count = (sql: SqlClient.SqlClient, text: string) =>
  Effect.map(sql.unsafe<{ n: number | string }>(text), (rows) => Number(rows[0]!.n))

// ---------------------------------------------------------------------------------------------------------
// A TCP proxy in front of the PostgreSQL server that can hold the server's answers back: a statement then
// reaches the server and commits at once, while its answer is still on the wire (a slow network).

interface DelayProxy {
  readonly port: number
  /** From now on, every byte the server sends waits this long (ms) before it is passed on. */
  readonly delay: (ms: number) => void
}

const startDelayProxy = (target: URL) =>
  Effect.acquireRelease(
    Effect.async<DelayProxy & { readonly close: () => void }>((resume) => {
      let delay = 0
      const sockets = new Set<net.Socket>()
      const server = net.createServer((client) => {
        const upstream = net.connect(Number(target.port), target.hostname)
        sockets.add(client)
        sockets.add(upstream)
        client.on("data", (chunk) => upstream.write(chunk))
        let chain = Promise.resolve()
        upstream.on("data", (chunk) => {
          const due = performance.now() + delay
          chain = chain.then(() =>
            new Promise<void>((done) =>
              setTimeout(() => {
                if (!client.destroyed) client.write(chunk)
                done()
              }, Math.max(0, due - performance.now())))
          )
        })
        const end = () => {
          client.destroy()
          upstream.destroy()
        }
        client.on("error", end)
        upstream.on("error", end)
        client.on("close", () => void chain.then(end))
        upstream.on("close", () => void chain.then(end))
      })
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          port: (server.address() as net.AddressInfo).port,
          delay: (ms: number) => {
            delay = ms
          },
          close: () => {
            for (const socket of sockets) socket.destroy()
            server.close()
          }
        })))
    }),
    (proxy) => Effect.sync(() => proxy.close())
  )

/** A PgStore whose pool goes through a delay proxy (its LISTEN connection does not), and a direct client for checks. */
const pgThroughDelayProxy = (label: string) =>
  Effect.gen(function*() {
    const database = new URL(yield* Effect.promise(pgDatabaseUrl))
    const schema = pgSchemaFor(freshFile(label))
    const proxy = yield* startDelayProxy(database)
    const viaProxy = new URL(database)
    viaProxy.port = String(proxy.port)
    const context = yield* Layer.build(PgStore.layer({
      url: Redacted.make(viaProxy.toString()),
      listenUrl: database.toString(),
      schema,
      clock: "host",
      fallbackPoll: "1 hour",
      types: pgTestTypes
    }))
    const direct = new Pg.Client({ connectionString: database.toString(), types: pgTestTypes })
    yield* Effect.acquireRelease(Effect.promise(() => direct.connect()), () => Effect.promise(() => direct.end()))
    const query = <A extends Record<string, unknown>>(text: string, params: Array<unknown> = []) =>
      Effect.promise(() => direct.query<A>(text.replaceAll("__alkstore_", `${schema}.__alkstore_`), params)).pipe(
        Effect.map((result) => result.rows)
      )
    return { proxy, context, query, schema }
  })

// ---------------------------------------------------------------------------------------------------------

describe("an interrupted claim keeps no claim — postgresql (PgStore.layer), its answer on a slow network", () => {
  const cases: ReadonlyArray<readonly [string, (q: Queues.Queue<unknown>) => Effect.Effect<unknown, unknown>]> = [
    ["claim", (q) => q.claim("w")],
    ["claimBatch", (q) => q.claimBatch("w", 3)]
  ]
  for (const [label, claim] of cases) {
    it.scoped(`${label} interrupted after its statement committed, before its answer arrived: the jobs are claimable again, no attempt spent`, () =>
      Effect.gen(function*() {
        const { context, proxy, query } = yield* pgThroughDelayProxy(`claim-${label}`)
        const queue = yield* Effect.provide(
          Effect.flatMap(Queues.Queues, (qs) => qs.queue("interrupted-claim", { maxAttempts: 1, visibilityTimeout: "10 seconds" })),
          context
        )
        yield* Effect.provide(queue.enqueueBatch([{ n: 1 }, { n: 2 }]), context)
        proxy.delay(600)
        const claiming = yield* Effect.fork(Effect.provide(claim(queue as Queues.Queue<unknown>), context))
        // the statement reaches the server at once and commits; its answer waits in the proxy (polled, not slept
        // for: a loaded machine may take longer to send it, and the answer is due 600 ms after it committed)
        const claimedCount = Effect.map(
          query<{ n: number }>("SELECT count(*)::int AS n FROM __alkstore_jobs WHERE state = 'claimed'"),
          (rows) => rows[0]!.n
        )
        yield* pollUntil(Effect.map(claimedCount, (n) => n > 0))
        expect(yield* claimedCount).toBeGreaterThan(0)
        const stopping = yield* Effect.fork(Fiber.interrupt(claiming))
        proxy.delay(0)
        const exit = yield* within(10_000, Fiber.join(stopping))
        expect(Exit.isInterrupted(exit)).toBe(true)
        // The caller never got a handle: nothing may stay claimed for it (as `take` promises, docs/decisions.md).
        // Its answer still on the wire past the caller's short wait (stoppableClaim.ts), the claim is given back
        // as soon as it arrives, in the background.
        let rows = yield* query<{ state: string; attempts: number }>("SELECT state, attempts FROM __alkstore_jobs ORDER BY id")
        for (let i = 0; i < 100 && rows.some((row) => row.state === "claimed"); i++) {
          yield* realSleep(20)
          rows = yield* query<{ state: string; attempts: number }>("SELECT state, attempts FROM __alkstore_jobs ORDER BY id")
        }
        // Once the stranded lease lapses, a job of one attempt is buried unrun by the next claim.
        yield* TestClock.adjust("10 seconds")
        const handedOut = (yield* Effect.provide(queue.claimBatch("w2", 5), context)).length
        const dead = yield* query<{ last_error: string }>("SELECT last_error FROM __alkstore_jobs WHERE state = 'dead'")
        expect({ rows, handedOut, dead }).toEqual({
          rows: [{ state: "pending", attempts: 0 }, { state: "pending", attempts: 0 }],
          handedOut: 2,
          dead: []
        })
      }), { timeout: 20_000 })
  }
})

describe("an interrupted lock acquire — postgresql (PgStore.layer), its answer on a slow network", () => {
  // An acquire's statement stays interruptible (it may wait on a row another transaction holds, and a stop must
  // not wait for that transaction): one interrupted after its commit leaves the lock to its owner until the ttl,
  // and the owner acquiring again re-enters it and gets a handle to release it with (docs/queues-and-locks.md).
  it.scoped("Locks.acquire interrupted after its statement committed, before its answer arrived: the owner acquiring again gets the lock back", () =>
    Effect.gen(function*() {
      const { context, proxy, query } = yield* pgThroughDelayProxy("acquire-interrupted")
      const locks = Context.get(context, Locks.Locks)
      proxy.delay(600)
      const acquiring = yield* Effect.fork(Effect.provide(locks.acquire("interrupted-acquire", { ttl: "1 hour" }), context))
      // polled, not slept for: the statement commits as soon as it reaches the server (its answer is held back)
      const heldMeanwhile = Effect.map(query<{ n: number }>(
        "SELECT count(*)::int AS n FROM __alkstore_locks WHERE name = 'interrupted-acquire' AND expires_at > 0"
      ), (rows) => rows[0]!.n)
      yield* pollUntil(Effect.map(heldMeanwhile, (n) => n === 1))
      expect(yield* heldMeanwhile).toBe(1)
      const stopping = yield* Effect.fork(Fiber.interrupt(acquiring))
      proxy.delay(0)
      expect(Exit.isInterrupted(yield* within(10_000, Fiber.join(stopping)))).toBe(true)
      // another owner meets the lock held; the same owner re-enters it and releases it
      const other = yield* Effect.exit(Effect.provide(locks.withLock("interrupted-acquire", "1 minute", Effect.succeed("ran")), context))
      expect(Exit.isFailure(other) && Cause.failureOption(other.cause).pipe(Option.map((e) => e._tag), Option.getOrUndefined))
        .toBe("LockUnavailable")
      const again = yield* Effect.provide(locks.acquire("interrupted-acquire", { ttl: "1 second" }), context)
      expect(yield* Option.getOrThrow(again).release).toBe(true)
      const exit = yield* Effect.exit(Effect.provide(locks.withLock("interrupted-acquire", "1 minute", Effect.succeed("ran")), context))
      expect(exit).toEqual(Exit.succeed("ran"))
    }), { timeout: 20_000 })

  it.scoped("withLock interrupted while its acquire's answer is on the wire: the lock it took is released", () =>
    Effect.gen(function*() {
      const { context, proxy, query } = yield* pgThroughDelayProxy("withlock-interrupted")
      const locks = Context.get(context, Locks.Locks)
      proxy.delay(600)
      const running = yield* Effect.fork(Effect.provide(locks.withLock("interrupted-with-lock", "1 hour", Effect.never), context))
      // polled, not slept for: the statement commits as soon as it reaches the server (its answer is held back)
      const heldMeanwhile = Effect.map(query<{ n: number }>(
        "SELECT count(*)::int AS n FROM __alkstore_locks WHERE name = 'interrupted-with-lock' AND expires_at > 0"
      ), (rows) => rows[0]!.n)
      yield* pollUntil(Effect.map(heldMeanwhile, (n) => n === 1))
      expect(yield* heldMeanwhile).toBe(1)
      const stopping = yield* Effect.fork(Fiber.interrupt(running))
      proxy.delay(0)
      expect(Exit.isInterrupted(yield* within(10_000, Fiber.join(stopping)))).toBe(true)
      const held = yield* query<{ n: number }>(
        "SELECT count(*)::int AS n FROM __alkstore_locks WHERE name = 'interrupted-with-lock' AND expires_at > 0"
      )
      expect(held[0]!.n).toBe(0)
    }), { timeout: 20_000 })

  it.scoped("Outbox.runOnce and take interrupted while their claim's answer is on the wire keep no claim", () =>
    Effect.gen(function*() {
      const { context, proxy, query } = yield* pgThroughDelayProxy("runonce-interrupted")
      const outbox = yield* Effect.provide(Effect.flatMap(Outbox.Outbox, (o) => o.outbox("interrupted")), context)
      const queue = yield* Effect.provide(Effect.flatMap(Queues.Queues, (qs) => qs.queue("interrupted-take")), context)
      yield* Effect.provide(Effect.zip(outbox.enqueue({ n: 1 }), queue.enqueue({ n: 2 })), context)
      let delivered = 0
      proxy.delay(600)
      const fibers: ReadonlyArray<Fiber.RuntimeFiber<unknown, unknown>> = yield* Effect.all([
        Effect.fork(Effect.provide(outbox.runOnce("d", () => Effect.sync(() => void delivered++)), context)),
        Effect.fork(Effect.provide(queue.take("t"), context))
      ])
      yield* realSleep(200)
      const stopping = yield* Effect.fork(Effect.forEach(fibers, (fiber) => Fiber.interrupt(fiber)))
      proxy.delay(0)
      const took = (yield* within(10_000, Fiber.join(stopping)))[1]!
      // A take that had already returned when the interruption came handed its claim to its caller (a fiber
      // interrupted after it ended is not undone), whose to settle: this caller gives it back.
      if (Exit.isSuccess(took)) yield* Effect.provide((took.value as Queues.JobHandle<unknown>).release, context)
      // an answer still on the wire past the caller's short wait is given back in the background when it arrives
      // (stoppableClaim.ts): polled for, with a deadline, as in the claim cases above
      const claimedRows = query<{ state: string; attempts: number }>(
        "SELECT state, attempts FROM __alkstore_jobs WHERE state = 'claimed'"
      )
      yield* pollUntil(Effect.map(claimedRows, (rows) => rows.length === 0))
      const rows = yield* claimedRows
      // delivered, acked: gone; or not delivered and released: pending again
      expect(rows).toEqual([])
      expect(delivered).toBeLessThanOrEqual(1)
    }), { timeout: 20_000 })
})

// ---------------------------------------------------------------------------------------------------------

for (const engine of engines) {
  describe(`interruption and concurrency on one store — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) =>
      Effect.provide(effect, engine.store({ fallbackPoll: "1 hour" }))

    it.effect("withLock's effect interrupted after renewals (TestClock): the lock is free at once for another owner", () =>
      run(Effect.gen(function*() {
        const locks = yield* Locks.Locks
        const started = yield* Deferred.make<void>()
        const body = yield* Effect.fork(locks.withLock("interrupted-body", "3 seconds", Effect.zipRight(Deferred.succeed(started, undefined), Effect.never)))
        yield* Deferred.await(started)
        // several renewals in; the lease is well past its first ttl
        for (let i = 0; i < 5; i++) {
          yield* TestClock.adjust("1 second")
          yield* settle
        }
        expect(Option.isNone(yield* locks.acquire("interrupted-body", { ttl: "1 minute", owner: "other" }))).toBe(true)
        yield* Fiber.interrupt(body)
        const other = yield* locks.acquire("interrupted-body", { ttl: "1 minute", owner: "other" })
        expect(Option.isSome(other)).toBe(true)
      })))

    it.effect("claim and claimBatch interrupted while an application transaction holds the connection (SQLite) or the rows (PostgreSQL): nothing is claimed", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queue = yield* Effect.flatMap(Queues.Queues, (qs) => qs.queue("waiting-claim"))
        yield* queue.enqueueBatch([{ n: 1 }, { n: 2 }, { n: 3 }])
        const release = yield* Deferred.make<void>()
        const inside = yield* Deferred.make<void>()
        // holds the store's connection (SQLite) or locks the rows (PostgreSQL: FOR UPDATE in the app's transaction)
        const holder = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
          yield* sql.unsafe(
            engine.capabilities.postgres
              ? "SELECT id FROM __alkstore_jobs FOR UPDATE"
              : "UPDATE __alkstore_jobs SET priority = priority"
          )
          yield* Deferred.succeed(inside, undefined)
          yield* Deferred.await(release)
        })))
        yield* Deferred.await(inside)
        const claims = yield* Effect.fork(Effect.all([queue.claim("a"), queue.claimBatch("b", 2)], { concurrency: "unbounded" }))
        yield* realSleep(50)
        yield* Fiber.interrupt(claims)
        yield* Deferred.succeed(release, undefined)
        yield* Fiber.join(holder)
        const stats = yield* queue.stats
        expect({ pending: stats.pending, claimed: stats.claimed }).toEqual({ pending: 3, claimed: 0 })
      })))

    it.effect("many fibers at once, one holding an application transaction, handlers that enqueue, ack and lock inside and outside transactions: nothing deadlocks, every job runs once", () =>
      run(Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const queues = yield* Queues.Queues
        const locks = yield* Locks.Locks
        const scheduler = yield* Scheduler.Scheduler
        const outbox = yield* (yield* Outbox.Outbox).outbox("cc-out")
        const work = yield* queues.queue("cc-work")
        const follow = yield* queues.queue("cc-follow")
        const side = yield* queues.queue("cc-side")
        const seen = new Map<number, number>()
        const followed = new Map<number, number>()
        const bump = (map: Map<number, number>, n: number) => map.set(n, (map.get(n) ?? 0) + 1)
        const handler = (job: Queues.Job<unknown>, handle: Queues.JobHandle<unknown>) => {
          const n = (job.payload as { n: number }).n
          const body = Effect.gen(function*() {
            bump(seen, n)
            yield* follow.enqueue({ n })
            const lock = yield* locks.acquire(`cc-lock-${n}`, { ttl: "1 minute" })
            if (Option.isSome(lock)) yield* lock.value.release
            yield* locks.withLock(`cc-with-${n}`, "1 minute", work.stats)
            if (n % 2 === 0) yield* handle.ack
          })
          return n % 3 === 0 ? body : sql.withTransaction(body)
        }
        const workers = yield* Effect.all([
          Effect.fork(work.process("w", handler, { concurrency: 4, heartbeat: true })),
          Effect.fork(follow.process("f", (job) => Effect.sync(() => bump(followed, (job.payload as { n: number }).n)), { concurrency: 2 })),
          Effect.fork(outbox.run("o", () => Effect.void))
        ])
        // an application transaction holding on across the burst
        const holding = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
          yield* work.enqueue({ n: 1000 })
          yield* realSleep(30)
          yield* work.enqueue({ n: 1001 })
        })))
        const total = 60
        yield* within(15_000, Effect.all(Array.from({ length: total }, (_, i) =>
          Effect.gen(function*() {
            switch (i % 6) {
              case 0:
                return yield* work.enqueue({ n: i })
              case 1:
                return yield* sql.withTransaction(work.enqueue({ n: i }))
              case 2:
                yield* locks.withLock(`cc-many-${i}`, "1 minute", work.stats)
                return yield* work.enqueue({ n: i })
              case 3:
                yield* scheduler.schedule(`cc-s-${i}`, "@every 1h", "cc-sched", { i })
                return yield* work.enqueue({ n: i })
              case 4:
                yield* outbox.enqueue({ i })
                return yield* sql.withTransaction(work.enqueueBatch([{ n: i }]))
              default: {
                yield* side.enqueue({ i })
                const handles = yield* side.claimBatch(`side-${i}`, 1)
                yield* side.ackAll(handles)
                return yield* work.enqueue({ n: i })
              }
            }
          })), { concurrency: "unbounded", discard: true }))
        yield* Fiber.join(holding)
        const expected = [...Array.from({ length: total }, (_, i) => i), 1000, 1001]
        const handled = () =>
          expected.every((n) => seen.get(n) === 1 && followed.get(n) === 1)
        // a handler's bump runs before the worker's ack commits: wait for the acks too, or the
        // interruption below can catch the last ack in flight and leave its job claimed
        const live = () => count(sql, "SELECT count(*) AS n FROM __alkstore_jobs WHERE state <> 'dead'")
        const deadline = realClock.unsafeCurrentTimeMillis() + 15_000
        while (realClock.unsafeCurrentTimeMillis() < deadline && !(handled() && (yield* live()) === 0)) {
          yield* realSleep(10)
        }
        yield* Effect.forEach(workers, Fiber.interrupt, { discard: true })
        const twice = [...seen, ...followed].filter(([, k]) => k !== 1)
        const missing = expected.filter((n) => !seen.has(n) || !followed.has(n))
        expect({ missing, twice }).toEqual({ missing: [], twice: [] })
        expect(yield* live()).toBe(0)
      })), { timeout: 40_000 })
  })
}


// ---------------------------------------------------------------------------------------------------------

/** A PostgreSQL store on a pool of `max` connections (its LISTEN connection is its own). */
const pgStoreWithPool = (variant: "owned" | "fromClient", max: number) =>
  Layer.unwrapEffect(Effect.map(Effect.promise(pgDatabaseUrl), (database) => {
    const schema = pgSchemaFor(freshFile(`pool-${variant}`))
    const url = new URL(database)
    url.searchParams.set("options", `-c search_path=${schema},public`)
    const settings = { schema, clock: "host" as const, fallbackPoll: "1 hour" as const }
    return variant === "owned"
      ? PgStore.layer({ url: Redacted.make(url.toString()), types: pgTestTypes, maxConnections: max, ...settings })
      : PgStore.layerFromClient(settings).pipe(
        Layer.provideMerge(PgClient.layer({ url: Redacted.make(url.toString()), types: pgTestTypes, maxConnections: max }))
      )
  }))

for (const variant of ["owned", "fromClient"] as const) {
  describe(`operations interrupted while their transaction waits for a pool connection — postgresql (PgStore.${variant === "owned" ? "layer" : "layerFromClient"}), a pool of 3`, () => {
    it.effect("leak no connection: the store still works once the connections are free again", () =>
      Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const queue = yield* queues.queue("pool-leak")
        const id = yield* queue.enqueue({ n: 1 })
        const operations: ReadonlyArray<Effect.Effect<unknown, unknown>> = [
          queue.requeueDead(id),
          queues.setLimits("pool-leak-limited", { concurrency: 2 }),
          queues.clearLimits("pool-leak-limited")
        ]
        // the application's transactions hold every connection for a moment
        const sql = yield* SqlClient.SqlClient
        const release = yield* Deferred.make<void>()
        const holders = yield* Effect.forEach([1, 2, 3], () =>
          Effect.fork(sql.withTransaction(Effect.zipRight(sql`SELECT 1`, Deferred.await(release)))))
        yield* realSleep(100)
        // operations stopped while their transactions wait for a connection (a timeout, a shutdown)
        const stopped = yield* Effect.forEach(operations, (operation) => Effect.fork(operation))
        yield* realSleep(50)
        yield* Effect.forEach(stopped, Fiber.interrupt, { discard: true })
        yield* Deferred.succeed(release, undefined)
        yield* Effect.forEach(holders, Fiber.join, { discard: true })
        yield* realSleep(100)
        // every connection of the pool is there again: three transactions can be open at once
        let inside = 0
        const all = yield* Deferred.make<void>()
        const barrier = sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT 1`
          if (++inside === 3) yield* Deferred.succeed(all, undefined)
          yield* Deferred.await(all)
        }))
        const after = yield* Effect.exit(within(5_000, Effect.all([barrier, barrier, barrier], { concurrency: "unbounded" })))
        expect(Exit.isSuccess(after)).toBe(true)
        expect(yield* within(5_000, queue.requeueDead(id))).toBe(false)
      }).pipe(Effect.provide(pgStoreWithPool(variant, 3))), { timeout: 15_000 })
  })
}

// ---------------------------------------------------------------------------------------------------------

/** How building `layer` under `env` ended: "ok", "die: …", "config", or the failure's tag and field. */
const buildOutcome = (layer: Layer.Layer<any, any, never>, env: Record<string, string>) =>
  Effect.map(
    Effect.exit(Effect.scoped(Layer.build(Layer.provide(layer, Layer.setConfigProvider(ConfigProvider.fromJson(env)))))),
    (exit): string => {
      if (Exit.isSuccess(exit)) return "ok"
      if (Cause.isDie(exit.cause)) return `die: ${Cause.pretty(exit.cause).slice(0, 200)}`
      const failure = Option.getOrUndefined(Cause.failureOption(exit.cause)) as Record<string, unknown> | undefined
      if (failure !== undefined && ConfigError.isConfigError(failure)) return "config"
      return `${String(failure?._tag)}${failure?.field === undefined ? "" : `:${String(failure.field)}`}`
    }
  )

/** The scheduler lease's length a fresh leader takes, in ms (the documented default is 10 s). */
const leaseLength = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const scheduler = yield* Scheduler.Scheduler
  const leader = yield* Effect.fork(scheduler.runSchedules)
  // the leader's first acquire is a round trip on PostgreSQL: polled for (real time), not settled
  const lease = sql.unsafe<{ expires_at: number | string }>(
    "SELECT expires_at FROM __alkstore_locks WHERE name = '__alkstore_scheduler'"
  )
  yield* pollUntil(Effect.map(lease, (rows) => rows.length > 0))
  const now = yield* Clock.currentTimeMillis
  const rows = yield* lease
  yield* Fiber.interrupt(leader)
  return Number(rows[0]!.expires_at) - now
})

describe("SqliteStore.layerConfig", () => {
  it.effect("missing, malformed and out-of-range values fail typed (ConfigError or InvalidOptions), never as defects", () =>
    Effect.gen(function*() {
      const file = freshFile("config")
      const layer = SqliteStore.layerConfig({
        filename: Config.string("ALK_FILE"),
        busyPatience: Config.string("ALK_PATIENCE").pipe(Config.withDefault("30 seconds")) as Config.Config<Duration.DurationInput>,
        leaderTtl: Config.string("ALK_TTL").pipe(Config.withDefault("10 seconds")) as Config.Config<Duration.DurationInput>,
        fallbackPoll: Config.duration("ALK_POLL").pipe(Config.withDefault(Duration.seconds(5)))
      })
      const outcomes = {
        missing: yield* buildOutcome(layer, {}),
        malformedDuration: yield* buildOutcome(layer, { ALK_FILE: file, ALK_POLL: "ten" }),
        unreadablePatience: yield* buildOutcome(layer, { ALK_FILE: file, ALK_PATIENCE: "soon" }),
        negativePatience: yield* buildOutcome(layer, { ALK_FILE: file, ALK_PATIENCE: "-5 seconds" }),
        ttlTooLong: yield* buildOutcome(layer, { ALK_FILE: file, ALK_TTL: "30 days" }),
        fine: yield* buildOutcome(layer, { ALK_FILE: file })
      }
      expect(outcomes).toEqual({
        missing: "config",
        malformedDuration: "config",
        unreadablePatience: "InvalidOptions:busyPatience",
        negativePatience: "InvalidOptions:busyPatience",
        ttlTooLong: "InvalidOptions:leaderTtl",
        fine: "ok"
      })
    }))

  it.effect("with only a filename the documented defaults hold: a 10 s leader lease, jobs stamped 300 s / 3 / 5 s", () =>
    Effect.gen(function*() {
      expect(yield* leaseLength).toBe(10_000)
      const queue = yield* Effect.flatMap(Queues.Queues, (qs) => qs.queue("config-defaults"))
      const job = Option.getOrThrow(yield* queue.getJob(yield* queue.enqueue({})))
      expect([Duration.toMillis(job.visibilityTimeout), job.maxAttempts, Duration.toMillis(job.backoffBase)]).toEqual([300_000, 3, 5_000])
    }).pipe(Effect.provide(
      SqliteStore.layerConfig({ filename: Config.string("ALK_FILE") }).pipe(
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromJson({ ALK_FILE: freshFile("config-defaults") })))
      )
    )))
})

describe("PgStore.layerConfig", () => {
  it.effect("missing, malformed and out-of-range values fail typed (ConfigError or InvalidOptions), never as defects", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      const schema = pgSchemaFor(freshFile("pg-config"))
      const layer = PgStore.layerConfig({
        url: Config.redacted("ALK_PG_URL"),
        schema: Config.string("ALK_SCHEMA"),
        clock: Config.string("ALK_CLOCK").pipe(Config.withDefault("host")) as Config.Config<"host">,
        prepare: Config.boolean("ALK_PREPARE").pipe(Config.withDefault(true)),
        leaderTtl: Config.string("ALK_TTL").pipe(Config.withDefault("10 seconds")) as Config.Config<Duration.DurationInput>
      })
      const env = { ALK_PG_URL: url, ALK_SCHEMA: schema }
      const outcomes = {
        missing: yield* buildOutcome(layer, { ALK_SCHEMA: schema }),
        badBoolean: yield* buildOutcome(layer, { ...env, ALK_PREPARE: "maybe" }),
        badSchema: yield* buildOutcome(layer, { ...env, ALK_SCHEMA: "Bad-Schema" }),
        badClock: yield* buildOutcome(layer, { ...env, ALK_CLOCK: "sundial" }),
        ttlTooLong: yield* buildOutcome(layer, { ...env, ALK_TTL: "30 days" }),
        fine: yield* buildOutcome(layer, env)
      }
      expect(outcomes).toEqual({
        missing: "config",
        badBoolean: "config",
        badSchema: "InvalidOptions:schema",
        badClock: "InvalidOptions:clock",
        ttlTooLong: "InvalidOptions:leaderTtl",
        fine: "ok"
      })
    }), { timeout: 30_000 })

  it.effect("with a url, a schema and the host clock the documented defaults hold: a 10 s leader lease, jobs stamped 300 s / 3 / 5 s", () =>
    Effect.gen(function*() {
      expect(yield* leaseLength).toBe(10_000)
      const queue = yield* Effect.flatMap(Queues.Queues, (qs) => qs.queue("config-defaults"))
      const job = Option.getOrThrow(yield* queue.getJob(yield* queue.enqueue({})))
      expect([Duration.toMillis(job.visibilityTimeout), job.maxAttempts, Duration.toMillis(job.backoffBase)]).toEqual([300_000, 3, 5_000])
    }).pipe(Effect.provide(Layer.unwrapEffect(Effect.map(Effect.promise(pgDatabaseUrl), (database) => {
      const schema = pgSchemaFor(freshFile("pg-config-defaults"))
      const url = new URL(database)
      url.searchParams.set("options", `-c search_path=${schema},public`)
      return PgStore.layerConfig({
        url: Config.redacted("ALK_PG_URL"),
        schema: Config.string("ALK_SCHEMA"),
        clock: Config.succeed("host" as const)
      }).pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromJson({ ALK_PG_URL: url.toString(), ALK_SCHEMA: schema }))))
    })))), { timeout: 30_000 })
})
