/**
 * Edges of the SQLite engine's own mechanics: the cross-process watcher, two
 * stores on one file in one process, URI-looking file names, a file replaced
 * under a store, job ids.
 */
import { describe, expect, it } from "@effect/vitest"
import * as SqlClient from "@effect/sql/SqlClient"
import { Context, Effect, Fiber, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { Queues, SqliteStore } from "../src/index.js"
import { lastJson, runChild } from "./child.js"
import { freshFile } from "./contract/harness.js"

/** A store's context, built in the current scope (so two stores can live side by side). */
const open = (filename: string, extra: Partial<SqliteStore.SqliteStoreOptions> = {}) =>
  Layer.build(SqliteStore.layer({ filename, fallbackPoll: "1 hour", ...extra }))

const queueIn = (ctx: Context.Context<Queues.Queues>, name: string) =>
  Effect.flatMap(Queues.Queues, (queues) => queues.queue(name)).pipe(Effect.provide(ctx))

const since = (start: number) => performance.now() - start

describe("SQLite engine edges", () => {
  it.live("two stores on one file in one process wake each other's waiters promptly", () =>
    Effect.scoped(Effect.gen(function*() {
      const filename = freshFile("two-stores")
      const a = yield* open(filename)
      const b = yield* open(filename)
      const qa = yield* queueIn(a, "two")
      const qb = yield* queueIn(b, "two")
      for (const [producer, consumer] of [[qa, qb], [qb, qa]] as const) {
        const taker = yield* Effect.fork(consumer.take("w"))
        yield* Effect.sleep("100 millis")
        const start = performance.now()
        const id = yield* producer.enqueue({ n: 1 })
        const handle = yield* Fiber.join(taker)
        const waited = since(start)
        expect(handle.job.id).toBe(id)
        expect(waited).toBeLessThan(300)
        yield* handle.ack
      }
    })), 20_000)

  it.live("two stores on one file: one store's long transaction neither deadlocks nor loses the other's enqueue", () =>
    Effect.scoped(Effect.gen(function*() {
      const filename = freshFile("two-stores-tx")
      const a = yield* open(filename)
      const b = yield* open(filename)
      const qa = yield* queueIn(a, "tx")
      const qb = yield* queueIn(b, "tx")
      const sqlA = Context.get(a, SqlClient.SqlClient)
      // A holds the write lock for 300 ms with an enqueue inside.
      const longTx = yield* Effect.fork(
        sqlA.withTransaction(Effect.zipRight(qa.enqueue({ from: "a" }), Effect.sleep("300 millis")))
      )
      yield* Effect.sleep("20 millis")
      const taker = yield* Effect.fork(qa.take("w"))
      const start = performance.now()
      const idB = yield* qb.enqueue({ from: "b" })
      expect(since(start)).toBeGreaterThan(200) // it waited for A's commit
      yield* Fiber.join(longTx)
      const first = yield* Fiber.join(taker)
      yield* first.ack
      const second = yield* qa.take("w")
      expect([first.job.id, second.job.id]).toContain(idB)
      yield* second.ack
    })), 20_000)

  it.live("a store on a 'file:' name wakes a waiter when another process enqueues (not only at its fallback poll)", () => {
    // better-sqlite3 is built with SQLITE_USE_URI=0: "file:<name>" is an ordinary file of that name.
    const name = `file:edge-${process.pid}-${Date.now()}.db`
    const cleanup = Effect.sync(() => {
      for (const suffix of ["", "-wal", "-shm"]) fs.rmSync(path.resolve(name + suffix), { force: true })
    })
    return Effect.scoped(Effect.gen(function*() {
      yield* Effect.addFinalizer(() => cleanup)
      const store = yield* open(name, { fallbackPoll: "4 seconds" })
      // It is a real file on disk, shared with any other process that opens the same name.
      expect(fs.existsSync(path.resolve(name))).toBe(true)
      const queue = yield* queueIn(store, "cross")
      const taker = yield* Effect.fork(Effect.map(queue.take("parent"), (handle) => ({ handle, at: Date.now() })))
      const out = yield* runChild("test/fixtures/enqueue-once.ts", [name])
      expect(out.code).toBe(0)
      const { committedAt, id } = lastJson<{ id: number; committedAt: number }>(out.stdout)!
      const { at, handle } = yield* Fiber.join(taker)
      expect(handle.job.id).toBe(id)
      const latency = at - committedAt
      expect(latency, `the waiter woke ${latency.toFixed(0)} ms after the other process's commit`).toBeLessThan(1_000)
    }))
  }, 30_000)

  it.live("a relative file name: cross-process waking works", () => {
    const dir = path.dirname(freshFile("x"))
    const relative = path.relative(process.cwd(), path.join(dir, `rel-${process.pid}-${Date.now()}.db`))
    return Effect.scoped(Effect.gen(function*() {
      const store = yield* open(relative, { fallbackPoll: "4 seconds" })
      const queue = yield* queueIn(store, "cross")
      const taker = yield* Effect.fork(Effect.map(queue.take("parent"), (handle) => ({ handle, at: Date.now() })))
      const out = yield* runChild("test/fixtures/enqueue-once.ts", [relative])
      expect(out.code).toBe(0)
      const { committedAt, id } = lastJson<{ id: number; committedAt: number }>(out.stdout)!
      const { at, handle } = yield* Fiber.join(taker)
      expect(handle.job.id).toBe(id)
      expect(at - committedAt).toBeLessThan(1_000)
    }))
  }, 30_000)

  it.live("job ids: the newest job acked, then the store reopened, the next id is still new", () =>
    Effect.gen(function*() {
      const filename = freshFile("ids")
      const first = yield* Effect.scoped(Effect.gen(function*() {
        const q = yield* queueIn(yield* open(filename), "ids")
        yield* q.enqueue({ n: 1 })
        const id = yield* q.enqueue({ n: 2 })
        const h1 = yield* q.take("w")
        yield* h1.ack
        const h2 = yield* q.take("w")
        yield* h2.ack
        return id
      }))
      const next = yield* Effect.scoped(Effect.gen(function*() {
        const q = yield* queueIn(yield* open(filename), "ids")
        return yield* q.enqueue({ n: 3 })
      }))
      expect(next).toBeGreaterThan(first)
    }), 20_000)
})
