/**
 * SQLite faults (issue 11, item 5): the disk fills (`PRAGMA max_page_count`
 * pinned at the file's size) and the database turns read-only (`PRAGMA
 * query_only`: the process runs as root here, which file modes do not
 * stop). Under each fault every operation either succeeds whole or fails
 * with `SqlError` in the error channel (never a defect, never a hang) and
 * leaves the rows exactly as they were; once the fault clears, the same
 * store (no reopen) works again and the file passes `integrity_check`.
 */
import { SqlClient } from "@effect/sql"
import { Cause, Duration, Effect, Exit, Option } from "effect"
import { Locks, Queues, Scheduler } from "../../src/index.js"
import { createTarget, integrity, withStore } from "../engine.js"
import { type Check, violations as collect } from "../lib/check.js"
import { makeRng } from "../lib/rng.js"

/** Everything the store holds, as one comparable string. */
const snapshot = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.all([
    sql`SELECT id, state, attempts, claim_token, run_at, payload FROM __alkstore_jobs ORDER BY id`,
    sql`SELECT name, owner, token, expires_at FROM __alkstore_locks ORDER BY name`,
    sql`SELECT name, spec, next_fire_at FROM __alkstore_scheduler_tasks ORDER BY name`
  ])).pipe(Effect.map((rows) => JSON.stringify(rows)))

interface Fault {
  readonly name: string
  readonly set: Effect.Effect<void, unknown, SqlClient.SqlClient>
  readonly clear: Effect.Effect<void, unknown, SqlClient.SqlClient>
}

const faults: ReadonlyArray<Fault> = [
  {
    name: "diskFull",
    set: Effect.flatMap(SqlClient.SqlClient, (sql) =>
      Effect.flatMap(sql<{ page_count: number }>`PRAGMA page_count`, ([row]) =>
        sql.unsafe(`PRAGMA max_page_count = ${row!.page_count}`))),
    clear: Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`PRAGMA max_page_count = 1073741823`))
  },
  {
    name: "readOnly",
    set: Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`PRAGMA query_only = ON`)),
    clear: Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe(`PRAGMA query_only = OFF`))
  }
]

export const faultsCheck: Check = {
  name: "faults",
  engines: ["sqlite"],
  run: async (config) => {
    const rng = makeRng(config.seed)
    const v = collect()
    const facts: Record<string, string | number> = {}
    for (const fault of faults) {
      const target = createTarget(config.engine, `fault-${fault.name}`)
      const outcome = await withStore(target, Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue("faults", { visibilityTimeout: "1 minute" })
        const locks = yield* Locks.Locks
        const scheduler = yield* Scheduler.Scheduler
        const big = (n: number) => ({ n, blob: "x".repeat(rng.int(2_000, 20_000)) })
        // some state to protect: pending jobs, a claim, a held lock, a schedule
        yield* queue.enqueueBatch(Array.from({ length: 20 }, (_, i) => big(i)))
        const claimed = Option.getOrThrow(yield* queue.claim("w"))
        const held = Option.getOrThrow(yield* locks.acquire("held", { ttl: "1 minute" }))
        yield* scheduler.schedule("tick", "@every 1m", "faults", {})

        const operations: ReadonlyArray<readonly [string, Effect.Effect<unknown, unknown>]> = [
          ["enqueue", queue.enqueue(big(100))],
          ["enqueueBatch", queue.enqueueBatch(Array.from({ length: 50 }, (_, i) => big(200 + i)))],
          ["enqueueKeyed", queue.enqueue(big(300), { key: "k" })],
          ["claim", queue.claim("w2")],
          ["claimBatch", queue.claimBatch("w2", 5)],
          ["heartbeat", claimed.heartbeat()],
          ["retry", claimed.retry("fault", Duration.seconds(1))],
          ["acquire", locks.acquire("other", { ttl: "1 minute" })],
          ["renew", held.renew()],
          ["withLock", locks.withLock("w", "1 minute", Effect.void)],
          ["schedule", scheduler.schedule("tock", "@every 2m", "faults", { blob: "y".repeat(50_000) })],
          ["maintenance", (yield* Queues.Queues).maintenance]
        ]
        yield* fault.set
        let failedTyped = 0
        let succeeded = 0
        const failedOps: Array<string> = []
        for (const [name, op] of operations) {
          const before = yield* snapshot
          const exit = yield* Effect.exit(Effect.timeout(op, "20 seconds"))
          const after = yield* snapshot
          if (Exit.isSuccess(exit)) {
            succeeded++
            continue
          }
          const failure = Cause.failureOption(exit.cause)
          const tag = Option.map(failure, (e) => (e as { _tag?: string })?._tag)
          if (Option.getOrUndefined(tag) !== "SqlError") {
            v.add(`${fault.name}.${name}`, `not a SqlError: ${Cause.pretty(exit.cause).slice(0, 300)}`)
          } else {
            failedTyped++
            failedOps.push(name)
          }
          if (before !== after) v.add(`${fault.name}.${name}`, "failed yet changed the rows")
        }
        yield* fault.clear
        // the same store works again
        const id = yield* queue.enqueue(big(400))
        const again = yield* queue.claimBatch("w3", 100)
        const acked = yield* queue.ackAll(again)
        const relocked = yield* locks.acquire("after", { ttl: "1 second" })
        if (!acked.every(Boolean) || !again.some((h) => h.job.id === id) || Option.isNone(relocked)) {
          v.add(`${fault.name}.recovery`, "the store did not work again after the fault cleared")
        }
        return { failedTyped, succeeded, failedOps }
      }))
      const check = await withStore(target, integrity(target))
      if (check !== "ok") v.add(`${fault.name}.integrity`, check)
      if (outcome.failedTyped === 0) v.add(`${fault.name}`, "the fault made nothing fail: it was not injected")
      facts[`${fault.name}.sqlErrors`] = outcome.failedTyped
      facts[`${fault.name}.succeeded`] = outcome.succeeded
      facts[`${fault.name}.failedOps`] = outcome.failedOps.join(",")
      facts[`${fault.name}.integrity`] = check
    }
    return { facts: { ...facts, recovered: v.list.some((x) => x.includes("recovery")) ? "no" : "yes" }, violations: v.list }
  }
}
