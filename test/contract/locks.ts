/**
 * The lock contract (CONTRACT §4): leases, re-entrancy, fencing tokens that
 * only grow, renew/release for the holder only, and `withLock`.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Exit, Fiber, Layer, Option, Ref, TestClock } from "effect"
import { Locks } from "../../src/index.js"
import { type EngineUnderTest, freshFile } from "./harness.js"
import { lockCount, ms, type StoreServices, advance, eventually } from "./support.js"

const acquire = (name: string, opts: Locks.AcquireOpts) => Effect.flatMap(Locks.Locks, (locks) => locks.acquire(name, opts))

const mustAcquire = (name: string, opts: Locks.AcquireOpts) =>
  Effect.map(acquire(name, opts), (handle) => {
    expect(Option.isSome(handle), `acquire ${name} for ${opts.owner}`).toBe(true)
    return Option.getOrThrow(handle)
  })

const refused = (name: string, opts: Locks.AcquireOpts) =>
  Effect.map(acquire(name, opts), (handle) => {
    expect(Option.isNone(handle), `acquire ${name} for ${opts.owner} should be refused`).toBe(true)
  })

const storedRow = (name: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ owner: string; token: number; expires_at: number }>`SELECT owner, token, expires_at FROM __alkstore_locks WHERE name = ${name}`,
      (rows) => rows[0]
    ))

/**
 * Runs `use` while the application holds the row of lock `name` in a transaction of its own: on
 * PostgreSQL a row lock (a renewal's UPDATE waits for it), on SQLite the store's one connection (a
 * renewal waits for it) — a renewal that cannot reach the database, as with a pool the application
 * exhausted or a busy writer. The transaction ends (rolled back) however `use` ends.
 */
const whileRowHeld = <A, E, R>(name: string, use: (stop: Effect.Effect<void>) => Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const holding = yield* Deferred.make<void>()
    const stop = yield* Deferred.make<void>()
    const holder = yield* Effect.fork(sql.withTransaction(Effect.gen(function*() {
      yield* sql`UPDATE __alkstore_locks SET owner = owner WHERE name = ${name}`
      yield* Deferred.succeed(holding, undefined)
      yield* Deferred.await(stop)
      return yield* Effect.fail("rolled back" as const)
    })))
    yield* Deferred.await(holding)
    const ending = Effect.zipRight(Deferred.succeed(stop, undefined), Effect.asVoid(Fiber.await(holder)))
    return yield* Effect.ensuring(use(ending), ending)
  })

