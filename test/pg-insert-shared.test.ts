/**
 * PostgreSQL's batch insert of jobs that differ in their payloads alone
 * (`insertShared`, src/internal/pg/queueStatements.ts): the shared values are
 * bound once and the group's round read once. The rows it writes must be the
 * rows one-by-one enqueues write — every column but the id and the queue —
 * with ids in the batch's order, on a queue with limits (rounds) and without.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { Queues } from "../src/index.js"
import { pgOwned, pgSchemaFor } from "./contract/harness.js"

describe("a PostgreSQL batch of jobs sharing every value but the payload", () => {
  const shapes: Record<string, { readonly limits?: Queues.Limits; readonly opts: Queues.EnqueueOpts }> = {
    "due now, no limits": { opts: {} },
    "scheduled, expiring, prioritised, in a group, under limits": {
      limits: { groupConcurrency: 1 },
      opts: { delay: "1 minute", expires: "1 hour", priority: -3, group: "g", maxAttempts: 7 }
    },
    "fair rotation, the default group": { limits: {}, opts: {} }
  }
  for (const [name, { limits, opts }] of Object.entries(shapes)) {
    it.scoped(`writes the rows one-by-one enqueues write (${name}), ids in order`, () => {
      const filename = `pg-insert-shared-${name.replace(/\W+/g, "-")}`
      const schema = pgSchemaFor(filename)
      return Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const sql = yield* SqlClient.SqlClient
        if (limits !== undefined) {
          yield* queues.setLimits("batch", limits)
          yield* queues.setLimits("single", limits)
        }
        const batch = yield* queues.queue("batch")
        const single = yield* queues.queue("single")
        // a live job first, so the batch's rounds continue its group's
        yield* batch.enqueue({ n: -1 }, opts)
        yield* single.enqueue({ n: -1 }, opts)
        const payloads = Array.from({ length: 120 }, (_, n) => ({ n, text: `payload ${n}` }))
        // inside a span, so the batch carries a trace context (one per call: compared apart below)
        const ids = yield* Effect.withSpan(batch.enqueueBatch(payloads, opts), "test.batch")
        for (const payload of payloads) yield* single.enqueue(payload, opts)
        expect(ids).toEqual(ids.map((_, i) => ids[0]! + i))
        const rowsOf = (queue: string) =>
          Effect.map(
            sql.unsafe<Record<string, unknown>>(
              `SELECT * FROM ${schema}.__alkstore_jobs WHERE queue = $1 ORDER BY id`,
              [queue]
            ),
            (rows) => rows.map(({ id: _id, queue: _queue, trace_context: _trace, ...row }) => row)
          )
        const batchRows = yield* rowsOf("batch")
        expect(batchRows).toEqual(yield* rowsOf("single"))
        expect(batchRows.slice(1).map((row) => JSON.parse(String(row.payload)))).toEqual(payloads)
        const traces = yield* sql.unsafe<{ trace_context: string | null }>(
          `SELECT DISTINCT trace_context FROM ${schema}.__alkstore_jobs WHERE queue = 'batch' AND id >= $1`,
          [ids[0]!]
        )
        expect(traces.length).toBe(1)
        expect(traces[0]!.trace_context).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/)
      }).pipe(Effect.provide(pgOwned.store({ filename })))
    })
  }
})
