/**
 * Bad input, property-based: names, payloads and option values either
 * succeed and round-trip exactly, or yield their typed error with every row
 * count unchanged — never a defect, never a name spliced into SQL. On every
 * engine of the harness.
 */
import { SqlClient } from "@effect/sql"
import { fc, test } from "@fast-check/vitest"
import { Cause, DateTime, Effect, Exit, type Layer, ManagedRuntime, Option } from "effect"
import { afterAll, beforeAll, describe, expect } from "vitest"
import { Locks, Queues, Scheduler } from "../../src/index.js"
import { engines, type StoreLayer } from "../contract/harness.js"
import { anyString, expectedNameError, hardPayload, optionValue, plainPayload } from "./arbitraries.js"
import { isPlainJson, sameJson } from "./json.js"
import { fcParams } from "./settings.js"

type Services = Layer.Layer.Success<StoreLayer>

const rowCounts = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  Effect.all([
    sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_jobs`,
    sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_locks`,
    sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_scheduler_tasks`
  ])).pipe(Effect.map((rows) => rows.map((r) => Number(r[0]!.n))))

/** The outcome as data: a success, a typed failure (its tag), or a defect (which fails the property). */
const outcome = <A, E>(exit: Exit.Exit<A, E>) => {
  if (Exit.isSuccess(exit)) return { ok: true as const, value: exit.value }
  const failure = Cause.failureOption(exit.cause)
  if (Option.isNone(failure)) throw new Error(`a defect, not a typed error: ${Cause.pretty(exit.cause)}`)
  return { ok: false as const, tag: (failure.value as { _tag: string })._tag, error: failure.value }
}

let counter = 0

const depthBelow = (value: unknown, limit: number) => {
  let level: Array<unknown> = [value]
  for (let depth = 0; level.length > 0; depth++) {
    if (depth >= limit) return false
    level = level.flatMap((v) => (typeof v === "object" && v !== null ? Object.values(v) : []))
  }
  return true
}

for (const engine of engines) {
  describe(`bad input, property-based — ${engine.name}`, () => {
    let runtime: ManagedRuntime.ManagedRuntime<Services, unknown>
    beforeAll(() => {
      runtime = ManagedRuntime.make(engine.store())
    })
    afterAll(() => runtime.dispose())
    const run = <A, E>(effect: Effect.Effect<A, E, Services>) => runtime.runPromise(Effect.exit(effect))

    test.prop([anyString], fcParams(60))("queue names: bound, never spliced; typed error otherwise", async (name) => {
      const before = await runtime.runPromise(rowCounts)
      const result = outcome(await run(Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue(name)
        const id = yield* queue.enqueue({ n: 1 })
        const stored = Option.getOrThrow(yield* queue.getJob(id))
        const claimed = Option.getOrThrow(yield* queue.claim("w"))
        return { id, storedQueue: stored.queue, claimedId: claimed.job.id, acked: yield* claimed.ack }
      })))
      const expected = expectedNameError(name)
      if (expected === undefined) {
        expect(result).toMatchObject({ ok: true })
        const value = (result as { value: { id: number; storedQueue: string; claimedId: number; acked: boolean } }).value
        expect(value.storedQueue === name).toBe(true)
        expect(value.claimedId).toBe(value.id)
        expect(value.acked).toBe(true)
      } else {
        expect(result.ok, `queue name ${JSON.stringify(name)} should fail with ${expected.join(" or ")}`).toBe(false)
        expect(expected).toContain((result as { tag: string }).tag)
      }
      expect(await runtime.runPromise(rowCounts)).toEqual(before)
    })

    test.prop([anyString, anyString], fcParams(60))("lock names: one row per exact name; typed error otherwise", async (name, other) => {
      const before = await runtime.runPromise(rowCounts)
      const result = outcome(await run(Effect.gen(function*() {
        const locks = yield* Locks.Locks
        const held = Option.getOrThrow(yield* locks.acquire(name, { ttl: "1 minute", owner: "one" }))
        const blocked = yield* locks.acquire(name, { ttl: "1 minute", owner: "two" })
        // a different name (a LIKE pattern of it, a prefix...) is a different lock
        let otherFree = true
        if (other !== name && expectedNameError(other) === undefined) {
          const otherLock = yield* locks.acquire(other, { ttl: "1 minute", owner: "three" })
          otherFree = Option.isSome(otherLock)
          if (Option.isSome(otherLock)) yield* otherLock.value.release
        }
        return { heldName: held.name, blocked: Option.isSome(blocked), otherFree, released: yield* held.release }
      })))
      const expected = expectedNameError(name)
      if (expected === undefined) {
        expect(result).toMatchObject({ ok: true, value: { blocked: false, otherFree: true, released: true } })
        expect((result as { value: { heldName: string } }).value.heldName === name).toBe(true)
      } else {
        expect(result.ok, `lock name ${JSON.stringify(name)} should fail with ${expected.join(" or ")}`).toBe(false)
        expect(expected).toContain((result as { tag: string }).tag)
        expect(await runtime.runPromise(rowCounts)).toEqual(before)
      }
    })

    test.prop([fc.oneof(plainPayload, hardPayload)], fcParams(60))(
      "payloads: exact round trip, or InvalidPayload with nothing written",
      async ({ value: payload }) => {
        const queueName = `payloads-${++counter}`
        const before = await runtime.runPromise(rowCounts)
        const result = outcome(await run(Effect.gen(function*() {
          const queue = yield* (yield* Queues.Queues).queue(queueName)
          const id = yield* queue.enqueue(payload)
          const stored = Option.getOrThrow(yield* queue.getJob(id)).payload
          const claimed = Option.getOrThrow(yield* queue.claim("w"))
          const seen = claimed.job.payload
          yield* claimed.ack
          return { stored, seen }
        })))
        if (result.ok) {
          // what comes back is exactly what went in
          expect(isPlainJson(payload), "a payload JSON cannot carry faithfully was accepted").toBe(true)
          expect(sameJson(result.value.stored, payload), "getJob returns the payload exactly").toBe(true)
          expect(sameJson(result.value.seen, payload), "the claim returns the payload exactly").toBe(true)
        } else {
          // plain JSON of a sane depth always stores
          expect(isPlainJson(payload) && depthBelow(payload, 100)).toBe(false)
          expect(result.tag).toBe("InvalidPayload")
          expect(await runtime.runPromise(rowCounts)).toEqual(before)
        }
      }
    )

    test.prop([anyString, fc.oneof(plainPayload, hardPayload)], fcParams(40))(
      "schedule names and payloads: stored as given, or a typed error with nothing written",
      async (name, { value: payload }) => {
        const before = await runtime.runPromise(rowCounts)
        const result = outcome(await run(Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const stored = yield* scheduler.schedule(name, "@every 1h", "scheduled", payload)
          return { stored, removed: yield* scheduler.unschedule(name) }
        })))
        if (result.ok) {
          expect(expectedNameError(name)).toBeUndefined()
          expect(result.value.stored.name === name).toBe(true)
          expect(sameJson(result.value.stored.payload, payload), "the schedule's payload comes back exactly").toBe(true)
          expect(result.value.removed).toBe(true)
        } else {
          const allowed = [...(expectedNameError(name) ?? []), "InvalidPayload"]
          expect(allowed).toContain(result.tag)
        }
        expect(await runtime.runPromise(rowCounts)).toEqual(before)
      }
    )

    test.prop(
      [fc.record({
        priority: optionValue,
        maxAttempts: optionValue,
        delay: optionValue,
        expires: optionValue,
        visibilityTimeout: optionValue,
        backoffBase: optionValue,
        key: fc.option(anyString, { nil: undefined })
      })],
      fcParams(80)
    )("option values: stored as given and readable, or InvalidOptions with nothing written", async (o) => {
      const queueName = `options-${++counter}`
      const before = await runtime.runPromise(rowCounts)
      const defined = <K extends string>(key: K, value: unknown) => (value === undefined ? {} : { [key]: value })
      const result = outcome(await run(Effect.gen(function*() {
        const queue = yield* (yield* Queues.Queues).queue(queueName, {
          ...defined("visibilityTimeout", o.visibilityTimeout),
          ...defined("backoffBase", o.backoffBase)
        } as Queues.QueueOpts)
        const id = yield* queue.enqueue({ n: 1 }, {
          ...defined("priority", o.priority),
          ...defined("maxAttempts", o.maxAttempts),
          ...defined("delay", o.delay),
          ...defined("expires", o.expires),
          ...defined("key", o.key)
        } as Queues.EnqueueOpts)
        // every read of the row works: the job view, the dead list, the stats
        const job = Option.getOrThrow(yield* queue.getJob(id))
        yield* queue.dead()
        yield* queue.stats
        yield* queue.cancel(id)
        return job
      })))
      if (result.ok) {
        const job = result.value
        if (o.priority !== undefined) expect(job.priority).toBe(o.priority)
        if (o.maxAttempts !== undefined) expect(job.maxAttempts).toBe(o.maxAttempts)
        if (typeof o.delay === "number") {
          // `+ 0`: a delay of -0 is one of 0, and the difference of two instants is never -0 (toBe tells them apart)
          expect(DateTime.toEpochMillis(job.runAt) - DateTime.toEpochMillis(job.createdAt)).toBe(o.delay + 0)
        }
      } else {
        expect(result.tag).toBe("InvalidOptions")
      }
      expect(await runtime.runPromise(rowCounts)).toEqual(before)
    })
  })
}
