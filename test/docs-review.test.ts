/**
 * A review of what the user-facing docs promise (README.md, docs/getting-started.md, concepts.md, recipes.md,
 * operations.md, observability.md, guarantees.md), checked against behaviour. Each test names the promise it
 * holds the code to, and failed on the code before its fix.
 */
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Metric, TestClock } from "effect"
import { SqliteStore, Telemetry } from "../src/index.js"
import { startHistory } from "../src/internal/dashboard/history.js"
import { engines } from "./contract/harness.js"
import { counts, freshQueue } from "./contract/telemetry.js"
import { advance, mustClaim, queueOf } from "./contract/support.js"
import { cli } from "./ops-support.js"

describe("docs/observability.md — metrics", () => {
  // "Histogram buckets double from 1 ms to about nine hours."
  it.effect("the wait_ms and handler_ms histograms' buckets double from 1 ms to about nine hours", () =>
    Effect.gen(function*() {
      for (const metric of [Telemetry.metrics.wait, Telemetry.metrics.handler]) {
        const state = yield* Metric.value(Metric.tagged(metric, "queue", freshQueue("buckets")))
        const finite = state.buckets.map(([boundary]) => boundary).filter(Number.isFinite)
        expect(finite[0]).toBe(1)
        expect(finite.every((b, i) => i === 0 || b === finite[i - 1]! * 2)).toBe(true)
        const topHours = finite.at(-1)! / 3_600_000
        expect(topHours).toBeGreaterThan(8)
        expect(topHours).toBeLessThan(10)
      }
    }))
})

for (const engine of engines) {
  describe(`docs/observability.md — counters — ${engine.name}`, () => {
    // "alkstore.queue.dead | jobs moved to dead: fail, a retry with the attempts spent, a claim meeting a spent or
    // expired job, an undecodable payload, expiry"; "alkstore.queue.expired | the part of dead that expired".
    // docs/concepts.md: an expired job is moved to dead by "whoever meets it first — a claim, a keyed enqueue, or
    // maintenance".
    it.effect("a keyed enqueue that moves its expired holder to dead counts it as dead and expired", () =>
      Effect.gen(function*() {
        const name = freshQueue("keyed-expiry")
        const queue = yield* queueOf(name)
        const first = yield* queue.enqueue({ n: 1 }, { key: "k", expires: "5 seconds" })
        yield* advance("6 seconds")
        const second = yield* queue.enqueue({ n: 2 }, { key: "k" })
        expect(second).not.toBe(first)
        const dead = yield* queue.dead()
        expect(dead.map((job) => [job.id, job.lastError._tag === "Some" ? job.lastError.value : null])).toEqual([[first, "expired"]])
        expect(yield* counts(name)).toMatchObject({ enqueued: 2, dead: 1, expired: 1 })
      }).pipe(Effect.provide(engine.store())))

    // The same for requeueDead: a dead job requeued over its key's expired holder buries the holder on the way.
    it.effect("a requeueDead that moves the key's expired holder to dead counts it as dead and expired", () =>
      Effect.gen(function*() {
        const name = freshQueue("requeue-expiry")
        const queue = yield* queueOf(name, { maxAttempts: 1 })
        yield* queue.enqueue({ n: 1 }, { key: "k" })
        const claimed = yield* mustClaim(queue, "w")
        expect(yield* claimed.fail("boom")).toBe(true)
        const holder = yield* queue.enqueue({ n: 2 }, { key: "k", expires: "5 seconds" })
        yield* advance("6 seconds")
        expect(yield* queue.requeueDead(claimed.job.id)).toBe(true)
        const dead = yield* queue.dead()
        expect(dead.map((job) => job.id)).toEqual([holder])
        expect(yield* counts(name)).toMatchObject({ dead: 2, expired: 1 })
      }).pipe(Effect.provide(engine.store())))
  })
}

describe("docs/operations.md — the CLI's failures", () => {
  // "Failures print one line on stderr, starting with `alkstore:`; usage errors print the command's help after it"
  it("a usage error's message is one line on stderr starting with alkstore:, whoever found it", async () => {
    const cases: ReadonlyArray<ReadonlyArray<string>> = [
      ["frobnicate"], // an unknown command
      ["jobs", "--db", "app.db", "--state", "done"], // a malformed state
      ["job", "abc", "--db", "app.db"], // a malformed id
      ["stats"] // a missing --db
    ]
    for (const args of cases) {
      const ran = await cli(args)
      expect(ran.code, args.join(" ")).toBe(2)
      expect(ran.stderr.split("\n")[0], args.join(" ")).toMatch(/^alkstore: /)
    }
  }, 60_000)
})

describe("docs/operations.md — the dashboard", () => {
  // "The dashboard samples the store every `--sample-every` (default 5 s) and keeps the last 1440 readings (two
  // hours at the default)"
  it.scoped("the dashboard's chart samples the store once every --sample-every", () =>
    Effect.gen(function*() {
      const history = yield* startHistory(Duration.seconds(5))
      yield* TestClock.adjust("60 seconds")
      const at = (yield* history.readings).map((reading) => reading.at)
      // the first reading when it starts, then one every 5 s: twelve in a minute
      expect(at).toEqual(Array.from({ length: 13 }, (_, i) => i * 5_000))
    }).pipe(Effect.provide(SqliteStore.layer({ filename: ":memory:" }))))
})
