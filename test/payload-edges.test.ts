/**
 * What goes in and comes out: payload round-trips (plain JSON and
 * Schema-typed), undecodable rows, enqueue option boundaries and the `Job`
 * view a handler reads, on every engine.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Chunk, DateTime, Duration, Effect, Fiber, Option, Schema, Stream } from "effect"
import { Outbox, Queues, Scheduler } from "../src/index.js"
import { engines } from "./contract/harness.js"
import { advance, jobCount, settle, mustClaim, mustGet, queueOf, type StoreServices } from "./contract/support.js"

const nested = (depth: number, wrap: (inner: unknown) => unknown): unknown => {
  let value: unknown = 1
  for (let i = 0; i < depth; i++) value = wrap(value)
  return value
}

const storedText = (id: number) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    Effect.map(
      sql<{ p: string }>`SELECT payload AS p FROM __alkstore_jobs WHERE id = ${id}`,
      (rows) => String(rows[0]!.p)
    ))

/** Strings that must come back byte-for-byte. */
const tricky: ReadonlyArray<readonly [string, unknown]> = [
  ["lone high surrogate", "a\uD800b"],
  ["lone low surrogate", "\uDC00"],
  ["reversed pair", "x\uDC00\uD800y"],
  ["NUL", "a\u0000b"],
  ["only NUL", "\u0000"],
  ["control chars", "\u0001\u001f\u007f\b\f\n\r\t"],
  ["astral", "😀 \u{1F680} \u{10FFFF}"],
  ["BOM and line separators", "\uFEFF\u2028\u2029"],
  ["backslashes and quotes", "\\\"'\\u0000"],
  ["noncharacters", "\uFFFE\uFFFF"],
  ["1e21", 1e21],
  ["0.1+0.2", 0.1 + 0.2],
  ["2**53+2", 2 ** 53 + 2],
  ["MAX_VALUE", Number.MAX_VALUE],
  ["MIN_VALUE", Number.MIN_VALUE],
  ["-MIN_VALUE", -Number.MIN_VALUE],
  ["1e-7", 1e-7],
  ["-1.5e300", -1.5e300],
  ["key with surrogate and NUL", { "\uD800": 1, "\u0000": 2, "": 3, "__proto__x": 4 }],
  ["own __proto__ key", JSON.parse("{\"__proto__\":{\"a\":1},\"b\":2}")],
  ["key order", { b: 1, a: 2, z: { y: 1, x: 2 } }],
  ["null", null],
  ["true", true],
  ["empty string", ""],
  ["empty object", {}],
  ["empty array", []],
  ["mixed", { s: "\uDBFF\uDFFF", n: [1e21, -1e-300, 123456789012345680000], t: [true, false, null] }]
]

