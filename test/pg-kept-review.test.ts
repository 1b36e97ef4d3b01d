/**
 * Review of the kept connection (commit 43815db: src/internal/pg/keptConnection.ts, src/internal/pg/executor.ts).
 *
 * The executor is built here as `buildMechanisms` builds it (`keepConnection(client)` then `makeExecutor(client,
 * …, { kept })`) over a `PgClient` of 3 connections, the kept connection passed through a thin wrapper that only
 * observes `take` / `answered` and, at one chosen instant, delivers an interruption to a fiber — the instant an
 * interruption can land in production too (a fiber that yields at Effect's op-count boundary there, or a timeout
 * or a `Fiber.interrupt` that fires while the statement's answer is queued to its fiber).
 */
import * as Reactivity from "@effect/experimental/Reactivity"
import * as PgClient from "@effect/sql-pg/PgClient"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Exit, Fiber, FiberId, Layer, Option, Redacted, Runtime } from "effect"
import { makeExecutor, type PgExecutor } from "../src/internal/pg/executor.js"
import { type Driver, keepConnection, type KeptConnection } from "../src/internal/pg/keptConnection.js"
import { pgDatabaseUrl, pgTestTypes } from "./contract/harness.js"

const realClock = Clock.make()
const realSleep = (ms: number) => Effect.withClock(Effect.sleep(ms), realClock)

interface Hooks {
  /** Runs right after the kept connection was handed to a statement or a transaction. */
  afterTake?: ((driver: Driver) => void) | undefined
  /** Runs right after a statement on the kept connection was answered (before its fiber is resumed). */
  afterAnswered?: ((driver: Driver) => void) | undefined
}

/** `keepConnection`'s kept connection, observed: `hooks` run at the instants they name. */
const observed = (kept: KeptConnection, hooks: Hooks): KeptConnection => ({
  take: () => {
    const driver = kept.take()
    if (driver !== undefined) hooks.afterTake?.(driver)
    return driver
  },
  answered: (driver) => {
    kept.answered(driver)
    hooks.afterAnswered?.(driver)
  },
  cancel: kept.cancel
})

const clientLayer = (url: string) =>
  PgClient.layer({ url: Redacted.make(url), types: pgTestTypes, maxConnections: 3 }).pipe(Layer.provide(Reactivity.layer))

/** The executor over a pool of 3 with a kept connection, as `PgStore.layer` builds it. */
const executorWith = (hooks: Hooks) =>
  Effect.gen(function*() {
    const client = yield* PgClient.PgClient
    const kept = yield* keepConnection(client)
    const executor = yield* makeExecutor(client, "review", { prepare: true, kept: observed(kept, hooks) })
    // the connection is kept in the background: wait until a statement runs on it
    const pid = yield* keptPid(executor)
    return { executor, pid }
  })

/** The backend of the kept connection, once one is kept (a statement on it reports its backend). */
const keptPid = (executor: PgExecutor) =>
  Effect.gen(function*() {
    const pool = new Set<number>()
    for (let i = 0; i < 200; i++) {
      const [row] = yield* executor.all<{ pid: number }>("SELECT pg_backend_pid() AS pid", [])
      // the kept one answers every statement run one after another; a pool connection would also, so take
      // the pid that answers twice in a row after the background keep had time
      if (pool.has(row!.pid) && i > 5) return row!.pid
      pool.add(row!.pid)
      yield* realSleep(10)
    }
    return -1
  })

/** How many of `n` store transactions are open at once (each waits, at most `millis`, for all `n` to open). */
const openAtOnce = (executor: PgExecutor, n: number, millis: number) =>
  Effect.gen(function*() {
    let opened = 0
    const all = yield* Deferred.make<void>()
    const one = executor.transaction(Effect.gen(function*() {
      yield* executor.all("SELECT 1", [])
      opened++
      if (opened === n) yield* Deferred.succeed(all, undefined)
      yield* Deferred.await(all)
    }))
    const fibers = yield* Effect.forEach(Array.from({ length: n }, () => one), (e) => Effect.fork(e))
    yield* Effect.race(Deferred.await(all), realSleep(millis))
    const seen = opened
    yield* Deferred.succeed(all, undefined)
    yield* Effect.forEach(fibers, Fiber.await, { discard: true })
    return seen
  })

