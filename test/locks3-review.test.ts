/**
 * Review of named TTL locks after the `givingBack` change (CONTRACT §4, docs/queues-and-locks.md § Locks,
 * docs/decisions.md "Stopping on a busy SQLite file"). Every test here passed at b4b0e57 and failed at 2e26b71, before its fix:
 * `withLock`'s release (`letGo`) ran as `givingBack`, a race of two fibers forked as children of the
 * releasing fiber, capped at 3 s of real time even when the body simply ended, and interrupted (both racers at
 * once) by any further interrupt signal the releasing fiber received while it was in its finalizer.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Exit, Fiber, Layer, Option, Scope } from "effect"
import { Locks } from "../src/index.js"
import { type EngineUnderTest, freshFile, pgOwned, sqliteOwned } from "./contract/harness.js"

const realClock = Clock.make()
const realSleep = (ms: number) => Effect.sleep(ms).pipe(Effect.withClock(realClock))

const open = <ROut, E>(layer: Layer.Layer<ROut, E>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const context = yield* Layer.buildWithScope(layer, scope)
    return { context, close: Scope.close(scope, Exit.void) }
  })

const storeOf = (engine: EngineUnderTest, filename: string) =>
  engine.capabilities.postgres ? pgOwned.store({ filename, maxConnections: 2 } as never) : engine.store({ filename })

/**
 * `n` application transactions holding every connection of the store (`run` provides it) for `millis` of real
 * time: their fibers, once all of them hold theirs.
 */
const holdConnections = (
  run: <A, E>(effect: Effect.Effect<A, E, SqlClient.SqlClient>) => Effect.Effect<A, E>,
  n: number,
  millis: number
) =>
  Effect.gen(function*() {
    const holding = yield* Deferred.make<void>()
    let held = 0
    const holders = yield* Effect.forEach(Array.from({ length: n }), () =>
      Effect.fork(run(Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql.withTransaction(Effect.gen(function*() {
          yield* sql`SELECT 1`
          if (++held === n) yield* Deferred.succeed(holding, undefined)
          yield* realSleep(millis)
        }))))))
    yield* Deferred.await(holding)
    return holders
  })

describe("locks3 review: withLock's release after a normal end", () => {
  for (const engine of [sqliteOwned, pgOwned]) {
    // CONTRACT §4: withLock "releases when the effect ends — success, failure or interruption"; Locks.ts:
    // "releases the lock however the effect ends". patience.ts/decisions.md scope the 3 s cap to "a give-back
    // made while stopping" and say the write is then "left to end in the background". Here the body *succeeded*;
    // the application's own transactions held the store's connection(s) for 4 s; the release was given up after
    // 3 s and its write interrupted (not left to end): the lock stays held for its whole 1-hour TTL.
    it.live(`a withLock whose body succeeded while the application held the store's connections for 4 s releases its lock — ${engine.name}`, () => {
      const filename = freshFile("busy-conn")
      return Effect.gen(function*() {
        const store = yield* open(storeOf(engine, filename))
        const run = <A, E>(effect: Effect.Effect<A, E, Locks.Locks | SqlClient.SqlClient>) =>
          Effect.provide(effect, store.context as never) as Effect.Effect<A, E>
        const inside = yield* Deferred.make<void>()
        const finish = yield* Deferred.make<void>()
        const locked = yield* Effect.fork(run(Effect.flatMap(Locks.Locks, (locks) =>
          locks.withLock("report", "1 hour", Effect.zipRight(Deferred.succeed(inside, undefined), Deferred.await(finish))))))
        yield* Deferred.await(inside)
        // the application's transactions hold every connection of the store for 4 s
        const holders = yield* holdConnections(run, engine.capabilities.postgres ? 2 : 1, 4_000)
        yield* Deferred.succeed(finish, undefined)
        const exit = yield* Fiber.await(locked)
        yield* Effect.forEach(holders, Fiber.join, { discard: true })
        yield* realSleep(200)
        const other = yield* run(Effect.flatMap(Locks.Locks, (locks) => locks.acquire("report", { ttl: "1 second", owner: "other" })))
        yield* store.close
        expect(Exit.isSuccess(exit)).toBe(true)
        expect(Option.isSome(other), "the lock withLock released is free for another owner").toBe(true)
      })
    }, 30_000)
  }
})

