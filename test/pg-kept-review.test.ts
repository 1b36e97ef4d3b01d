/**
 * Review of the kept connection (commit 43815db, as amended by 7e14447: src/internal/pg/keptConnection.ts,
 * src/internal/pg/executor.ts).
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
import { Cause, Clock, Effect, Exit, Fiber, FiberId, Layer, Redacted, Runtime } from "effect"
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

describe("PostgreSQL kept connection: review", () => {
  // keptConnection.ts: "the connection takes no other statement until both the statement's answer and the
  // cancel's have come: a cancel that reached the server late would otherwise stop the next statement
  // instead"; docs/decisions.md: "Holding the cancelled connection until the cancel has answered keeps a late
  // cancel from stopping the next statement".
  //
  // The driver's callback frees the connection (`answered`) and then queues the answer to the statement's fiber,
  // which takes it up a scheduler turn later. Another fiber can take the free connection meanwhile, and an
  // interruption of the first fiber that lands in that turn (its timeout, a stop) runs its canceler:
  // `kept.cancel(driver)` sees the connection `busy` — with the other fiber's statement — and sends
  // `pg_cancel_backend` for it.
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
        // failed before the fix: the next statement was stopped by the first one's cancel (SQLSTATE 57014,
        // "canceling statement due to user request"), though the first had been answered before the next was
        // sent. Fixed: a statement's canceler cancels only while that statement is unanswered (executor.ts onKept).
        const code = Exit.isFailure(exit)
          ? (Cause.squash(exit.cause) as { cause?: { code?: string; message?: string } }).cause
          : undefined
        expect(code === undefined ? "ran" : `${code.code}: ${code.message}`).toBe("ran")
      }).pipe(Effect.scoped, Effect.provide(clientLayer(url)))
    }), { timeout: 30_000 })
})
