/**
 * PostgreSQL flow control's optimistic claim (src/internal/pg/flowStorage.ts):
 * the walk reads without a lock and its claim statement claims only while the
 * queue's limits row is still the version it read. Here another claimer (or
 * a change of limits) commits exactly between the read and the claim — the
 * race the multi-process ledger tests hit only by chance — and the claim must
 * see it: it falls back to the locked walk, which judges on the fresh state.
 * Without the version check the first claim below would take a second slot
 * of `concurrency: 1`. A claim of one job reads and claims in one statement
 * (`claimFirst`): there the rival's transaction is still open when the
 * statement starts and commits while the statement waits for the limits row.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Clock, Deferred, Effect, Fiber, Layer, Option } from "effect"
import type { FlowOutcome } from "../src/internal/flowOps.js"
import { makeFlowMemory } from "../src/internal/flowMemory.js"
import type { PgExecutor } from "../src/internal/pg/executor.js"
import { makeExecutor } from "../src/internal/pg/executor.js"
import { flowStatements } from "../src/internal/pg/flowStatements.js"
import { makeFlowStorage } from "../src/internal/pg/flowStorage.js"
import { makeNotifier } from "../src/internal/pg/notify.js"
import { Queues } from "../src/index.js"
import { pgOwned, pgSchemaFor } from "./contract/harness.js"

/** An executor that runs `before` once, right before the first flow claim statement. */
const racing = (db: PgExecutor, claimText: string, before: Effect.Effect<unknown, unknown>): PgExecutor => {
  let raced = false
  return {
    ...db,
    all: <A>(text: string, params: Parameters<PgExecutor["all"]>[1]) => {
      if (raced || text !== claimText) return db.all<A>(text, params)
      raced = true
      return Effect.zipRight(Effect.orDie(before), db.all<A>(text, params))
    }
  }
}

const setUp = (filename: string, queue: string, limits: Queues.Limits, jobs: number) =>
  Effect.gen(function*() {
    const schema = pgSchemaFor(filename)
    const queues = yield* Queues.Queues
    yield* queues.setLimits(queue, limits)
    const q = yield* queues.queue(queue)
    yield* q.enqueueBatch(Array.from({ length: jobs }, (_, i) => i))
    const client = yield* SqlClient.SqlClient
    const db = yield* makeExecutor(client, "optimistic-test")
    const flowOf = (executor: PgExecutor) => makeFlowStorage(executor, schema, makeNotifier(schema), makeFlowMemory())
    const claimed = Effect.map(
      client.unsafe<{ n: string }>(`SELECT count(*) AS n FROM ${schema}.__alkstore_jobs WHERE state = 'claimed'`),
      (r) => Number(r[0]!.n)
    )
    return { db, flowOf, claimed, queues, claimText: flowStatements(schema).claim }
  })

