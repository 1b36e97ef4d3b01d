/**
 * A review of the interval scheduler and its leader election (CONTRACT §5, §8; docs/scheduler-and-outbox.md).
 * Each test failed on the code before its fix, because of a defect.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { Scheduler } from "../src/index.js"
import { pgOwned } from "./contract/harness.js"
import { countRows } from "./contract/scheduler.js"

/** Every INSERT statement into the store's jobs table takes `seconds` (a slow or busy database, or a large tick). */
const slowJobInserts = (seconds: number) =>
  Effect.acquireRelease(
    Effect.flatMap(SqlClient.SqlClient, (sql) =>
      Effect.zipRight(
        sql.unsafe(`CREATE FUNCTION test_slow_insert() RETURNS trigger LANGUAGE plpgsql
          AS $$ BEGIN PERFORM pg_sleep(${seconds}); RETURN NULL; END $$`),
        sql.unsafe(`CREATE TRIGGER test_slow_insert BEFORE INSERT ON __alkstore_jobs
          FOR EACH STATEMENT EXECUTE FUNCTION test_slow_insert()`)
      )),
    () =>
      Effect.flatMap(SqlClient.SqlClient, (sql) =>
        Effect.zipRight(
          sql.unsafe(`DROP TRIGGER IF EXISTS test_slow_insert ON __alkstore_jobs`),
          sql.unsafe(`DROP FUNCTION IF EXISTS test_slow_insert()`)
        )).pipe(Effect.orDie)
  )

describe(`scheduler review — ${pgOwned.name}`, () => {
  // CONTRACT §5 / §8: "Guarantee: at-least-once per elapsed boundary while a leader runs"; "runAsStandby … try to
  // lead …, run runSchedules until LeadershipLost, repeat … exactly one leads at a time". docs/scheduler-and-outbox.md:
  // "Renew it in a forked fiber every leaderRenewEvery (… at least three times per TTL)".
  // On PostgreSQL the tick's fence (`holds … FOR SHARE` on the lease row) blocks the leader's *own* renewal
  // (`UPDATE … SET expires_at = greatest(…)` needs a lock that conflicts with FOR SHARE) until the tick commits. A tick
  // that runs longer than the lease's renewal budget (ttl − renewal spacing − margin) therefore makes `keepRenewed`'s
  // lapse fire mid-tick: the leader fails with LeadershipLost, its tick is interrupted and rolled back, the next tenure
  // runs the same tick and loses the same way — a livelock in which no boundary ever fires, although nobody else could
  // have taken the lease while the fenced tick ran. (Here: a 1 s lease renewed every 300 ms, a tick whose insert takes
  // 1.5 s; a real page of 1 000 due schedules × 64 catch-up fires took 1.5–2.7 s on this machine.)
  it.live("a tick that outlasts the lease still commits: the leader's own fence must not starve its renewal", () =>
    Effect.gen(function*() {
      yield* slowJobInserts(1.5)
      const scheduler = yield* Scheduler.Scheduler
      yield* scheduler.schedule("sweep", "@every 1s", "sweeps", {})
      yield* Effect.sleep("1100 millis") // the first boundary has passed
      const standby = yield* Effect.fork(scheduler.runAsStandby)
      let fired = 0
      for (let i = 0; i < 30 && fired === 0; i++) {
        yield* Effect.sleep("200 millis")
        fired = yield* countRows("__alkstore_jobs")
      }
      yield* Fiber.interrupt(standby)
      // 6 s of leadership attempts: four times the slow tick; at least the first boundary must have fired
      expect(fired).toBeGreaterThan(0)
    }).pipe(
      Effect.scoped,
      Effect.provide(pgOwned.store({ leaderTtl: "1 second", leaderRenewEvery: "300 millis", maintenanceEvery: "1 hour" }))
    ), 30_000)
})
