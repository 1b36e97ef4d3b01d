/**
 * Review: the interruption sweep of test/interrupt-sweep-review.test.ts extended to the operations it did not
 * cover. Each operation runs in a fiber under `Effect.withMaxOpsBeforeYield(10)` (the scheduler at 16 and 10: at 10
 * its leadership race hung at k = 53 until it raced through src/internal/race.ts, docs/decisions.md "A race
 * interrupted between its two steps") and is interrupted after k `yieldNow`s of the test
 * fiber, for every k until it ends first three times; then a fresh look at the store (SQL on `__alkstore_*`)
 * checks the contract. Only the cases that failed are kept (each on `SqliteStore.layer` only, before its fix).
 *
 * Swept and found consistent on SqliteStore.layer and SqliteStore.layerFromClient (probes removed): PersistedQueue
 * `offer` (its commit wakes a waiting take; the client stays usable), RateLimiter `consume` (no defect, the next
 * consume works, the client answers), `Admin.purgeDead` (no defect; a second purge finishes the job), `setLimits`
 * raising a concurrency limit (the take it held back wakes), and on layerFromClient every operation below (the
 * PersistedQueue take with a handler that succeeds, fails or never ends, and waiting then offered; requeueDead;
 * cancel; runSchedules, 150 points at budget 10). No sweep produced a defect (Cause.die).
 * Not kept: `queue.stream("s", { batch: 3 })` through `Stream.take(2)` + `Stream.runForEach(ack)` on
 * SqliteStore.layer left the first job claimed by "s" without the consumer's callback ever seeing it (k = 184–200,
 * 235–251); that may be a handle already written downstream ("A handle that was handed on is the consumer's to
 * settle", docs/waking.md), so it is not claimed as a defect here. PostgreSQL was not swept (time).
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Cause, Clock, type Context, Effect, Exit, Fiber, Layer, Option, Schema, TestClock } from "effect"
import { Admin, EffectStores, Queues, Scheduler } from "../src/index.js"
import { freshFile, sqliteOwned } from "./contract/harness.js"
import { eventually, queueOf, settle } from "./contract/support.js"
import { holdsWithin, interruptAfter, sweep } from "./support/interruptSweep.js"

const rowsOf = (queue: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ id: number; state: string; attempts: number; worker_id: string | null }>`SELECT id, state, attempts, worker_id FROM __alkstore_jobs WHERE queue = ${queue} ORDER BY id`,
      (rows) => rows.map((r) => ({ id: Number(r.id), state: r.state, attempts: Number(r.attempts), worker: r.worker_id }))
    ))

const inStore = <R>(layer: Layer.Layer<R, unknown>, body: Effect.Effect<unknown, unknown, R>) =>
  Effect.gen(function*() {
    const ctx: Context.Context<R> = yield* Layer.build(layer)
    yield* Effect.provide(body, ctx)
  }).pipe(Effect.scoped)

const store = () => sqliteOwned.store({ filename: freshFile("sweep2"), fallbackPoll: "1 hour" })

/** Whether the forked take is woken within 1 s of real time (its fallback poll is an hour). */
const wakes = <A, E>(waiter: Fiber.Fiber<A, E>) => holdsWithin(Effect.map(Fiber.poll(waiter), Option.isSome), 1)

/** A dead job of queue `name` (maxAttempts 1, claimed and failed). */
const deadJob = (name: string) =>
  Effect.gen(function*() {
    const q = yield* queueOf(name)
    const id = yield* q.enqueue("dead", { maxAttempts: 1 })
    yield* Option.getOrThrow(yield* q.claim("killer")).fail("boom")
    return id
  })

