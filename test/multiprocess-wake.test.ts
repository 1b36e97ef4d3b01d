import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { spawn } from "node:child_process"
import { freshFile, pgChildDatabase, pgOwned, sqliteOwned } from "./contract/harness.js"
import { Queues } from "../src/index.js"

const runChild = (script: string, args: ReadonlyArray<string>) =>
  Effect.async<string, Error>((resume) => {
    const child = spawn(process.execPath, ["--import", "tsx", script, ...args], { stdio: ["ignore", "pipe", "pipe"] })
    let out = ""
    let err = ""
    child.stdout.on("data", (chunk) => (out += chunk))
    child.stderr.on("data", (chunk) => (err += chunk))
    child.on("exit", (code) =>
      resume(code === 0 ? Effect.succeed(out) : Effect.fail(new Error(`child exited ${code}: ${err}`))))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

const variants = [
  { engine: sqliteOwned, title: "SQLite data_version watcher", database: (filename: string) => Effect.succeed(filename) },
  {
    engine: pgOwned,
    title: "PostgreSQL LISTEN/NOTIFY",
    database: (filename: string) => Effect.promise(() => pgChildDatabase(filename))
  }
] as const

for (const { database, engine, title } of variants) describe(`cross-process waking (${title})`, () => {
  it.live("another process's enqueue wakes a waiting worker within 50 ms", () => {
    const filename = freshFile("cross")
    return Effect.gen(function*() {
      const db = yield* database(filename)
      const queue = yield* (yield* Queues.Queues).queue("cross")
      const latencies: Array<number> = []
      for (let round = 0; round < 3; round++) {
        const taker = yield* Effect.fork(
          Effect.map(queue.take("parent"), (handle) => ({ handle, at: performance.timeOrigin + performance.now() }))
        )
        const out = yield* runChild("test/fixtures/enqueue-once.ts", [db])
        const { committedAt, id } = JSON.parse(out.trim()) as { id: number; committedAt: number }
        const { at, handle } = yield* Fiber.join(taker)
        expect(handle.job.id).toBe(id)
        yield* handle.ack
        latencies.push(at - committedAt)
      }
      console.log("cross-process wake latencies (ms):", latencies.map((l) => l.toFixed(2)).join(", "))
      // The median of three rounds, so one scheduling hiccup of a loaded machine does not decide.
      const median = [...latencies].sort((a, b) => a - b)[1]!
      expect(median).toBeLessThan(50)
    }).pipe(Effect.provide(engine.store({ filename, fallbackPoll: "1 hour" })))
  }, 60_000)
})