export const locksContract = (engine: EngineUnderTest) =>
  describe(`locks — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    describe("acquire", () => {
      it.effect("a free lock is taken; another owner is refused until the lease lapses at expiresAt", () =>
        run(Effect.gen(function*() {
          yield* advance("1 second")
          const a = yield* mustAcquire("report", { ttl: "30 seconds", owner: "a" })
          expect(a).toMatchObject({ name: "report", owner: "a" })
          expect(ms(a.expiresAt)).toBe(31_000)
          expect(Number.isSafeInteger(a.token)).toBe(true)
          yield* refused("report", { ttl: "30 seconds", owner: "b" })
          yield* advance(29_999)
          yield* refused("report", { ttl: "30 seconds", owner: "b" })
          yield* advance(1)
          const b = yield* mustAcquire("report", { ttl: "10 seconds", owner: "b" })
          expect(b.token).toBeGreaterThan(a.token)
          expect(ms(b.expiresAt)).toBe(41_000)
          // the old holder is now the one refused
          yield* refused("report", { ttl: "30 seconds", owner: "a" })
        })))

      it.effect("re-entrant: the same owner again extends the lease and keeps the token", () =>
        run(Effect.gen(function*() {
          const first = yield* mustAcquire("r", { ttl: "30 seconds", owner: "a" })
          yield* advance("20 seconds")
          const again = yield* mustAcquire("r", { ttl: "30 seconds", owner: "a" })
          expect(again.token).toBe(first.token)
          expect(ms(again.expiresAt)).toBe(50_000)
          // past the first lease's end the lock is still held
          yield* advance("15 seconds")
          yield* refused("r", { ttl: "1 second", owner: "b" })
          // both handles are the same tenure
          expect(yield* first.renew()).toBe(true)
          expect(yield* again.release).toBe(true)
          expect(yield* first.renew()).toBe(false)
        })))

      it.effect("re-entry with a shorter ttl never moves expiresAt earlier; the handle carries the real lease end", () =>
        run(Effect.gen(function*() {
          const first = yield* mustAcquire("r", { ttl: "60 seconds", owner: "a" })
          yield* advance("1 second")
          const again = yield* mustAcquire("r", { ttl: "1 second", owner: "a" })
          expect(again.token).toBe(first.token)
          expect(ms(again.expiresAt)).toBe(60_000)
          expect((yield* storedRow("r"))!.expires_at).toBe(60_000)
          // nobody else gets in before the first lease ends
          yield* advance("1 second")
          yield* refused("r", { ttl: "1 second", owner: "b" })
          // the short handle's renewals keep the shared lease too
          expect(yield* again.renew()).toBe(true)
          expect(yield* again.renew("1 millis")).toBe(true)
          expect((yield* storedRow("r"))!.expires_at).toBe(60_000)
          yield* advance(57_999)
          yield* refused("r", { ttl: "1 second", owner: "b" })
          // a longer re-entry extends it
          const longer = yield* mustAcquire("r", { ttl: "10 seconds", owner: "a" })
          expect(ms(longer.expiresAt)).toBe(69_999)
          yield* advance(10_000)
          const b = yield* mustAcquire("r", { ttl: "1 second", owner: "b" })
          expect(b.token).toBeGreaterThan(first.token)
        })))

      it.effect("every new tenure gets a strictly greater token, the same owner after a lapse included", () =>
        run(Effect.gen(function*() {
          const tokens: Array<number> = []
          const take = (owner: string) =>
            Effect.map(mustAcquire("t", { ttl: "1 second", owner }), (handle) => {
              tokens.push(handle.token)
              return handle
            })
          yield* take("a")
          yield* advance("1 second")
          yield* take("a") // the same owner after its lease lapsed: a new tenure
          yield* advance("1 second")
          const b = yield* take("b") // another owner after a lapse
          const reentered = yield* mustAcquire("t", { ttl: "1 second", owner: "b" })
          expect(reentered.token).toBe(b.token) // re-entrant: the same tenure
          expect(yield* reentered.release).toBe(true)
          yield* take("b") // the same owner after its release: a new tenure
          yield* advance("1 second")
          const c = yield* take("c")
          expect(yield* c.release).toBe(true)
          yield* take("a") // another owner after a release
          expect(tokens).toHaveLength(6)
          for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!)
          // names are independent
          const other = yield* mustAcquire("other", { ttl: "1 second", owner: "a" })
          expect(Number.isSafeInteger(other.token)).toBe(true)
        })))

      it.effect("the default owner is unique to the store instance: re-entrant within, exclusive across", () => {
        const filename = freshFile("locks")
        const a = engine.store({ filename })
        const b = engine.store({ filename })
        return Effect.gen(function*() {
          const contextA = yield* Layer.build(a)
          const contextB = yield* Layer.build(b)
          const first = yield* Effect.provide(mustAcquire("shared", { ttl: "30 seconds" }), contextA)
          const again = yield* Effect.provide(mustAcquire("shared", { ttl: "30 seconds" }), contextA)
          expect(again.token).toBe(first.token)
          expect(again.owner).toBe(first.owner)
          yield* Effect.provide(refused("shared", { ttl: "30 seconds" }), contextB)
          expect(yield* first.release).toBe(true)
          const other = yield* Effect.provide(mustAcquire("shared", { ttl: "30 seconds" }), contextB)
          expect(other.owner).not.toBe(first.owner)
          expect(other.token).toBeGreaterThan(first.token)
        }).pipe(Effect.scoped)
      })

      it.effect("bad names, ttls and owners are typed errors and write nothing", () =>
        run(Effect.gen(function*() {
          const locks = yield* Locks.Locks
          expect(yield* Effect.flip(locks.acquire("", { ttl: "1 second" }))).toMatchObject({ _tag: "InvalidName" })
          expect(yield* Effect.flip(locks.acquire("__alkstore_scheduler", { ttl: "1 second" }))).toMatchObject({
            _tag: "ReservedName",
            name: "__alkstore_scheduler"
          })
          for (const ttl of [0, -1, "-5 seconds", "0 seconds", Number.NaN, Number.POSITIVE_INFINITY] as const) {
            expect(yield* Effect.flip(locks.acquire("l", { ttl }))).toMatchObject({ _tag: "InvalidOptions", field: "ttl" })
          }
          expect(yield* Effect.flip(locks.acquire("l", { ttl: "1 second", owner: "" }))).toMatchObject({
            _tag: "InvalidOptions",
            field: "owner"
          })
          expect(yield* lockCount).toBe(0)
          const held = yield* mustAcquire("l", { ttl: "1 second", owner: "a" })
          for (const ttl of [0, -1, "-5 seconds", Number.NaN] as const) {
            expect(yield* Effect.flip(held.renew(ttl))).toMatchObject({ _tag: "InvalidOptions", field: "ttl" })
          }
          expect(ms(held.expiresAt)).toBe((yield* storedRow("l"))!.expires_at)
        })))
    })

    describe("renew and release", () => {
      it.effect("renew extends the lease while held, by the acquiring ttl or the one given", () =>
        run(Effect.gen(function*() {
          const handle = yield* mustAcquire("r", { ttl: "10 seconds", owner: "a" })
          yield* advance("9 seconds")
          expect(yield* handle.renew()).toBe(true)
          expect((yield* storedRow("r"))!.expires_at).toBe(19_000)
          yield* advance("9 seconds")
          yield* refused("r", { ttl: "1 second", owner: "b" })
          expect(yield* handle.renew("1 minute")).toBe(true)
          expect((yield* storedRow("r"))!.expires_at).toBe(78_000)
          expect((yield* storedRow("r"))!.token).toBe(handle.token)
        })))

      it.effect("renew is false once the lease lapsed, even with nobody else holding it", () =>
        run(Effect.gen(function*() {
          const handle = yield* mustAcquire("r", { ttl: "10 seconds", owner: "a" })
          yield* advance("10 seconds")
          expect(yield* handle.renew()).toBe(false)
          expect(yield* handle.release).toBe(false)
          // and the lapse ended that tenure: taking it again is a new token
          const again = yield* mustAcquire("r", { ttl: "10 seconds", owner: "a" })
          expect(again.token).toBeGreaterThan(handle.token)
          expect(yield* handle.renew()).toBe(false)
        })))

      it.effect("after a takeover the old handle can neither renew nor release", () =>
        run(Effect.gen(function*() {
          const old = yield* mustAcquire("r", { ttl: "10 seconds", owner: "a" })
          yield* advance("10 seconds")
          const thief = yield* mustAcquire("r", { ttl: "10 seconds", owner: "b" })
          expect(yield* old.renew()).toBe(false)
          expect(yield* old.release).toBe(false)
          yield* refused("r", { ttl: "1 second", owner: "c" })
          expect(yield* thief.renew()).toBe(true)
          expect(yield* thief.release).toBe(true)
        })))

      it.effect("release is true only for the holder; the lock is free at once and the next token greater", () =>
        run(Effect.gen(function*() {
          const handle = yield* mustAcquire("r", { ttl: "1 hour", owner: "a" })
          expect(yield* handle.release).toBe(true)
          expect(yield* handle.release).toBe(false)
          expect(yield* handle.renew()).toBe(false)
          const next = yield* mustAcquire("r", { ttl: "1 hour", owner: "b" })
          expect(next.token).toBeGreaterThan(handle.token)
          expect(yield* handle.release).toBe(false)
          yield* refused("r", { ttl: "1 second", owner: "a" })
        })))
    })

    describe("withLock", () => {
      it.effect("runs the effect holding the lock and releases it on success", () =>
        run(Effect.gen(function*() {
          const locks = yield* Locks.Locks
          const result = yield* locks.withLock("job", "30 seconds", Effect.gen(function*() {
            yield* refused("job", { ttl: "1 second", owner: "other" })
            const row = yield* storedRow("job")
            expect(row!.expires_at).toBe(30_000)
            return 42
          }))
          expect(result).toBe(42)
          yield* mustAcquire("job", { ttl: "1 second", owner: "other" })
        })))

      it.effect("fails fast with LockUnavailable when another owner holds it, without running the effect", () =>
        run(Effect.gen(function*() {
          const locks = yield* Locks.Locks
          yield* mustAcquire("job", { ttl: "30 seconds", owner: "other" })
          const ran = yield* Ref.make(false)
          const error = yield* Effect.flip(locks.withLock("job", "30 seconds", Ref.set(ran, true)))
          expect(error).toMatchObject({ _tag: "LockUnavailable", name: "job" })
          expect(yield* Ref.get(ran)).toBe(false)
          expect((yield* storedRow("job"))!.owner).toBe("other")
        })))

      it.effect("each call is its own owner: a nested withLock of the same name is unavailable", () =>
        run(Effect.gen(function*() {
          const locks = yield* Locks.Locks
          const inner = yield* locks.withLock("job", "30 seconds", Effect.flip(locks.withLock("job", "30 seconds", Effect.void)))
          expect(inner).toMatchObject({ _tag: "LockUnavailable", name: "job" })
        })))

      it.effect("releases the lock when the effect fails or dies", () =>
        run(Effect.gen(function*() {
          const locks = yield* Locks.Locks
          const error = yield* Effect.flip(locks.withLock("job", "30 seconds", Effect.fail("boom" as const)))
          expect(error).toBe("boom")
          yield* mustAcquire("job", { ttl: "1 second", owner: "other" }).pipe(Effect.flatMap((h) => h.release))
          const exit = yield* Effect.exit(locks.withLock("job", "30 seconds", Effect.die("crash")))
          expect(Exit.isFailure(exit)).toBe(true)
          yield* mustAcquire("job", { ttl: "1 second", owner: "other" })
        })))

      it.effect("releases the lock when the effect is interrupted", () =>
        run(Effect.gen(function*() {
          const locks = yield* Locks.Locks
          const started = yield* Deferred.make<void>()
          const fiber = yield* Effect.fork(
            locks.withLock("job", "30 seconds", Effect.zipRight(Deferred.succeed(started, undefined), Effect.never))
          )
          yield* Deferred.await(started)
          yield* refused("job", { ttl: "1 second", owner: "other" })
          yield* Fiber.interrupt(fiber)
          yield* mustAcquire("job", { ttl: "1 second", owner: "other" })
        })))

      it.effect("renews every third of the ttl, so it outlives the ttl", () =>
        run(Effect.gen(function*() {
          const locks = yield* Locks.Locks
          const fiber = yield* Effect.fork(
            locks.withLock("long", "30 seconds", Effect.as(Effect.sleep("100 seconds"), "done"))
          )
          const expiries: Array<number> = []
          for (let step = 1; step <= 9; step++) {
            yield* advance("10 seconds")
            expiries.push((yield* storedRow("long"))!.expires_at)
            yield* refused("long", { ttl: "1 second", owner: "other" })
          }
          expect(expiries).toEqual([40, 50, 60, 70, 80, 90, 100, 110, 120].map((s) => s * 1_000))
          yield* advance("10 seconds")
          expect(yield* Fiber.join(fiber)).toBe("done")
          yield* mustAcquire("long", { ttl: "1 second", owner: "other" })
        })))

      it.effect("a failed renewal interrupts the effect and fails with LockLost", () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const locks = yield* Locks.Locks
          const started = yield* Deferred.make<void>()
          const interrupted = yield* Ref.make(false)
          const fiber = yield* Effect.fork(locks.withLock(
            "stolen",
            "30 seconds",
            Effect.zipRight(Deferred.succeed(started, undefined), Effect.never).pipe(
              Effect.onInterrupt(() => Ref.set(interrupted, true))
            )
          ))
          yield* Deferred.await(started)
          yield* advance("10 seconds")
          expect(fiber.unsafePoll()).toBeNull()
          yield* sql`UPDATE __alkstore_locks SET owner = 'thief' WHERE name = 'stolen'`
          yield* advance("10 seconds")
          const error = yield* Effect.flip(Fiber.join(fiber))
          expect(error).toMatchObject({ _tag: "LockLost", name: "stolen" })
          expect(yield* Ref.get(interrupted)).toBe(true)
          // the thief's tenure is left alone
          expect((yield* storedRow("stolen"))!.owner).toBe("thief")
        })))

      it.effect("a renewal that finds a newer tenure (a greater token) is LockLost too", () =>
        run(Effect.gen(function*() {
          const sql = yield* SqlClient.SqlClient
          const locks = yield* Locks.Locks
          const fiber = yield* Effect.fork(locks.withLock("lapsing", "30 seconds", Effect.never))
          yield* advance("1 second")
          // another tenure began meanwhile (as after a lapse): a greater token
          yield* sql`UPDATE __alkstore_locks SET owner = 'next', token = token + 1 WHERE name = 'lapsing'`
          yield* advance("10 seconds")
          expect(yield* Effect.flip(Fiber.join(fiber))).toMatchObject({ _tag: "LockLost", name: "lapsing" })
        })))

      // TestClock.adjust, not `advance`: a renewal stuck on the database keeps a statement in flight,
      // which `advance` would wait out in real time.
      it.effect("a renewal that cannot reach the database by the lease's end interrupts the effect: LockLost", () =>
        run(Effect.gen(function*() {
          const locks = yield* Locks.Locks
          const started = yield* Deferred.make<void>()
          const interruptedAt = yield* Ref.make<number | undefined>(undefined)
          const fiber = yield* Effect.fork(locks.withLock(
            "stalled",
            "30 seconds",
            Effect.zipRight(Deferred.succeed(started, undefined), Effect.as(Effect.sleep("40 seconds"), "done")).pipe(
              Effect.onInterrupt(() => Effect.flatMap(Clock.currentTimeMillis, (now) => Ref.set(interruptedAt, now)))
            )
          ).pipe(Effect.exit))
          yield* Deferred.await(started)
          yield* whileRowHeld("stalled", (stop) =>
            Effect.gen(function*() {
              // the renewal due at 10 s (and every later one) waits on the database
              yield* TestClock.adjust("25 seconds")
              expect(yield* Ref.get(interruptedAt)).toBeUndefined()
              expect(fiber.unsafePoll()).toBeNull()
              // past the lease's end (30 s) with no renewal since the acquire
              yield* TestClock.adjust("6 seconds")
              const at = yield* eventually(Effect.map(Ref.get(interruptedAt), (at) => {
                expect(at, "the guarded effect was interrupted").toBeDefined()
                return at!
              }))
              expect(at).toBeLessThanOrEqual(30_000)
              expect(at).toBeGreaterThan(20_000)
              // releasing the lock waits for the row too
              yield* stop
            }))
          const exit = yield* Fiber.join(fiber)
          expect(yield* Effect.flip(exit)).toMatchObject({ _tag: "LockLost", name: "stalled" })
          // and it failed with time still at the lease's end + 1 s
          expect(yield* Clock.currentTimeMillis).toBe(31_000)
        })))

      it.effect("an effect outlasting its lease while renewals cannot reach the database is never a Success", () =>
        run(Effect.gen(function*() {
          const locks = yield* Locks.Locks
          const started = yield* Deferred.make<void>()
          const finished = yield* Ref.make(false)
          // it cannot even be interrupted: it runs to its end, 10 s past the lease's
          const fiber = yield* Effect.fork(locks.withLock(
            "outlasted",
            "30 seconds",
            Effect.uninterruptible(Effect.zipRight(
              Deferred.succeed(started, undefined),
              Effect.as(Effect.zipRight(Effect.sleep("40 seconds"), Ref.set(finished, true)), "done")
            ))
          ).pipe(Effect.exit))
          yield* Deferred.await(started)
          yield* whileRowHeld("outlasted", (stop) =>
            Effect.gen(function*() {
              yield* TestClock.adjust("41 seconds")
              yield* eventually(Effect.map(Ref.get(finished), (done) => expect(done).toBe(true)))
              yield* stop
            }))
          const exit = yield* Fiber.join(fiber)
          expect(Exit.isSuccess(exit), "withLock succeeded after its lease lapsed").toBe(false)
          expect(yield* Effect.flip(exit)).toMatchObject({ _tag: "LockLost", name: "outlasted" })
        })))

      it.effect("bad names and ttls fail before the effect runs; no outer Scope is needed", () =>
        run(Effect.gen(function*() {
          const locks = yield* Locks.Locks
          const ran = yield* Ref.make(false)
          expect((yield* Effect.flip(locks.withLock("", "1 second", Ref.set(ran, true))))._tag).toBe("InvalidName")
          expect((yield* Effect.flip(locks.withLock("__alkstore_x", "1 second", Ref.set(ran, true))))._tag).toBe(
            "ReservedName"
          )
          for (const ttl of [0, "-5 seconds", Number.NaN] as const) {
            expect(yield* Effect.flip(locks.withLock("l", ttl, Ref.set(ran, true)))).toMatchObject({
              _tag: "InvalidOptions",
              field: "ttl"
            })
          }
          expect(yield* Ref.get(ran)).toBe(false)
          expect(yield* lockCount).toBe(0)
          // the requirement type has no Scope: this compiles only because withLock needs none
          const guarded: Effect.Effect<number, unknown, never> = locks.withLock("l", "1 second", Effect.succeed(1))
          expect(yield* guarded).toBe(1)
        })))
    })
  })
