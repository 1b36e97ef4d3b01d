/**
 * Review of time read *before* a wait and used *after* it (the class of the flow-control fix: a claim judged and
 * stamped at the time it was asked for instead of the time it was made). Two stores on one database (one SQLite
 * file, or one PostgreSQL schema) stand in for two hosts, on TestClock: store A's open transaction holds what B's
 * operation must wait for (SQLite: the write lock; PostgreSQL: the row) while the clock is advanced, then commits.
 * Only tests that fail on the current code are kept.
 *
 * Checked and found consistent (a stale time there only makes things more conservative, or is fenced): lock
 * acquire judging the holder's expiry at the stale time (it can only find a lapsed lease live, never take a live
 * one); renew/release at a stale time (a renewal that waited past the lease end revives it only when nobody could
 * take it meanwhile: every taker waited on the same lock); the scheduler's tick (SQLite reads `Clock` after
 * `BEGIN IMMEDIATE`; PostgreSQL's `holds … FOR SHARE` re-checks owner and token after its wait, and `due … FOR
 * UPDATE` re-checks `next_fire_at`, so a late tick fires fewer boundaries, never twice or after a takeover); a
 * leader lease taken at a stale time (shorter; the first tick's fenced re-check ends the tenure); maintenance
 * (expires/purges less); keyed enqueue's expired-holder sweep (keeps a holder longer); retry's `runAt` and
 * heartbeat's lease end (from the time asked for); PersistedQueue take and the outbox (claims, fixed already).
 */
import * as RateLimiter from "@effect/experimental/RateLimiter"
import { describe, expect, it } from "@effect/vitest"
import { type Context, DateTime, Effect, Either, Fiber, Layer, Metric, Option, TestClock } from "effect"
import { EffectStores, Locks, Queues, Telemetry } from "../src/index.js"
import { type EngineUnderTest, engines, freshFile, sqliteFromClient } from "./contract/harness.js"
import { realSleep, rivalHolding } from "./contract/rival.js"
import type { StoreServices } from "./contract/support.js"
import { freshQueue } from "./contract/telemetry.js"

type Services = StoreServices | RateLimiter.RateLimiter | RateLimiter.RateLimiterStore
type Ctx = Context.Context<Services>

/** Two stores ("hosts") on one database, each with Effect's RateLimiter over alkstore. */
const twoStores = (engine: EngineUnderTest, label: string) =>
  Effect.gen(function*() {
    const filename = freshFile(label)
    const layer = () =>
      RateLimiter.layer.pipe(
        Layer.provideMerge(EffectStores.layerRateLimiterStore),
        Layer.provideMerge(engine.store({ filename, fallbackPoll: "1 hour" }))
      )
    const a: Ctx = yield* Layer.build(layer())
    const b: Ctx = yield* Layer.build(layer())
    const inA = <X, E>(e: Effect.Effect<X, E, Services>) => Effect.provide(e, a)
    const inB = <X, E>(e: Effect.Effect<X, E, Services>) => Effect.provide(e, b)
    return { inA, inB }
  })


const consume = (algorithm: "fixed-window" | "token-bucket") =>
  Effect.flatMap(RateLimiter.RateLimiter, (limiter) =>
    Effect.either(limiter.consume({ algorithm, onExceeded: "fail", window: "10 seconds", limit: 2, key: "smtp" })))

