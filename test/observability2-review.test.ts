/**
 * Review of docs/observability.md (round 2): span outcomes and exact metric counts, on every engine.
 * Each test failed on the code before its fix, because of a defect.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Exit, Fiber, Layer, Metric, Option, Schema, type Tracer } from "effect"
import { EffectStores, Queues, Telemetry } from "../src/index.js"
import { engines } from "./contract/harness.js"
import { collectingTracer, counts, freshQueue } from "./contract/telemetry.js"
import { eventually, mustClaim, queueOf } from "./contract/support.js"

const attribute = (span: Tracer.Span, key: string) => span.attributes.get(key)

for (const engine of engines) {
  describe(`observability review 2 — ${engine.name}`, () => {
    // docs/observability.md, Spans: "`alkstore.queue.process` | consumer | each job a `process` worker runs … |
    // … `alkstore.outcome` (`acked`/`retried`/`dead`/`released`/`lost` …)". The handler is given the job's handle
    // (`process(workerId, (job, handle) => …)`); one that settles its claim itself (here `handle.ack`) completed the
    // job, yet the worker's fused ack + claim then finds the row gone and the job's span reports `lost` — the outcome
    // that means another worker took the job over.
    it.effect("a process handler that acks its own handle: the job's span says acked, not lost", () => {
      const { named, tracer } = collectingTracer()
      return Effect.gen(function*() {
        const name = freshQueue("self-acked")
        const queue = yield* queueOf(name)
        const id = yield* queue.enqueue({ n: 1 })
        const worker = yield* Effect.fork(queue.process("w", (_job, handle) => Effect.asVoid(handle.ack)))
        yield* eventually(Effect.sync(() => expect(named("alkstore.queue.process")[0]?.status._tag).toBe("Ended")))
        yield* Fiber.interrupt(worker)
        expect(Option.isNone(yield* queue.getJob(id))).toBe(true) // done
        expect((yield* counts(name)).acked).toBe(1)
        expect(named("alkstore.queue.process").map((span) => attribute(span, "alkstore.outcome"))).toEqual(["acked"])
      }).pipe(Effect.provide(engine.store()), Effect.withTracer(tracer))
    })

    // docs/observability.md, Metrics: "`alkstore.queue.acked` | counter | claims acked: the job is done". The
    // PersistedQueue store settles concurrent takes in one shared transaction and, when that transaction fails,
    // runs each settlement again alone (src/internal/effectStores/settlement.ts). The acks of the rolled-back
    // attempt were already counted, so every good ack of the batch is counted twice: 2 jobs done, `acked` 4.
    // (Here one element's delete fails by a trigger: any storage failure of one settle in the batch does the same.
    // The trigger matches the element `{"n":666}` itself: a stored element's random id may contain "666" too, which
    // poisoned a good element in ~1.5% of runs.)
    it.effect("PersistedQueue: a shared settle transaction that fails and is re-run alone counts each ack once", () => {
      const layer = PersistedQueue.layer.pipe(
        Layer.provideMerge(EffectStores.layerPersistedQueueStore()),
        Layer.provideMerge(engine.store({ fallbackPoll: "1 hour" }))
      )
      return Effect.gen(function*() {
        const name = freshQueue("shared-settle")
        const sql = yield* SqlClient.SqlClient
        if (engine.capabilities.postgres) {
          yield* sql.unsafe(`CREATE OR REPLACE FUNCTION review_poison() RETURNS trigger LANGUAGE plpgsql
            AS $$ BEGIN IF OLD.payload::text LIKE '%"n":666}%' THEN RAISE EXCEPTION 'poison'; END IF; RETURN OLD; END $$`)
          yield* sql.unsafe(
            `CREATE TRIGGER review_poison BEFORE DELETE ON __alkstore_jobs FOR EACH ROW EXECUTE FUNCTION review_poison()`
          )
        } else {
          yield* sql.unsafe(`CREATE TRIGGER review_poison BEFORE DELETE ON __alkstore_jobs
            WHEN old.payload LIKE '%"n":666}%' BEGIN SELECT RAISE(ABORT, 'poison'); END`)
        }
        const queue = yield* PersistedQueue.make({ name, schema: Schema.Struct({ n: Schema.Number }) })
        yield* queue.offer({ n: 1 })
        yield* queue.offer({ n: 2 })
        yield* queue.offer({ n: 666 })
        // three takes hold their elements together, then all succeed: their acks share one transaction
        const gate = yield* Deferred.make<void>()
        let holding = 0
        const takes = yield* Effect.fork(Effect.all(
          [0, 1, 2].map(() =>
            Effect.exit(queue.take(() => Effect.zipRight(Effect.sync(() => holding++), Deferred.await(gate))))
          ),
          { concurrency: "unbounded" }
        ))
        yield* eventually(Effect.sync(() => expect(holding).toBe(3)))
        yield* Deferred.succeed(gate, undefined)
        const exits = yield* Fiber.join(takes)
        expect(exits.filter(Exit.isSuccess).length).toBe(2)
        // two jobs were acked (the poisoned one could not be)
        const stats = yield* Effect.flatMap(Effect.flatMap(Queues.Queues, (q) => q.queue(name)), (q) => q.stats)
        expect(stats).toMatchObject({ pending: 0, claimed: 1 })
        expect((yield* counts(name)).acked).toBe(2)
      }).pipe(Effect.scoped, Effect.provide(layer))
    })

    // docs/observability.md, Cost: "a few synchronous metric updates (a counter per operation, a histogram entry per
    // claimed job)"; Metrics: "`alkstore.queue.wait_ms` | histogram | from due … to claim" and "`alkstore.queue.dead`
    // … an undecodable payload". A row whose payload fails the queue's Schema is not a claim handed out (`claimed` does
    // not count it, like a candidate met expired or spent), yet it gets a `wait_ms` entry (and would count a lease
    // lapse): the histogram's count no longer matches the claims.
    it.effect("an undecodable payload gets no wait_ms entry: one entry per claim counted", () =>
      Effect.gen(function*() {
        const name = freshQueue("undecodable")
        const raw = yield* queueOf(name)
        yield* raw.enqueue({ n: "not a number" })
        yield* raw.enqueue({ n: 2 })
        const typed = yield* (yield* Queues.Queues).queue(name, { schema: Schema.Struct({ n: Schema.Number }) })
        const handle = yield* mustClaim(typed, "w")
        expect(handle.job.payload).toEqual({ n: 2 })
        expect(yield* counts(name)).toMatchObject({ claimed: 1, dead: 1 })
        const wait = yield* Metric.value(Metric.tagged(Telemetry.metrics.wait, "queue", name))
        expect(wait.count).toBe(1)
      }).pipe(Effect.provide(engine.store())))
  })
}
