/**
 * Review: a systematic interruption sweep. Each writing operation runs in a fiber that yields to the scheduler
 * every 10 steps (`Effect.withMaxOpsBeforeYield(10)`: what Effect's own op budget does every 2048 steps, so a
 * timeout or a race can land at any step; below ~10 Effect's run loop makes no progress at all), and is
 * interrupted after k `yieldNow`s of the test fiber, for every k until it completes first. After each
 * interruption a fresh look at the store checks the contract's invariants. Only the failing cases are kept.
 *
 * Swept and found consistent (probes removed): enqueue (its wake is signalled in the same step as its insert),
 * enqueueBatch (all or nothing), ackAll (all or nothing), lock renew + release, schedule + unschedule (the store
 * stays usable and the name re-registers), outbox runOnce (the claim is given back or the job acked), and every
 * operation on both PostgreSQL engines at the granularity of event-loop turns (there the statement's answer is
 * the only window and the engine guards it). No sweep ever produced a defect (Cause.die).
 * Not kept: `take` on SQLite also loses a claim in a window of a few steps, but that window sits where the
 * handle is handed out through the caller's interruptibility (docs/decisions.md, "An interrupted take"); so
 * does `claim` on the store's own SQLite connection, with or without `claimHanded`'s guard (docs/decisions.md,
 * "A claim interrupted after its statement committed").
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, type Context, Effect, Exit, Fiber, Layer, Option } from "effect"
import { Locks, Queues } from "../src/index.js"
import { freshFile, sqliteFromClient, sqliteOwned } from "./contract/harness.js"
import { eventually, queueOf, settle, type StoreServices } from "./contract/support.js"
import { holdsWithin, interruptAfter, sweep } from "./support/interruptSweep.js"

const jobsOf = (queue: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ state: string; attempts: number }>`SELECT state, attempts FROM __alkstore_jobs WHERE queue = ${queue} ORDER BY id`,
      (rows) => rows.map((r) => `${r.state}/${Number(r.attempts)}`)
    ))

const inStore = (layer: Layer.Layer<StoreServices, unknown>, body: Effect.Effect<void, unknown, StoreServices>) =>
  Effect.gen(function*() {
    const ctx: Context.Context<StoreServices> = yield* Layer.build(layer)
    yield* Effect.provide(body, ctx)
  }).pipe(Effect.scoped)

const owned = () => sqliteOwned.store({ filename: freshFile("sweep"), fallbackPoll: "1 hour" })

describe(`interrupt sweep — ${sqliteOwned.name}`, () => {
  // CONTRACT §4: `withLock` "releases when the effect ends — success, failure or interruption"; docs/decisions.md
  // ("Stopping on a busy SQLite file"): "`withLock`'s acquire [is] interruptible and [its release is] in place
  // before [it starts]". Interrupted 33–41 yields in (its body never ran), the acquire has committed and the lock
  // stays held by the call's private owner (`…:withLock:n`, which nobody can acquire again to release it) for the
  // whole TTL: another owner's acquire gets None.
  // Budgets of 16 and 10 steps: at 16 the code before the fix fails at k = 5; at 10–13 `Effect.raceFirst` (the
  // body against its renewals) hung at one point each until withLock raced through src/internal/race.ts.
  it.effect.each([16, 10])("withLock interrupted during its acquire leaves no lock behind (op budget %i)", (budget) =>
    inStore(owned(), sweep(200, (k) =>
      Effect.gen(function*() {
        const locks = yield* Locks.Locks
        const name = `L${k}`
        const { done } = yield* interruptAfter(locks.withLock(name, "30 seconds", Effect.void), k, budget)
        const other = yield* locks.acquire(name, { ttl: "1 second", owner: "other" })
        expect({ k, free: Option.isSome(other) }).toEqual({ k, free: true })
        if (Option.isSome(other)) yield* other.value.release
        return done
      }))))

  // CONTRACT §7: every waiter wakes on "a commit in this process that concerns it (immediately ...)"; §9: "a slot
  // freed by an ack, retry, release, death or lapsed lease is claimable at once; a waiter blocked only by a limit
  // wakes when a slot frees". Interrupted right after its statement committed, the handle operation skips the
  // in-process signal (handle.ts: `storage.release` then `Effect.tap(... signal(1))`; `ackOf`'s tap of `ackFreed`
  // in queue.ts; retry's `signal(1)` after `storage.retry`; `bury`'s tap of `freed`): the `take` held back by
  // `concurrency: 1` sleeps on to its fallback poll (here 1 hour) with a job claimable.
  for (const [label, run] of [
    ["ack", (h: Queues.JobHandle) => h.ack],
    ["release", (h: Queues.JobHandle) => h.release],
    ["retry", (h: Queues.JobHandle) => h.retry("x", 0)],
    ["fail", (h: Queues.JobHandle) => h.fail("x")]
  ] as const) {
    it.effect(`${label} interrupted after it committed wakes a take held back by concurrency 1`, () =>
      inStore(owned(), sweep(100, (k) =>
        Effect.gen(function*() {
          const name = `${label}${k}`
          const q = yield* queueOf(name)
          yield* (yield* Queues.Queues).setLimits(name, { concurrency: 1 })
          yield* q.enqueue("a")
          yield* q.enqueue("b")
          const h = Option.getOrThrow(yield* q.claim("w1"))
          const taker = yield* Effect.fork(q.take("w2"))
          yield* settle
          const { done } = yield* interruptAfter(run(h) as Effect.Effect<unknown, unknown>, k)
          const a = yield* q.getJob(h.job.id)
          const untouched = Option.isSome(a) && a.value.state === "claimed" && Option.getOrNull(a.value.workerId) === "w1"
          if (untouched) expect({ k, ack: yield* h.ack }).toEqual({ k, ack: true }) // not applied: the claim is still its
          const woken = yield* holdsWithin(Effect.map(Fiber.poll(taker), Option.isSome), 1)
          expect({ k, untouched, woken }).toEqual({ k, untouched, woken: true })
          yield* Fiber.interrupt(taker)
          return done
        }))))
  }

  // The same for `clearLimits` (src/Queues.ts: limits apply "from the next claim on"; src/internal/limits.ts: "A
  // change wakes the queue's waiters on commit (a raised or removed limit may admit work at once)"): the delete
  // commits, then `signalOnCommit` is a later step an interruption skips.
  it.effect("clearLimits interrupted after it committed wakes a take held back", () =>
    inStore(owned(), sweep(100, (k) =>
      Effect.gen(function*() {
        const name = `cl${k}`
        const q = yield* queueOf(name)
        const queues = yield* Queues.Queues
        yield* queues.setLimits(name, { concurrency: 1 })
        yield* q.enqueue("a")
        yield* q.enqueue("b")
        yield* q.claim("w1")
        const taker = yield* Effect.fork(q.take("w2"))
        yield* settle
        const { done } = yield* interruptAfter(queues.clearLimits(name), k)
        if (Option.isNone(yield* queues.limits(name))) {
          expect({ k, woken: yield* holdsWithin(Effect.map(Fiber.poll(taker), Option.isSome), 1) }).toEqual({ k, woken: true })
        }
        yield* Fiber.interrupt(taker)
        return done
      }))))
})

describe(`interrupt sweep — ${sqliteFromClient.name}`, () => {
  /** Whether `SELECT 1` on the application's client answers within 2 s of real time. */
  const clientAnswers = Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.raceFirst(
      Effect.as(sql`SELECT 1`, true),
      Effect.as(Effect.promise(() => new Promise<void>((r) => setTimeout(r, 2000))), false)
    ))

  // docs/decisions.md ("Another `SqlClient`'s transaction"/"`layerFromClient` after a failed COMMIT"): the store
  // "runs each of its lone writes on that client in a deferred `BEGIN … COMMIT` of its own"; CONTRACT §2: "No
  // mechanism throws, and none turns a storage failure into a defect" — and an interrupted call must leave the
  // store usable. An `enqueueBatch` interrupted 46 yields in leaves the client's one connection reserved forever:
  // every later statement — the store's and the application's own `SELECT 1` — waits without end. The executor's
  // `acquire` (src/internal/sqlite/executor.ts, `fromClient`) runs `Scope.extend(sql.reserve, scope)` inside an
  // interruptible `writeFreeWait`; an interruption seen after the reserve succeeded and before the
  // `[release, conn]` pair reaches `makeImmediateTransaction`'s `Effect.ensuring(release)` drops the scope
  // unclosed, and with it the connection's permit.
  it.effect("an interrupted enqueueBatch leaves the application's client usable", () =>
    inStore(sqliteFromClient.store({ filename: freshFile("sweep"), fallbackPoll: "1 hour" }), sweep(200, (k) =>
      Effect.gen(function*() {
        const q = yield* queueOf(`eb${k}`)
        const { done } = yield* interruptAfter(q.enqueueBatch(["a", "b", "c"]), k)
        const answers = yield* clientAnswers
        expect({ k, answers }).toEqual({ k, answers: true })
        return done
      }))))
})