describe(`interrupt sweep 2 — ${sqliteOwned.name}`, () => {
  // docs/effect-stores.md: "An interrupted take never strands its element, wherever the interruption lands: …
  // the element is claimable again at once, not when its lease lapses, and no attempt is spent." Interrupted 74
  // and 82–94 yields in (handler succeeding, failing or never ending alike; waiting-then-offered at 78, 86–98),
  // the element stays claimed by the store's `persisted-queue:…` worker, attempt spent, for the whole lease
  // (2 minutes): the interruption arrived after `accept`'s look at `interruptedCause` and was honoured when the
  // take's mask ended, so 0.61's `PersistedQueue.take` never closed the scope holding the release finalizer.
  // Fixed: the interrupted fiber's end gives the element back (a fiber observer, src/internal/effectStores).
  it.effect("a PersistedQueue take interrupted at any step leaves its element claimable at once", () =>
    inStore(
      PersistedQueue.layer.pipe(Layer.provideMerge(EffectStores.layerPersistedQueueStore()), Layer.provideMerge(store())),
      sweep(200, (k) =>
        Effect.gen(function*() {
          const name = `pt${k}`
          const pq = yield* PersistedQueue.make({ name, schema: Schema.Struct({ n: Schema.Number }) })
          yield* pq.offer({ n: 1 })
          yield* pq.offer({ n: 2 })
          const { done } = yield* interruptAfter(pq.take(() => Effect.void), k)
          // A prefetched element is held for one turn of the event loop at most; no TestClock time passes.
          const given = yield* holdsWithin(Effect.map(rowsOf(name), (rows) => rows.every((r) => r.state !== "claimed")), 1)
          expect({ k, rows: given ? "none claimed" : yield* rowsOf(name) }).toEqual({ k, rows: "none claimed" })
          return done
        }))
    ))

  // CONTRACT §7: every waiter wakes on "a commit in this process that concerns it (immediately ...)";
  // docs/decisions.md ("A wake owed by a write an interruption cut off") covers settles and limit changes, not
  // these. `queue.requeueDead` (and `Admin.requeue`, which calls it) commits the job back to pending, then signals
  // in a later step (`Effect.tap(... signal(1))`, src/internal/queueInspection.ts): interrupted between the two
  // (requeueDead 41–54 yields in, Admin.requeue 58–71) the waiting take sleeps on to its fallback poll (1 hour)
  // with the job claimable. Fixed: `tellingIfCut`, as the settles.
  for (const via of ["queue.requeueDead", "Admin.requeue"] as const) {
    it.effect(`${via} interrupted after it committed wakes a waiting take`, () =>
      inStore(store(), sweep(200, (k) =>
        Effect.gen(function*() {
          const name = `rq${k}`
          const id = yield* deadJob(name)
          const q = yield* queueOf(name)
          const waiter = yield* Effect.fork(q.take("w"))
          yield* settle
          const admin = yield* Admin.Admin
          const { done } = yield* interruptAfter<unknown, unknown, never>(via === "Admin.requeue" ? admin.requeue(id) : q.requeueDead(id), k)
          const requeued = (yield* rowsOf(name)).some((r) => r.id === id && r.state === "pending")
          if (requeued) expect({ k, woken: yield* wakes(waiter) }).toEqual({ k, woken: true })
          yield* Fiber.interrupt(waiter)
          return done
        }))))
  }

  // CONTRACT §9: "a slot freed by an ack, retry, release, death or lapsed lease is claimable at once; a waiter
  // blocked only by a limit wakes when a slot frees"; §7 as above. `queue.cancel` (and `Admin.cancel`) of a
  // claimed job frees its slot, then wakes in a later step (`Effect.tap(... freed)`,
  // src/internal/queueInspection.ts): interrupted between the two (cancel 34–48 yields in, Admin.cancel 51–65),
  // the take held back by `concurrency: 1` sleeps to its fallback poll with a job claimable. Fixed: `tellingIfCut`.
  for (const via of ["queue.cancel", "Admin.cancel"] as const) {
    it.effect(`${via} of a claimed job interrupted after it committed wakes a take held back by concurrency 1`, () =>
      inStore(store(), sweep(200, (k) =>
        Effect.gen(function*() {
          const name = `cc${k}`
          const q = yield* queueOf(name)
          yield* (yield* Queues.Queues).setLimits(name, { concurrency: 1 })
          const a = yield* q.enqueue("a")
          yield* q.enqueue("b")
          yield* q.claim("w1")
          const waiter = yield* Effect.fork(q.take("w2"))
          yield* settle
          const admin = yield* Admin.Admin
          const { done } = yield* interruptAfter<unknown, unknown, never>(via === "Admin.cancel" ? admin.cancel(a) : q.cancel(a), k)
          const cancelled = !(yield* rowsOf(name)).some((r) => r.id === a)
          if (cancelled) expect({ k, woken: yield* wakes(waiter) }).toEqual({ k, woken: true })
          yield* Fiber.interrupt(waiter)
          return done
        }))))
  }

  // CONTRACT §5: "interrupting the fiber is the stop …, and on interruption the leadership lease is released so a
  // standby takes over at once"; docs/decisions.md ("Stopping on a busy SQLite file"): "the scheduler's lease
  // acquire … [is] interruptible and [its release is] in place before [it starts]". Interrupted 5–6 yields in
  // (budget 16; 36–45 at budget 10), the lease row stays with the stopped runner's owner (`…:scheduler:1`) for
  // its whole TTL: the next `runSchedules` fails with LeadershipLost and the three due boundaries do not fire.
  // The release is keyed on `taken`, set only once `acquireLock`'s handle reached the runner
  // (src/internal/scheduler.ts, `runSchedules`); docs/decisions.md's fix for `withLock`'s same window
  // ("A `withLock` stopped before its handle", `ownerGivenBack`) was not applied here. Fixed: it is now.
  it.effect.each([16, 10])("runSchedules interrupted while taking the lease gives it back: the next runner leads and fires (op budget %i)", (budget) =>
    Effect.gen(function*() {
      for (let k = 0; k <= 40; k++) {
        yield* inStore(store(), Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const t0 = yield* Clock.currentTimeMillis
          yield* scheduler.schedule("s", "@every 1s", "fired", { n: 1 })
          yield* TestClock.adjust("3500 millis")
          yield* interruptAfter(scheduler.runSchedules, k, budget)
          const sql = yield* SqlClient.SqlClient
          const now = yield* Clock.currentTimeMillis
          const lease = yield* sql<{ owner: string; expires_at: number }>`SELECT owner, expires_at FROM __alkstore_locks WHERE name = '__alkstore_scheduler'`
          expect({ k, held: lease.filter((r) => Number(r.expires_at) > now).map((r) => r.owner) }).toEqual({ k, held: [] })
          const next = yield* Effect.fork(scheduler.runSchedules)
          yield* settle
          const fired = yield* sql<{ run_at: number }>`SELECT run_at FROM __alkstore_jobs WHERE queue = 'fired' ORDER BY run_at`
          // every boundary exactly once
          expect({ k, fired: fired.map((r) => Number(r.run_at) - t0) }).toEqual({ k, fired: [1000, 2000, 3000] })
          yield* Fiber.interrupt(next)
        }))
      }
    }), 60_000)
})
