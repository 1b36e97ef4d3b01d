/**
 * Small helpers shared by the queue and lock contract files.
 */
import { SqlClient } from "@effect/sql"
import { DateTime, Duration, Effect, Option } from "effect"
import { expect } from "@effect/vitest"
import { Queues, type SqliteStore } from "../../src/index.js"

/** What a store layer provides to a contract test. */
export type StoreServices = SqliteStore.Mechanisms | SqlClient.SqlClient

/** Rows in `__alkstore_jobs` (every queue). */
export const jobCount = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_jobs`
  return rows[0]!.n
})

/** Rows in `__alkstore_locks`. */
export const lockCount = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const rows = yield* sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_locks`
  return rows[0]!.n
})

export const ms = (instant: DateTime.DateTime) => DateTime.toEpochMillis(instant)

export const optionalMs = (instant: Option.Option<DateTime.DateTime>) =>
  Option.getOrUndefined(Option.map(instant, ms))

export const durationMs = (duration: Duration.Duration) => Duration.toMillis(duration)

/** A queue handle of the service. */
export const queueOf = (name: string, opts?: Queues.QueueOpts) =>
  Effect.flatMap(Queues.Queues, (queues) => queues.queue(name, opts))

/** The job, which must exist. */
export const mustGet = (queue: Queues.Queue<any>, id: number) =>
  Effect.map(queue.getJob(id), (job) => {
    expect(Option.isSome(job)).toBe(true)
    return Option.getOrThrow(job)
  })

/** A claim that must find a job. */
export const mustClaim = <A>(queue: Queues.Queue<A>, workerId: string) =>
  Effect.map(queue.claim(workerId), (handle) => {
    expect(Option.isSome(handle)).toBe(true)
    return Option.getOrThrow(handle)
  })

/** A claim that must find nothing. */
export const claimsNothing = <A>(queue: Queues.Queue<A>, workerId = "nobody") =>
  Effect.map(queue.claim(workerId), (handle) => {
    expect(Option.isNone(handle)).toBe(true)
  })