for (const engine of engines) {
  describe(`payload edges — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    it.effect("tricky JSON payloads come back exactly (claim, getJob, enqueueBatch)", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("tricky")
        const ids: Array<number> = []
        for (const [label, payload] of tricky) {
          const id = yield* q.enqueue(payload).pipe(Effect.mapError((e) => new Error(`${label}: ${String(e)}`)))
          ids.push(id)
        }
        const batchIds = yield* q.enqueueBatch(tricky.map(([, p]) => p))
        for (const [i, [label, payload]] of tricky.entries()) {
          const job = yield* mustGet(q, ids[i]!)
          expect(job.payload, label).toStrictEqual(payload)
          expect(JSON.stringify(job.payload), label).toBe(JSON.stringify(payload))
          expect(yield* storedText(ids[i]!), label).toBe(JSON.stringify(payload))
          expect(yield* storedText(batchIds[i]!), label).toBe(JSON.stringify(payload))
        }
        for (let i = 0; i < tricky.length * 2; i++) {
          const handle = yield* mustClaim(q, "w")
          const index = ids.indexOf(handle.job.id) >= 0 ? ids.indexOf(handle.job.id) : batchIds.indexOf(handle.job.id)
          const [label, payload] = tricky[index]!
          expect(handle.job.payload, label).toStrictEqual(payload)
          if (typeof payload === "string") expect(handle.job.payload === payload, label).toBe(true)
          if (typeof payload === "number") expect(Object.is(handle.job.payload, payload), label).toBe(true)
        }
      })))

    it.effect("payloads at the depth limit: 1000 levels kept, 1001 refused, nothing written", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("deep")
        const objects1000 = nested(1000, (inner) => ({ a: inner }))
        const arrays1000 = nested(1000, (inner) => [inner])
        const a = yield* q.enqueue(objects1000)
        const b = yield* q.enqueue(arrays1000)
        expect((yield* mustGet(q, a)).payload).toStrictEqual(objects1000)
        expect((yield* mustGet(q, b)).payload).toStrictEqual(arrays1000)
        expect((yield* Effect.flip(q.enqueue(nested(1001, (inner) => [inner]))))._tag).toBe("InvalidPayload")
        expect((yield* Effect.flip(q.enqueue(nested(1001, (inner) => ({ a: inner })))))._tag).toBe("InvalidPayload")
        expect(yield* jobCount).toBe(2)
        // a typed queue over a recursive schema at 1000 levels, both ways
        type Tree = { readonly child: Tree | null }
        const Tree: Schema.Schema<Tree> = Schema.Struct({
          child: Schema.NullOr(Schema.suspend((): Schema.Schema<Tree> => Tree))
        })
        const trees = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("trees", { schema: Tree }))
        let tree: Tree = { child: null }
        for (let i = 1; i < 1000; i++) tree = { child: tree }
        yield* trees.enqueue(tree)
        expect((yield* mustClaim(trees, "w")).job.payload).toStrictEqual(tree)
      })))

    it.effect("a big payload (4 MB of mixed unicode) round-trips", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("big")
        const chunk = "abc\u00e9\u4e2d😀\u0000\"\\"
        const big = { s: chunk.repeat(400_000), list: Array.from({ length: 20_000 }, (_, i) => i * 0.1) }
        const id = yield* q.enqueue(big)
        const handle = yield* mustClaim(q, "w")
        expect(handle.job.id).toBe(id)
        expect(handle.job.payload).toStrictEqual(big)
      })))

    describe("Schema-typed queues", () => {
      const Order = Schema.Struct({ id: Schema.Number, at: Schema.Date, total: Schema.BigInt })

      it.effect("a Schema-typed payload round-trips through its encoded form", () =>
        run(Effect.gen(function*() {
          const orders = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("orders", { schema: Order }))
          const order = { id: 1, at: new Date(1234), total: 2n ** 70n }
          const id = yield* orders.enqueue(order)
          expect((yield* mustGet(orders, id)).payload).toEqual({ id: 1, at: new Date(1234).toISOString(), total: String(2n ** 70n) })
          const handle = yield* mustClaim(orders, "w")
          expect(handle.job.payload).toEqual(order)
          // DateFromString carries an invalid Date faithfully (as "Invalid Date"); Schema.Date refuses it
          const strict = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("strict", { schema: Schema.Date }))
          const bad = yield* Effect.flip(strict.enqueue(new Date(Number.NaN)))
          expect(bad._tag).toBe("InvalidPayload")
          expect(yield* jobCount).toBe(1)
        })))

      it.effect("rows that no longer decode go to dead with the decode error; the claim moves on (claim, claimBatch, take)", () =>
        run(Effect.gen(function*() {
          const plain = yield* queueOf("shifting")
          const bad1 = yield* plain.enqueue({ id: "one", at: "x", total: "1" })
          const good = yield* plain.enqueue({ id: 2, at: new Date(5).toISOString(), total: "7" })
          const bad2 = yield* plain.enqueue(42)
          const bad3 = yield* plain.enqueue({ id: 3, at: new Date(5).toISOString(), total: "not a bigint" })
          const orders = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("shifting", { schema: Order }))
          const handle = yield* mustClaim(orders, "w")
          expect(handle.job.id).toBe(good)
          expect(handle.job.payload).toEqual({ id: 2, at: new Date(5), total: 7n })
          expect(Option.isNone(yield* orders.claim("w"))).toBe(true)
          for (const id of [bad1, bad2, bad3]) {
            const job = yield* mustGet(orders, id)
            expect(job.state).toBe("dead")
            expect(Option.isSome(job.lastError)).toBe(true)
            expect(Option.isSome(job.diedAt)).toBe(true)
          }
          // requeued, they die again on the next claimBatch, which still hands out what decodes
          const dead = yield* orders.dead()
          expect(dead.map((job) => job.id).sort()).toEqual([bad1, bad2, bad3].sort())
          for (const id of [bad1, bad2, bad3]) expect(yield* orders.requeueDead(id)).toBe(true)
          const good2 = yield* plain.enqueue({ id: 4, at: new Date(6).toISOString(), total: "8" })
          const handles = yield* orders.claimBatch("w", 4)
          expect(handles.map((h) => h.job.id)).toEqual([good2])
          expect(Option.isNone(yield* orders.claim("w"))).toBe(true)
          expect((yield* orders.dead()).length).toBe(3)
        })))

      it.effect("undecodable rows between good ones: stream and a busy worker's fused ack-and-claim skip them to dead", () =>
        run(Effect.gen(function*() {
          const plain = yield* queueOf("mixed")
          const payloads = [1, "x", 2, { n: 3 }, 3, null, 4, [5], 5]
          const ids = yield* plain.enqueueBatch(payloads)
          const ints = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("mixed", { schema: Schema.Int }))
          const streamed = yield* ints.stream("w", { batch: 3 }).pipe(
            Stream.tap((handle) => handle.ack),
            Stream.map((handle) => handle.job.payload),
            Stream.take(5),
            Stream.runCollect
          )
          expect(Chunk.toReadonlyArray(streamed)).toEqual([1, 2, 3, 4, 5])
          const dead = yield* ints.dead()
          expect(dead.map((job) => job.id).sort((a, b) => a - b)).toEqual([ids[1], ids[3], ids[5], ids[7]])
          for (const job of dead) {
            expect(Option.getOrUndefined(job.lastError)).toMatch(/Expected/)
            expect(job.attempts).toBe(1)
          }
          // again through process: requeue them and add good ones behind
          for (const job of dead) yield* ints.requeueDead(job.id)
          yield* plain.enqueueBatch([6, "y", 7])
          const seen: Array<number> = []
          const worker = yield* Effect.forkDaemon(ints.process("w", (job) => Effect.sync(() => void seen.push(job.payload))))
          yield* settle
          yield* advance("1 second")
          yield* settle
          expect(seen).toEqual([6, 7])
          expect((yield* ints.dead()).length).toBe(5)
          expect(yield* jobCount).toBe(5)
          yield* Fiber.interrupt(worker)
        })))

      it.effect("Schema.optional's undefined property is dropped and decodes back; other encoded undefined is refused", () =>
        run(Effect.gen(function*() {
          const Mail = Schema.Struct({ to: Schema.String, cc: Schema.optional(Schema.String) })
          const mails = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("mail", { schema: Mail }))
          yield* mails.enqueue({ to: "a", cc: undefined })
          expect((yield* mustClaim(mails, "w")).job.payload).toEqual({ to: "a" })
          const Strict = Schema.Struct({ to: Schema.String, cc: Schema.UndefinedOr(Schema.String) })
          const strict = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("strict-mail", { schema: Strict }))
          const exit = yield* Effect.either(strict.enqueue({ to: "a", cc: undefined }))
          if (exit._tag === "Right") {
            // stored without cc: it must decode back to what was enqueued
            const back = (yield* mustClaim(strict, "w")).job.payload
            expect(back).toStrictEqual({ to: "a", cc: undefined })
          } else expect(exit.left._tag).toBe("InvalidPayload")
          const Listy = Schema.Array(Schema.UndefinedOr(Schema.Number))
          const lists = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("lists", { schema: Listy }))
          expect((yield* Effect.flip(lists.enqueue([1, undefined])))._tag).toBe("InvalidPayload")
          const Neg = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("neg", { schema: Schema.Number }))
          expect((yield* Effect.flip(Neg.enqueue(-0)))._tag).toBe("InvalidPayload")
        })))

      it.effect("a row whose decode error text carries a NUL (a filter's own message) still goes to dead, on every engine", () =>
        run(Effect.gen(function*() {
          const plain = yield* queueOf("filtered")
          // NUL round-trips in payloads (JSON escapes it); the filter's message quotes the value as is
          const bad = yield* plain.enqueue("bad\u0000value")
          const good = yield* plain.enqueue("ok-1")
          const Tagged = Schema.String.pipe(Schema.filter((s) => s.startsWith("ok") || `not ok: ${s}`))
          const typed = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("filtered", { schema: Tagged }))
          const claimed = yield* Effect.either(typed.claim("w"))
          expect(claimed._tag === "Left" ? `claim failed: ${String(claimed.left)} (${String((claimed.left as { cause?: unknown }).cause)})` : "claimed")
            .toBe("claimed")
          if (claimed._tag === "Right") expect(Option.map(claimed.right, (h) => h.job.id)).toEqual(Option.some(good))
          const job = yield* mustGet(typed, bad)
          expect(job.state).toBe("dead")
          expect(Option.getOrUndefined(job.lastError)).toContain("not ok: bad")
        })))

      it.effect("claimBatch meeting a row whose decode error carries a NUL hands out the good rows it claimed", () =>
        run(Effect.gen(function*() {
          const plain = yield* queueOf("filtered-batch")
          const ids = yield* plain.enqueueBatch(["ok-1", "bad\u0000value", "ok-2", "ok-3"])
          const Tagged = Schema.String.pipe(Schema.filter((s) => s.startsWith("ok") || `not ok: ${s}`))
          const typed = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("filtered-batch", { schema: Tagged }))
          const claimed = yield* Effect.either(typed.claimBatch("w", 10))
          const states = []
          for (const id of ids) {
            const job = yield* mustGet(typed, id)
            states.push(`${job.state}/${job.attempts}`)
          }
          expect({
            claim: claimed._tag === "Left" ? `failed: ${claimed.left._tag}` : claimed.right.map((h) => h.job.payload),
            states
          }).toEqual({ claim: ["ok-1", "ok-2", "ok-3"], states: ["claimed/1", "dead/1", "claimed/1", "claimed/1"] })
        })))

      it.effect("a worker (process) never hands an undecodable row to its handler", () =>
        run(Effect.gen(function*() {
          const plain = yield* queueOf("proc")
          yield* plain.enqueue("not an order")
          const good = yield* plain.enqueue({ id: 9, at: new Date(9).toISOString(), total: "9" })
          const orders = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("proc", { schema: Order }))
          const seen: Array<unknown> = []
          const handler = (job: Queues.Job<typeof Order.Type>) => Effect.sync(() => void seen.push(job.payload))
          const fiber = yield* Effect.forkDaemon(orders.process("w", handler))
          yield* settle
          yield* advance("1 second")
          yield* settle
          expect(seen).toEqual([{ id: 9, at: new Date(9), total: 9n }])
          expect(Option.isNone(yield* orders.getJob(good))).toBe(true)
          expect((yield* orders.dead()).length).toBe(1)
          yield* Fiber.interrupt(fiber)
        })))
    })

    it.effect("a throwing getter or a throwing Proxy is InvalidPayload everywhere, nothing written", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("throwing")
        const getter = Object.defineProperty({}, "boom", {
          enumerable: true,
          get() {
            throw new Error("getter")
          }
        })
        const proxy = new Proxy({ a: 1 }, {
          ownKeys() {
            throw new Error("ownKeys")
          }
        })
        const schemaQ = yield* Effect.flatMap(Queues.Queues, (queues) => queues.queue("throwing-typed", { schema: Schema.Unknown }))
        const scheduler = yield* Scheduler.Scheduler
        const outbox = yield* Effect.flatMap(Outbox.Outbox, (outboxes) => outboxes.outbox("throwing"))
        for (const [label, payload] of [["getter", getter], ["nested getter", { x: [getter] }], ["proxy", proxy]] as const) {
          for (
            const [where, attempt] of [
              ["enqueue", q.enqueue(payload)],
              ["enqueueBatch", q.enqueueBatch([1, payload])],
              ["typed enqueue", schemaQ.enqueue(payload)],
              ["schedule", scheduler.schedule("s", "@every 1s", "t", payload)],
              ["outbox", outbox.enqueue(payload)]
            ] as const
          ) {
            const exit = yield* Effect.exit(attempt as Effect.Effect<unknown, { _tag: string }>)
            expect(exit._tag === "Failure" && exit.cause._tag === "Fail" ? exit.cause.error._tag : String(exit), `${label} ${where}`)
              .toBe("InvalidPayload")
          }
        }
        expect(yield* jobCount).toBe(0)
      })))

    describe("enqueue options at their boundaries", () => {
      it.effect("every DurationInput form is accepted for delay and expires", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("durations")
          const at = DateTime.toEpochMillis(yield* DateTime.now)
          const delays: ReadonlyArray<readonly [Duration.DurationInput, number]> = [
            [0, 0],
            [1, 1],
            [0.5, 1],
            [1000n * 1000n, 1],
            [1n, 1],
            [[1, 500_000_000], 1500],
            [[0, 1], 1],
            ["1 second", 1000],
            ["2 seconds", 2000],
            ["1.5 seconds", 1500],
            ["3 millis", 3],
            ["1 nano", 1],
            ["1 week", 7 * 86_400_000],
            ["0 seconds", 0],
            [Duration.seconds(2), 2000],
            [Duration.nanos(1n), 1],
            [Duration.zero, 0]
          ]
          for (const [delay, millis] of delays) {
            const id = yield* q.enqueue("x", { delay }).pipe(Effect.mapError((e) => new Error(`${String(delay)}: ${String(e)}`)))
            const job = yield* mustGet(q, id)
            expect(DateTime.toEpochMillis(job.runAt) - at, String(delay)).toBe(millis)
          }
          for (const [expires, millis] of delays) {
            if (millis === 0) continue
            const id = yield* q.enqueue("x", { expires })
            const job = yield* mustGet(q, id)
            expect(Option.map(job.expiresAt, DateTime.toEpochMillis), String(expires)).toEqual(Option.some(at + millis))
          }
        })))

      it.effect("runAt as Date, DateTime (Utc and Zoned) and epoch millis; the epoch itself and the latest instant", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("instants", { visibilityTimeout: "1 millis" })
          const zoned = DateTime.unsafeMakeZoned(5_000, { timeZone: "Asia/Tokyo" })
          const inputs: ReadonlyArray<readonly [NonNullable<Queues.EnqueueOpts["runAt"]>, number]> = [
            [new Date(5_000), 5_000],
            [DateTime.unsafeMake(6_000), 6_000],
            [zoned, 5_000],
            [7_000, 7_000],
            [0, 0],
            [8_640_000_000_000_000 - 1, 8_640_000_000_000_000 - 1]
          ]
          for (const [runAt, millis] of inputs) {
            const id = yield* q.enqueue("x", { runAt }).pipe(Effect.mapError((e) => new Error(`${String(runAt)}: ${String(e)}`)))
            expect(DateTime.toEpochMillis((yield* mustGet(q, id)).runAt)).toBe(millis)
          }
          // one more millisecond and the first lease end passes the range
          expect(yield* Effect.flip(q.enqueue("x", { runAt: 8_640_000_000_000_000 }))).toMatchObject({
            _tag: "InvalidOptions",
            field: "runAt"
          })
        })))

      it.effect("bad values of every option are typed errors, nothing written", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("bad")
          const cases: ReadonlyArray<readonly [string, unknown]> = [
            ["priority", { priority: "1" }],
            ["priority", { priority: null }],
            ["priority", { priority: 1n }],
            ["maxAttempts", { maxAttempts: "3" }],
            ["maxAttempts", { maxAttempts: Number.MAX_SAFE_INTEGER + 2 }],
            ["delay", { delay: null }],
            ["delay", { delay: "1e3 seconds" }],
            ["delay", { delay: "1 second " }],
            ["delay", { delay: " 1 second" }],
            ["delay", { delay: "1 fortnight" }],
            ["delay", { delay: "1seconds" }],
            ["delay", { delay: "-0.5 seconds" }],
            ["delay", { delay: -1n }],
            ["delay", { delay: [1, Number.NaN] }],
            ["delay", { delay: [Number.POSITIVE_INFINITY, 0] }],
            ["delay", { delay: [1] }],
            ["delay", { delay: {} }],
            ["delay", { delay: Duration.infinity }],
            ["delay", { delay: "50000001 days" }],
            ["delay", { delay: 10n ** 30n }],
            ["expires", { expires: "Infinity seconds" }],
            ["expires", { expires: Duration.zero }],
            ["runAt", { runAt: "2024-01-01" }],
            ["runAt", { runAt: null }],
            ["runAt", { runAt: 8_640_000_000_000_001 }],
            ["runAt", { runAt: new Date(-1) }],
            ["runAt", { runAt: -0.5 }],
            ["key", { key: 5 }],
            ["key", { key: "\u0000" }],
            ["key", { key: "\uD800" }],
            ["key", { key: "é".repeat(501) }],
            ["group", { group: "" }],
            ["group", { group: "\u0000" }],
            ["group", { group: "\uDFFF" }],
            ["group", { group: "x".repeat(1001) }],
            ["group", { group: 1 }]
          ]
          for (const [field, opts] of cases) {
            const exit = yield* Effect.exit(q.enqueue("x", opts as Queues.EnqueueOpts))
            const label = `${field}: ${JSON.stringify(opts, (_, v) => (typeof v === "bigint" ? `${v}n` : v))}`
            expect(exit._tag, label).toBe("Failure")
            if (exit._tag === "Failure") {
              const error = exit.cause._tag === "Fail" ? exit.cause.error : exit.cause
              expect(error, label).toMatchObject({ _tag: "InvalidOptions", field })
            }
            const batch = yield* Effect.exit(q.enqueueBatch(["x"], opts as Queues.EnqueueOpts))
            expect(batch._tag === "Failure" && batch.cause._tag === "Fail" ? batch.cause.error : batch, label)
              .toMatchObject({ _tag: "InvalidOptions", field })
          }
          expect(yield* jobCount).toBe(0)
        })))

      it.effect("null as the options object: a typed outcome (like stream, process, dead, schedule), never a defect", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("null-opts")
          const queues = yield* Queues.Queues
          const outboxes = yield* Outbox.Outbox
          const scheduler = yield* Scheduler.Scheduler
          // the other entry points read their options with `opts?.`: null is "no options" there
          expect(yield* scheduler.schedule("s", "@every 1s", "t", 1, null as never)).toMatchObject({ name: "s" })
          expect(yield* q.dead(null as never)).toEqual([])
          const attempts = [
            ["enqueue", q.enqueue("x", null as never)],
            ["enqueueBatch", q.enqueueBatch(["x"], null as never)],
            ["queue", queues.queue("other", null as never)],
            ["outbox", outboxes.outbox("other", null as never)]
          ] as const
          const outcomes: Record<string, string> = {}
          for (const [label, attempt] of attempts) {
            const exit = yield* Effect.exit(attempt as Effect.Effect<unknown, unknown>)
            outcomes[label] = exit._tag === "Success" || exit.cause._tag === "Fail"
              ? "ok"
              : `defect: ${String(exit.cause._tag === "Die" ? exit.cause.defect : exit.cause._tag)}`
          }
          expect(outcomes).toEqual({ enqueue: "ok", enqueueBatch: "ok", queue: "ok", outbox: "ok" })
        })))

      it.effect("boundary values are accepted: key and group of exactly 1000 bytes, maxAttempts 1 and MAX_SAFE, whitespace group", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("good")
          const key = "é".repeat(500)
          const id = yield* q.enqueue("x", { key, group: "😀".repeat(250), maxAttempts: Number.MAX_SAFE_INTEGER })
          expect((yield* mustGet(q, id)).maxAttempts).toBe(Number.MAX_SAFE_INTEGER)
          expect(yield* q.enqueue("y", { key })).toBe(id)
          yield* q.enqueue("z", { group: " ", maxAttempts: 1, priority: -0 })
          expect(yield* jobCount).toBe(2)
        })))
    })

    describe("the Job view", () => {
      it.effect("handle.job agrees with getJob field by field, and JSON.stringify gives the whole job", () =>
        run(Effect.gen(function*() {
          const q = yield* queueOf("view", { visibilityTimeout: "7 seconds", backoffBase: "3 seconds", maxAttempts: 4 })
          yield* advance("1 second")
          const id = yield* q.enqueue({ x: "\uD800" }, { priority: 5, expires: "1 hour", group: "g" })
          yield* advance("1 second")
          const handle = yield* mustClaim(q, "worker-😀")
          const job = handle.job
          const stored = yield* mustGet(q, id)
          const fields = [
            "id", "queue", "payload", "state", "priority", "runAt", "attempts", "maxAttempts", "visibilityTimeout",
            "backoffBase", "expiresAt", "claimedUntil", "workerId", "createdAt", "lastError", "diedAt"
          ] as const
          for (const field of fields) expect(job[field], field).toEqual(stored[field])
          expect(job.state).toBe("claimed")
          expect(job.workerId).toEqual(Option.some("worker-😀"))
          expect(DateTime.isDateTime(job.runAt) && DateTime.isUtc(job.runAt)).toBe(true)
          expect(Option.map(job.claimedUntil, DateTime.toEpochMillis)).toEqual(Option.some(2000 + 7000))
          expect(Duration.toMillis(job.visibilityTimeout)).toBe(7000)
          expect(JSON.parse(JSON.stringify(job))).toEqual(JSON.parse(JSON.stringify(stored)))
          // after a retry, a fresh claim's view carries the error
          expect(yield* handle.retry("boom \u0000", 0)).toBe("retried")
          const again = yield* mustClaim(q, "w2")
          expect(again.job.lastError).toEqual(Option.some("boom \uFFFD"))
          expect(again.job.attempts).toBe(2)
        })))
    })

    it.effect("error text with a lone surrogate reads back the same on every engine (one U+FFFD per lone unit)", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("surrogate-errors", { maxAttempts: 5 })
        const id = yield* q.enqueue("x")
        expect(yield* (yield* mustClaim(q, "w")).retry("a\uD800b\uDC00c", 0)).toBe("retried")
        expect(Option.getOrUndefined((yield* mustGet(q, id)).lastError)).toBe("a\uFFFDb\uFFFDc")
        expect(yield* (yield* mustClaim(q, "w")).fail(new Error("boom \uD83D"))).toBe(true)
        expect(Option.getOrUndefined((yield* mustGet(q, id)).lastError)).toMatch(/^(Error: )?boom \uFFFD$/)
      })))

    describe("scheduler and outbox payloads", () => {
      it.effect("a schedule's payload and an outbox's payload come back exactly", () =>
        run(Effect.gen(function*() {
          const scheduler = yield* Scheduler.Scheduler
          const payload = { s: "\uD800\u0000😀", n: [1e21, 0.1 + 0.2, 2 ** 60] }
          const schedule = yield* scheduler.schedule("tick", "@every 1s", "ticks", payload)
          expect(schedule.payload).toStrictEqual(payload)
          expect((yield* Effect.flip(scheduler.schedule("tick2", "@every 1s", "ticks", { d: new Date(0) })))._tag)
            .toBe("InvalidPayload")
          const outboxes = yield* Outbox.Outbox
          const outbox = yield* outboxes.outbox("hooks")
          const id = yield* outbox.enqueue(payload)
          expect(Option.map(yield* outbox.getJob(id), (job) => job.payload)).toStrictEqual(Option.some(payload))
          const delivered: Array<unknown> = []
          expect(yield* outbox.runOnce("w", (job) => Effect.sync(() => void delivered.push(job.payload)))).toBe(true)
          expect(delivered).toStrictEqual([payload])
          expect((yield* Effect.flip(outbox.enqueue(-0)))._tag).toBe("InvalidPayload")
        })))
    })
  })
}