describe("PostgreSQL kept connection: review", () => {
  // docs/decisions.md, "A connection kept for the store's single statements (PostgreSQL)": "a transaction […]
  // takes it first when free, so `maxConnections` transactions can still be open at once"; executor.ts
  // `reserveIn`: "the pool is one connection short of `maxConnections` while a connection is kept, and
  // transactions can still have as many open at once".
  it.live("a statement interrupted just after it took the kept connection: the connection is not left busy for good", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      const hooks: Hooks = {}
      yield* Effect.gen(function*() {
        const { executor } = yield* executorWith(hooks)
        expect(yield* openAtOnce(executor, 3, 3_000)).toBe(3)
        // the statement's fiber is interrupted between `take` (in `all`'s `withFiberRuntime`) and the
        // `Effect.async` that sends the query (the next step of the same fiber)
        const fiber = yield* Effect.fork(Effect.gen(function*() {
          const self = Option.getOrThrow(yield* Effect.fiberId.pipe(Effect.map(Option.some)))
          hooks.afterTake = () => {
            hooks.afterTake = undefined
            current!.unsafeInterruptAsFork(self)
          }
          yield* executor.all("SELECT 1", [])
        }))
        let current: Fiber.RuntimeFiber<void, unknown> | undefined = fiber
        expect(Exit.isInterrupted(yield* Fiber.await(fiber))).toBe(true)
        yield* realSleep(200)
        // the kept connection was never given a statement, yet it stays `busy`: 2 transactions at most
        expect(yield* openAtOnce(executor, 3, 3_000)).toBe(3)
      }).pipe(Effect.scoped, Effect.provide(clientLayer(url)))
    }), { timeout: 30_000 })

  it.live("a transaction interrupted just after it took the kept connection: the connection is not left busy for good", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      const hooks: Hooks = {}
      yield* Effect.gen(function*() {
        const { executor } = yield* executorWith(hooks)
        const fiber = yield* Effect.fork(Effect.gen(function*() {
          const self = yield* Effect.fiberId
          hooks.afterTake = () => {
            hooks.afterTake = undefined
            current!.unsafeInterruptAsFork(self)
          }
          yield* executor.transaction(executor.all("SELECT 1", []))
        }))
        let current: Fiber.RuntimeFiber<void, unknown> | undefined = fiber
        expect(Exit.isInterrupted(yield* Fiber.await(fiber))).toBe(true)
        yield* realSleep(200)
        expect(yield* openAtOnce(executor, 3, 3_000)).toBe(3)
      }).pipe(Effect.scoped, Effect.provide(clientLayer(url)))
    }), { timeout: 30_000 })

  // keptConnection.ts: "the connection takes no other statement until both the statement's answer and the
  // cancel's have come: a cancel that reached the server late would otherwise stop the next statement
  // instead"; docs/decisions.md: "Holding the cancelled connection until the cancel has answered keeps a late
  // cancel from stopping the next statement".
  it.live("a statement interrupted as its answer arrives: its cancel does not stop the next statement on the connection", () =>
    Effect.gen(function*() {
      const url = yield* Effect.promise(pgDatabaseUrl)
      const hooks: Hooks = {}
      yield* Effect.gen(function*() {
        const { executor } = yield* executorWith(hooks)
        const runtime = yield* Effect.runtime<never>()
        let next: Fiber.RuntimeFiber<ReadonlyArray<unknown>, unknown> | undefined
        let first: Fiber.RuntimeFiber<ReadonlyArray<unknown>, unknown> | undefined
        hooks.afterAnswered = () => {
          hooks.afterAnswered = undefined
          // another fiber's statement takes the connection, now free ...
          next = Runtime.runFork(runtime)(executor.all("SELECT pg_sleep(1.5), 'next' AS which", []))
          // ... and the first statement's fiber is interrupted before it saw its answer
          first!.unsafeInterruptAsFork(FiberId.none)
        }
        first = yield* Effect.fork(executor.all("SELECT pg_sleep(0.1), 'first' AS which", []))
        yield* Fiber.await(first)
        expect(next).toBeDefined()
        const exit = yield* Fiber.await(next!)
        // the next statement was cancelled by the first one's cancel: "canceling statement due to user request"
        expect(Exit.isSuccess(exit) ? "ran" : String(Exit.isFailure(exit) && exit.cause)).toBe("ran")
      }).pipe(Effect.scoped, Effect.provide(clientLayer(url)))
    }), { timeout: 30_000 })
})