describe("locks3 review: nested", () => {
  for (const engine of [pgOwned]) {
    // CONTRACT §4: withLock "releases when the effect ends — success, failure or interruption"; decisions.md "A
    // store closing under its own work": the store "waits until they gave back ... their locks". A withLock
    // nested in another one's body, stopped (interrupted, or by the store's close) on PostgreSQL: the inner
    // lock stays held for its TTL (the inner fiber gets a second interrupt signal while in its release, which
    // Effect forwards to its children: both racers of givingBack).
    for (const how of ["close", "interrupt"] as const) {
      it.live(`nested withLock stopped by ${how}: both locks free — ${engine.name}`, () => {
        const filename = freshFile("nested")
        return Effect.gen(function*() {
          const store = yield* open(engine.store({ filename }))
          const run = <A, E>(effect: Effect.Effect<A, E, Locks.Locks | SqlClient.SqlClient>, ctx = store.context) =>
            Effect.provide(effect, ctx as never) as Effect.Effect<A, E>
          const innerIn = yield* Deferred.make<void>()
          const fiber = yield* Effect.fork(run(Effect.flatMap(Locks.Locks, (locks) =>
            locks.withLock("outer", "1 hour", locks.withLock("inner", "1 hour", Effect.zipRight(Deferred.succeed(innerIn, undefined), Effect.never))))))
          yield* Deferred.await(innerIn)
          if (how === "close") yield* store.close
          else yield* Fiber.interrupt(fiber)
          yield* Fiber.await(fiber)
          const again = how === "close" ? yield* open(engine.store({ filename })) : store
          const inner = yield* run(Effect.flatMap(Locks.Locks, (l) => l.acquire("inner", { ttl: "1 second", owner: "b" })), again.context)
          const outer = yield* run(Effect.flatMap(Locks.Locks, (l) => l.acquire("outer", { ttl: "1 second", owner: "b" })), again.context)
          yield* again.close
          expect(Option.isSome(outer), "the outer withLock's lock is free").toBe(true)
          expect(Option.isSome(inner), "the inner withLock's lock is free").toBe(true)
        })
      }, 30_000)
    }
  }
})

describe("locks3 review: double interrupt", () => {
  for (const engine of [sqliteOwned, pgOwned]) {
    // CONTRACT §4: withLock "releases when the effect ends — ... interruption". A second interruption of a
    // withLock already stopping (a timeout plus a shutdown, a caller and the store's close) must not cancel
    // its release: the release would succeed after 600 ms, well inside both caps, yet it is abandoned.
    it.live(`a withLock interrupted twice while its release waits 600 ms for a connection releases its lock — ${engine.name}`, () => {
      const filename = freshFile("twice")
      return Effect.gen(function*() {
        const store = yield* open(storeOf(engine, filename))
        const run = <A, E>(effect: Effect.Effect<A, E, Locks.Locks | SqlClient.SqlClient>) =>
          Effect.provide(effect, store.context as never) as Effect.Effect<A, E>
        const inside = yield* Deferred.make<void>()
        const locked = yield* Effect.fork(run(Effect.flatMap(Locks.Locks, (locks) =>
          locks.withLock("report", "1 hour", Effect.zipRight(Deferred.succeed(inside, undefined), Effect.never)))))
        yield* Deferred.await(inside)
        const holders = yield* holdConnections(run, engine.capabilities.postgres ? 2 : 1, 600)
        yield* Fiber.interruptFork(locked)
        yield* realSleep(100)
        yield* Fiber.interruptFork(locked)
        yield* Fiber.await(locked)
        yield* Effect.forEach(holders, Fiber.join, { discard: true })
        yield* realSleep(200)
        const other = yield* run(Effect.flatMap(Locks.Locks, (locks) => locks.acquire("report", { ttl: "1 second", owner: "other" })))
        yield* store.close
        expect(Option.isSome(other), "the lock is free once the stopped withLock's release could run").toBe(true)
      })
    }, 30_000)
  }
})
