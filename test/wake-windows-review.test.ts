/**
 * Review of the windows in which a commit that makes work claimable leaves a waiter asleep past the moment it
 * could claim (docs/waking.md; CONTRACT §7). Only tests that fail on the current code are kept.
 *
 * One window, reached two ways: a wake that *completed* a waiter's round is lost when the step that round leads
 * to is interrupted (or fails) before it acted on it. `withTicket` passes a signal on only when the round that
 * holds the woken ticket itself fails (src/internal/wake.ts `passOn`). But in `takeUpTo` (src/internal/queue.ts)
 * a round woken by a signal ends *successfully* with `"signalled"` and the claim runs after it (`atOnce`), and a
 * round woken by another process's commit ends with `"changed"` and the re-read runs in the *next* round, under
 * a fresh ticket nobody signalled. Both steps can be interrupted (a take's timeout, a stop) while they wait — a
 * claim waiting out a busy file (`busyWaitsInterruptible`), a read waiting for the store's connection
 * (`writeFreeWait`) — and then the wake is gone: the other waiter of the queue, which the signal skipped (one
 * job wakes one waiter; a cross-process change wakes one waiter per queue), sleeps to its fallback poll although
 * the job is claimable the whole time.
 *
 * Engines: SqliteStore.layer. On SqliteStore.layerFromClient the data_version watcher echoes the store's own
 * commits (it cannot tell them apart), which wakes the other waiter anyway; on PostgreSQL a claim neither waits
 * for a store connection nor a busy file, and an interrupted stoppable claim gives what it claimed back with a
 * signal, so these interleavings cannot be built there.
 *
 * Checked and found consistent (probes removed): a take interrupted while a store transaction holds the
 * connection after a signal (masked by the watcher, which signals every topic while the store's connection is
 * inside a transaction); the watcher's own-commit filter (`ownDataVersion`) against interleavings of own and
 * foreign commits; the watch's look when a wait starts (the linger fix); the `quietSince` shortcut (every
 * cross-process wake bumps `generation`, and a wait that starts with nobody waiting reads data_version); PostgreSQL's
 * first LISTEN and reconnects (`signalAll` once in), NOTIFY payloads (names ≤ 1000 bytes < 7900), channel
 * escaping, savepoint rollbacks (in-process hooks of a rolled-back savepoint dropped, NOTIFY per subtransaction
 * level); the scheduler lease's topic equals its lock name (`__alkstore_scheduler`), so a release elsewhere wakes
 * a standby; locks have no waiters (`withLock` fails with `LockUnavailable`); PersistedQueue's prefetched
 * elements are released by the sweep with a signal.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import Sqlite from "better-sqlite3"
import { type Context, Deferred, Effect, Fiber, Layer, Option } from "effect"
import { freshFile, sqliteOwned } from "./contract/harness.js"
import { advance, queueOf, settle, type StoreServices } from "./contract/support.js"

const engine = sqliteOwned
const waits = <A, E>(fiber: Fiber.Fiber<A, E>) => Effect.map(Fiber.poll(fiber), Option.isNone)
const realSleep = (ms: number) => Effect.promise(() => new Promise<void>((r) => setTimeout(r, ms)))

describe(`wake windows: a wake consumed by a round whose next step is interrupted — ${engine.name}`, () => {
  // docs/waking.md: "a signal that reached its ticket just before it failed or was interrupted (a take's timeout
  // as a job arrived) goes on to the next waiter of the topic instead of being lost with it", and "`signal(queue,
  // n)` wakes the `n` longest-waiting tickets". The enqueue signals `first` (the longest waiting); its round
  // returns "signalled" and its claim (`atOnce`) meets the file's write lock, held by another connection, and
  // waits it out. `first` is interrupted there (its timeout); the other connection rolls back (nothing changed,
  // so the watcher has nothing to tell). Expected: `second` takes the job at once. Observed: it sleeps to its
  // fallback poll (here 1 hour; 5 s by default) — the signal went with `first`.
  it.scoped("a signalled take interrupted while its claim waits out a busy file leaves the other take asleep", () => {
    const filename = freshFile("busy-absorb")
    return Effect.gen(function*() {
      const q = yield* queueOf("absorbed-at-once")
      const other = new Sqlite(filename) // another process's connection
      yield* Effect.addFinalizer(() => Effect.sync(() => other.close()))
      const first = yield* Effect.fork(q.take("first"))
      yield* settle
      const second = yield* Effect.fork(q.take("second"))
      yield* settle
      // The enqueue signals `first`; before `first` runs on, the other connection takes the write lock.
      yield* Effect.zipRight(q.enqueue("job"), Effect.sync(() => other.exec("BEGIN IMMEDIATE")))
      yield* settle
      yield* realSleep(50) // `first` retries its claim on the busy file (real-time pauses)
      const firstClaiming = yield* waits(first)
      yield* Fiber.interrupt(first)
      other.exec("ROLLBACK")
      yield* settle
      yield* realSleep(100)
      yield* settle
      const tookAtOnce = !(yield* waits(second))
      yield* advance("2 hours")
      expect(Option.isSome(yield* Fiber.poll(second)), "the fallback poll delivers it").toBe(true)
      expect({ firstClaiming, tookAtOnce }).toEqual({ firstClaiming: true, tookAtOnce: true })
    }).pipe(Effect.provide(engine.store({ filename, fallbackPoll: "1 hour" })))
  })

  // docs/waking.md: "A cross-process change wakes one waiter per queue the same way" (as a commit of one job wakes
  // one worker, with the baton passed on by the waiter that claims), and the passing-on rule quoted above; CONTRACT
  // §7: waiters wake on a commit by another process. Store B (another process) enqueues; A's watcher wakes one
  // waiter of the queue, `first`, with "changed". Its re-read (the next round, under a fresh ticket) waits for A's
  // connection, reserved by another fiber of A, and `first` is interrupted there. Expected: `second` takes the job
  // once the connection is free. Observed: it sleeps to its fallback poll. (Without the interruption `first` takes
  // the job at once, checked by hand: the wake did reach `first`.)
  it.scoped("a take woken by another process's commit, interrupted while its re-read waits for the connection, leaves the other take asleep", () =>
    Effect.gen(function*() {
      const filename = freshFile("changed-absorb")
      const a: Context.Context<StoreServices> = yield* Layer.build(engine.store({ filename, fallbackPoll: "1 hour" }))
      const b: Context.Context<StoreServices> = yield* Layer.build(engine.store({ filename, fallbackPoll: "1 hour" }))
      const inA = <X, E>(e: Effect.Effect<X, E, StoreServices>) => Effect.provide(e, a)
      const qa = yield* inA(queueOf("changed-absorb"))
      const qb = yield* Effect.provide(queueOf("changed-absorb"), b)
      const first = yield* Effect.fork(qa.take("first"))
      yield* inA(settle)
      const second = yield* Effect.fork(qa.take("second"))
      yield* inA(settle)
      // Another fiber of A holds A's connection (a reserved connection: no write lock, B can still commit).
      const release = yield* Deferred.make<void>()
      const holding = yield* Deferred.make<void>()
      const holder = yield* Effect.fork(inA(Effect.flatMap(SqlClient.SqlClient, (sql) =>
        Effect.scoped(Effect.zipRight(sql.reserve, Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(release)))))))
      yield* Deferred.await(holding)
      yield* qb.enqueue("job")
      yield* realSleep(300) // A's watcher sees B's commit and wakes `first`, whose re-read waits for the connection
      const bothWaiting = (yield* waits(first)) && (yield* waits(second))
      yield* Fiber.interrupt(first)
      yield* Deferred.succeed(release, undefined)
      yield* Fiber.join(holder)
      yield* inA(settle)
      yield* realSleep(100)
      yield* inA(settle)
      const tookAtOnce = !(yield* waits(second))
      yield* inA(advance("2 hours"))
      expect(Option.isSome(yield* Fiber.poll(second)), "the fallback poll delivers it").toBe(true)
      expect({ bothWaiting, tookAtOnce }).toEqual({ bothWaiting: true, tookAtOnce: true })
    }))
})