// SqliteStore.layerFromClient is left out: there the foreign connection's native busy timeout blocks the thread
// while B waits, so the clock cannot be moved during the wait (as in test/flow-fleet-review.test.ts).
for (const engine of engines.filter((e) => e !== sqliteFromClient)) {
  describe(`time read before a wait — ${engine.name}`, () => {
    // docs/effect-stores.md, "The one-layer swap": `waitForSmtp({ key: "smtp", limit: 10, window: "1 minute" })`
    // — "at most 10 sends a minute, across every process sharing the database"; "RateLimiter: what it does,
    // exactly": "one statement per take ..., so a limit is atomic across processes (and, on PostgreSQL, hosts)";
    // CONTRACT §8a the same; and the principle the flow-control fix states (src/internal/engine.ts, `claim`):
    // a take that waited is judged and stamped when it is made, not when it was asked for.
    // src/internal/effectStores/rateLimiter.ts reads `Clock` before the statement, which then waits for the
    // write lock (SQLite: busy retries re-run it with the same bound `now`) or the key's row lock (PostgreSQL:
    // INSERT … ON CONFLICT DO UPDATE waits, then runs with the same `$2`). B's take, asked at t = 20 s and made at
    // t = 29 s, is judged at 20 s: the fixed window starts at 20 s and ends at 25 s (not 34 s), the token bucket's
    // refill is stamped at 20 s (not 25 s); at t = 29 s two more takes are granted beside it — three grants in
    // the same instant under `limit: 2, window: 10 s` (Effect's in-memory store, the documented oracle, grants
    // two). Observed: [true, true, true]. Fails on SqliteStore.layer and both PostgreSQL engines.
    for (const algorithm of ["fixed-window", "token-bucket"] as const) {
      it.scoped(`a ${algorithm} take that waited for the lock is judged when it is made: no third grant in the instant`, () =>
        Effect.gen(function*() {
          const { inA, inB } = yield* twoStores(engine, `rl-${algorithm}`)
          const table = algorithm === "fixed-window" ? "__alkstore_rate_windows" : "__alkstore_rate_buckets"
          // t = 0: the key's row exists (one take), and its window/refill lapses long before t = 20 s.
          expect(Either.isRight(yield* inA(consume(algorithm)))).toBe(true)
          yield* TestClock.adjust("20 seconds")
          const rival = yield* rivalHolding(
            inA,
            engine.capabilities.postgres
              ? `SELECT key FROM ${table} WHERE key = 'smtp' FOR UPDATE`
              : `UPDATE ${table} SET key = key WHERE key = 'smtp'`
          )
          const late = yield* Effect.fork(inB(consume(algorithm))) // asked at t = 20 s
          yield* realSleep(300)
          yield* TestClock.adjust("9 seconds")
          expect(Option.isNone(yield* Fiber.poll(late))).toBe(true) // B's take waits for the lock
          yield* rival.commit
          const granted = [Either.isRight(yield* Fiber.join(late))] // made at t = 29 s
          granted.push(Either.isRight(yield* inA(consume(algorithm)))) // t = 29 s
          granted.push(Either.isRight(yield* inA(consume(algorithm)))) // t = 29 s
          expect(granted).toEqual([true, true, false])
        }))
    }

    // CONTRACT §4 / docs/queues-and-locks.md, "Locks": `acquire` → `Option<LockHandle>`; "A lock is free when it
    // has no row or its lease lapsed"; CONTRACT §8: locks are "exclusive while the lease is valid". A handle is
    // what says "you hold it"; for claims the contract (§3) already compensates a wait ("a claim whose wait left
    // its lease with less than half its visibility timeout is renewed ... before it is handed out ... So every
    // handle a claim returns starts with at least half its lease") — locks have no such rule, and the docs say
    // nothing of a ttl eaten by the wait. src/internal/locks.ts `acquireLock` reads `Clock` before the statement
    // and stamps `expires_at = now + ttl` with it after the wait: B's acquire (ttl 10 s) asked at t = 0 and made
    // at t = 12 s is handed out as `Some` with `expiresAt` = 10 s — a lease already over when the caller gets it —
    // and A's acquire at t = 12 s takes the same lock at once: two `Some` handles for one lock at the same instant,
    // B's `renew` already false. (With a shorter wait, B's handle just has less than its ttl left: a withLock that
    // waited 9 s of a 10 s ttl fails LockLost at once.) Fails on SqliteStore.layer and both PostgreSQL engines.
    it.scoped("an acquire that waited is not handed out with a lease that already lapsed", () =>
      Effect.gen(function*() {
        const { inA, inB } = yield* twoStores(engine, "lock-wait")
        // The lock's row exists (a tenure given back) so that PostgreSQL can hold it.
        const first = yield* inA(Effect.flatMap(Locks.Locks, (l) => l.acquire("job", { ttl: "10 seconds", owner: "seed" })))
        expect(yield* Option.getOrThrow(first).release).toBe(true)
        const rival = yield* rivalHolding(
          inA,
          engine.capabilities.postgres
            ? `SELECT name FROM __alkstore_locks WHERE name = 'job' FOR UPDATE`
            : `UPDATE __alkstore_locks SET name = name WHERE name = 'job'`
        )
        const late = yield* Effect.fork(inB(Effect.flatMap(Locks.Locks, (l) => l.acquire("job", { ttl: "10 seconds", owner: "B" }))))
        yield* realSleep(300)
        yield* TestClock.adjust("12 seconds")
        expect(Option.isNone(yield* Fiber.poll(late))).toBe(true) // B's acquire waits for the lock
        yield* rival.commit
        const b = yield* Fiber.join(late)
        const now = yield* inA(Effect.clockWith((clock) => clock.currentTimeMillis))
        const a = yield* inA(Effect.flatMap(Locks.Locks, (l) => l.acquire("job", { ttl: "10 seconds", owner: "A" })))
        const view = (h: Option.Option<Locks.LockHandle>) =>
          Option.map(h, (handle) => ({ leftMillis: DateTime.toEpochMillis(handle.expiresAt) - now }))
        // B holds the lock from t = 12 s for its ttl, so A is refused; observed: B Some({ leftMillis: -2000 }), A Some(...)
        expect({ b: view(b), a: Option.isSome(a) }).toEqual({ b: Option.some({ leftMillis: 10_000 }), a: false })
      }))

    // docs/observability.md, Metrics: "`alkstore.queue.wait_ms` | histogram | from due … to claim". A claim that
    // waited for SQLite's write lock is judged once it holds it (at 9 s here), so it takes a job that fell due
    // during the wait (at 5 s); its wait was counted from the time read before the wait (0 s): -5000 ms. Counted
    // from the time the claim returned, it is 4000 ms. (SQLite's store: the claim PostgreSQL makes for an
    // unlimited queue skips locked rows and never waits for them.)
    if (engine.name === "sqlite (SqliteStore.layer)") {
      it.scoped("a claim that waited while its job fell due counts no negative wait", () =>
        Effect.gen(function*() {
          const { inA, inB } = yield* twoStores(engine, "neg-wait")
          const name = freshQueue("neg-wait")
          const queueIn = Effect.flatMap(Queues.Queues, (queues) => queues.queue(name))
          yield* inA(Effect.flatMap(queueIn, (q) => q.enqueue({ n: 1 }, { delay: "5 seconds" })))
          const rival = yield* rivalHolding(inA, `UPDATE __alkstore_jobs SET priority = priority WHERE queue = '${name}'`)
          const late = yield* Effect.fork(inB(Effect.flatMap(queueIn, (q) => q.claim("B")))) // asked at t = 0
          yield* realSleep(300)
          yield* TestClock.adjust("9 seconds")
          yield* rival.commit
          expect(Option.isSome(yield* Fiber.join(late))).toBe(true) // judged at t = 9 s, the job due since 5 s
          const wait = yield* Metric.value(Metric.tagged(Telemetry.metrics.wait, "queue", name))
          expect({ count: wait.count, min: wait.min }).toEqual({ count: 1, min: 4_000 })
        }))
    }
  })
}