describe("PostgreSQL flow control: the optimistic claim", () => {
  it.live("a claim committed between its read and its claim: the claim falls back and keeps concurrency 1", () => {
    const filename = "pg-flow-optimistic-1"
    return Effect.gen(function*() {
      const { claimText, claimed, db, flowOf } = yield* setUp(filename, "race", { concurrency: 1 }, 3)
      const rival = flowOf(db)
      const now = Clock.make() // the claims read it when they judge
      const flow = flowOf(racing(db, claimText, rival.claim("race", "rival", now, 1)))
      const outcome = yield* flow.claim("race", "w", now, 2) // a batch: read, then claim (one job: `claimFirst`, below)
      expect(outcome.limited).toBe(true)
      expect(outcome.limited && outcome.rows.length).toBe(0) // the rival holds the one slot
      expect(yield* claimed).toBe(1)
    }).pipe(Effect.scoped, Effect.provide(pgOwned.store({ filename })))
  })

  it.live("with a slot left, the fallback claims the next job, not the rival's", () => {
    const filename = "pg-flow-optimistic-2"
    return Effect.gen(function*() {
      const { claimText, claimed, db, flowOf } = yield* setUp(filename, "race2", { concurrency: 2 }, 3)
      const rival = flowOf(db)
      const now = Clock.make() // the claims read it when they judge
      const rivalRows: Array<number> = []
      const rivalClaim = Effect.tap(rival.claim("race2", "rival", now, 1), (o) => {
        if (o.limited) rivalRows.push(...o.rows.map((r) => r.id))
      })
      const flow = flowOf(racing(db, claimText, rivalClaim))
      const outcome = yield* flow.claim("race2", "w", now, 2) // could take two; one slot is left
      const mine = outcome.limited ? outcome.rows.map((r) => r.id) : []
      expect(rivalRows.length).toBe(1)
      expect(mine.length).toBe(1)
      expect(mine).not.toContain(rivalRows[0])
      expect(yield* claimed).toBe(2)
    }).pipe(Effect.scoped, Effect.provide(pgOwned.store({ filename })))
  })

  it.live("limits lowered between the read and the claim: the claim obeys the new limits", () => {
    const filename = "pg-flow-optimistic-3"
    return Effect.gen(function*() {
      const { claimText, claimed, db, flowOf, queues } = yield* setUp(filename, "race3", { concurrency: 2 }, 3)
      const now = Clock.make() // the claims read it when they judge
      const first = yield* flowOf(db).claim("race3", "w", now, 1)
      expect(first.limited && first.rows.length).toBe(1)
      const flow = flowOf(racing(db, claimText, queues.setLimits("race3", { concurrency: 1 })))
      const outcome = yield* flow.claim("race3", "w", now, 2) // read: 1 of 2 taken; claims under 1 of 1
      expect(outcome.limited && outcome.rows.length).toBe(0)
      expect(yield* claimed).toBe(1)
    }).pipe(Effect.scoped, Effect.provide(pgOwned.store({ filename })))
  })

  // `claimFirst` reads the limits row's version in its snapshot and takes the row FOR UPDATE only while it is
  // still that version: a rival whose transaction holds the row when the statement starts, and commits while
  // the statement waits for the row, must make it claim nothing (then the locked walk judges afresh).
  const heldOpen = (
    client: SqlClient.SqlClient,
    rival: Effect.Effect<unknown, unknown>,
    mine: Effect.Effect<FlowOutcome, unknown>
  ) =>
    Effect.gen(function*() {
      const holding = yield* Deferred.make<void>()
      const commit = yield* Deferred.make<void>()
      const rivalFiber = yield* Effect.fork(client.withTransaction(
        Effect.zipRight(rival, Effect.zipRight(Deferred.succeed(holding, undefined), Deferred.await(commit)))
      ))
      yield* Deferred.await(holding)
      const mineFiber = yield* Effect.fork(mine)
      yield* Effect.sleep("300 millis")
      const waited = Option.isNone(yield* Fiber.poll(mineFiber)) // waiting for the limits row
      yield* Deferred.succeed(commit, undefined)
      yield* Fiber.join(rivalFiber)
      return { waited, outcome: yield* Fiber.join(mineFiber) }
    })

  it.live("one statement's claim: a rival claim that commits while it waits for the limits row keeps concurrency 1", () => {
    const filename = "pg-flow-optimistic-4"
    return Effect.gen(function*() {
      const { claimed, db, flowOf } = yield* setUp(filename, "race4", { concurrency: 1 }, 3)
      const client = yield* SqlClient.SqlClient
      const schema = pgSchemaFor(filename)
      const now = Clock.make() // the claims read it when they judge
      // The rival claims the last job, not the head this claim reads (as a rival's claim of a job this
      // snapshot shows otherwise would), and rewrites the limits row as every claim does: only the
      // row's version can tell this claim that the one slot went.
      const rival = Effect.zipRight(
        client.unsafe(`UPDATE ${schema}.__alkstore_jobs SET state = 'claimed', claimed_until = ${now.unsafeCurrentTimeMillis() + 3_600_000},
          worker_id = 'rival', attempts = attempts + 1, claim_token = claim_token + 1
          WHERE id = (SELECT max(id) FROM ${schema}.__alkstore_jobs WHERE queue = 'race4')`),
        client.unsafe(`UPDATE ${schema}.__alkstore_flow_limits SET current_round = current_round WHERE queue = 'race4'`)
      )
      const { outcome, waited } = yield* heldOpen(client, rival, flowOf(db).claim("race4", "w", now, 1))
      expect(waited).toBe(true)
      expect(outcome.limited).toBe(true)
      expect(outcome.limited && outcome.rows.length).toBe(0) // the rival holds the one slot
      expect(yield* claimed).toBe(1)
    }).pipe(Effect.scoped, Effect.provide(pgOwned.store({ filename })))
  })

  it.live("one statement's claim: limits lowered by a transaction that commits while it waits: the new limits hold", () => {
    const filename = "pg-flow-optimistic-5"
    return Effect.gen(function*() {
      const { claimed, db, flowOf } = yield* setUp(filename, "race5", { concurrency: 2 }, 3)
      const client = yield* SqlClient.SqlClient
      const schema = pgSchemaFor(filename)
      const now = Clock.make() // the claims read it when they judge
      const first = yield* flowOf(db).claim("race5", "w", now, 1)
      expect(first.limited && first.rows.length).toBe(1)
      const lower = client.unsafe(`UPDATE ${schema}.__alkstore_flow_limits SET concurrency = 1 WHERE queue = 'race5'`)
      const { outcome, waited } = yield* heldOpen(client, lower, flowOf(db).claim("race5", "w", now, 1))
      expect(waited).toBe(true)
      expect(outcome.limited && outcome.rows.length).toBe(0) // read: 1 of 2 taken; judged under 1 of 1
      expect(yield* claimed).toBe(1)
    }).pipe(Effect.scoped, Effect.provide(pgOwned.store({ filename })))
  })

  // The ack of a limited queue's job sends its NOTIFY in the ack's own statement (flowStatements.ackFreeing):
  // another process's waiter held back by the limit wakes on it, long before any deadline of its own.
  it.live("an ack in one process wakes a waiter another process's limit held back", () => {
    const filename = "pg-flow-optimistic-wake"
    return Effect.gen(function*() {
      const other = yield* Layer.build(pgOwned.store({ filename }))
      const queues = yield* Queues.Queues
      yield* queues.setLimits("wake", { concurrency: 1 })
      const q = yield* queues.queue("wake", { visibilityTimeout: "1 hour" })
      yield* q.enqueueBatch(["a", "b"])
      const a = Option.getOrThrow(yield* q.claim("w"))
      const waiter = yield* Effect.fork(Effect.provide(
        Effect.flatMap(Queues.Queues, (qs) => Effect.flatMap(qs.queue("wake", { visibilityTimeout: "1 hour" }), (wq) => wq.take("waiter"))),
        other
      ))
      yield* Effect.sleep("300 millis")
      expect(Option.isNone(yield* Fiber.poll(waiter))).toBe(true) // held back: the one slot is taken
      yield* a.ack
      const b = yield* Fiber.join(waiter).pipe(Effect.timeout("2 seconds"))
      expect(b.job.payload).toBe("b")
    }).pipe(Effect.scoped, Effect.provide(pgOwned.store({ filename })))
  })

  // A worker's step between two jobs acks and claims without a `freed` NOTIFY (docs/flow-control.md, "A
  // worker's fused ack + claim"). Here its ack frees a2 (serial group g1) just as K (group g2, a higher
  // priority, scheduled) falls due: whichever of the step's claim and the other store's waiter (asleep toward
  // K's due instant, held back by the group limit) gets K, the other must get the other job well before the
  // 5 s fallback poll — a freed job left claimable while the waiter sleeps would fail it.
  it.live("a worker's fused ack + claim: a waiter held back in another store misses no freed job", () => {
    const filename = "pg-flow-optimistic-fused"
    return Effect.gen(function*() {
      const other = yield* Layer.build(pgOwned.store({ filename }))
      const queues = yield* Queues.Queues
      yield* queues.setLimits("fused", { groupConcurrency: 1 })
      const q = yield* queues.queue("fused", { visibilityTimeout: "1 hour" })
      yield* q.enqueueBatch(["a1", "a2"], { group: "g1" })
      const started = yield* Deferred.make<void>()
      const done = yield* Deferred.make<void>()
      const seenByWorker: Array<string> = []
      yield* Effect.forkScoped(q.process("worker", (job) =>
        Effect.gen(function*() {
          seenByWorker.push(job.payload as string)
          if (job.payload === "a1") {
            yield* Deferred.succeed(started, undefined)
            yield* Deferred.await(done)
          } else yield* Effect.never
        })))
      yield* Deferred.await(started)
      const waiter = yield* Effect.fork(Effect.provide(
        Effect.flatMap(Queues.Queues, (qs) => Effect.flatMap(qs.queue("fused", { visibilityTimeout: "1 hour" }), (wq) => wq.take("waiter"))),
        other
      ))
      yield* Effect.sleep("300 millis")
      expect(Option.isNone(yield* Fiber.poll(waiter))).toBe(true) // a2 waits for a1: held back
      yield* q.enqueue("K", { group: "g2", priority: 10, delay: "700 millis" })
      yield* Effect.sleep("700 millis")
      yield* Deferred.succeed(done, undefined) // a1's ack frees a2, K falls due: the worker's step takes one
      const got = yield* Fiber.join(waiter).pipe(Effect.timeout("2 seconds"))
      yield* Effect.sleep("200 millis")
      expect([got.job.payload, seenByWorker[1]].sort()).toEqual(["K", "a2"])
    }).pipe(Effect.scoped, Effect.provide(pgOwned.store({ filename })))
  })
})
