/**
 * The worker's way from its last job to its wait, on PostgreSQL, counted
 * statement by statement on the driver: the fused ack + claim that finds
 * nothing is the wait's read, so only the next-deadline read follows it (no
 * separate "anything claimable?" probe: one round trip fewer between a job
 * and the worker's readiness for the next). A commit after that, announced
 * by NOTIFY, still wakes the worker at once (the fallback poll is an hour).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Queue } from "effect"
import Pg from "pg"
import { freshFile, pgOwned } from "./contract/harness.js"
import { queueOf } from "./contract/support.js"

/** Every statement text any `pg` client of this process sends while `use` runs. */
const recordingStatements = <A, E, R>(use: (texts: Array<string>) => Effect.Effect<A, E, R>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      const texts: Array<string> = []
      const original = Pg.Client.prototype.query
      Pg.Client.prototype.query = function(this: Pg.Client, ...args: Array<unknown>) {
        const q = args[0] as string | { text?: string }
        texts.push(typeof q === "string" ? q : (q?.text ?? ""))
        return (original as (...a: Array<unknown>) => unknown).apply(this, args)
      } as typeof original
      return { texts, original }
    }),
    ({ texts }) => use(texts),
    ({ original }) => Effect.sync(() => (Pg.Client.prototype.query = original))
  )

const count = (texts: ReadonlyArray<string>, marker: string) => texts.filter((t) => t.includes(marker)).length

describe("PostgreSQL worker: from the last job to the wait", () => {
  it.live("an empty fused ack + claim is followed by the deadline read only; a later commit still wakes the worker", () => {
    const filename = freshFile("idle-step")
    const enqueueElsewhere = (n: number) =>
      Effect.flatMap(queueOf("idle"), (q) => q.enqueue({ n })).pipe(Effect.provide(pgOwned.store({ filename })))
    return Effect.gen(function*() {
      const queue = yield* queueOf("idle")
      const done = yield* Queue.unbounded<number>()
      const worker = yield* Effect.fork(
        queue.process("w", (job) => Queue.offer(done, (job.payload as { n: number }).n))
      )
      yield* Effect.sleep("200 millis")
      const texts = yield* recordingStatements((texts) =>
        Effect.gen(function*() {
          // another store's commit: this process hears of it once, by NOTIFY (the other store's
          // own statements contain none of the markers counted below)
          yield* enqueueElsewhere(1)
          expect(yield* Queue.take(done).pipe(Effect.timeout("5 seconds"))).toBe(1)
          yield* Effect.sleep("300 millis") // the worker reaches its wait
          return [...texts]
        })
      )
      expect(count(texts, "WITH done AS")).toBe(1) // the fused ack + claim, which found nothing
      expect(count(texts, "IS NOT NULL AS any")).toBe(0) // no separate probe (before: 1)
      expect(count(texts, "SELECT LEAST(")).toBe(1) // the next deadline
      yield* enqueueElsewhere(2)
      expect(yield* Queue.take(done).pipe(Effect.timeout("5 seconds"))).toBe(2)
      yield* Fiber.interrupt(worker)
    }).pipe(Effect.provide(pgOwned.store({ filename, fallbackPoll: "1 hour" })))
  })
})
