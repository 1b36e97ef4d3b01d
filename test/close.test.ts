/**
 * Closing a SQLite store completes under any clock (TestClock included) and
 * leaves nothing behind: no checkpointer thread, no file watch, no timer, no
 * open connection. Engine specific: these are the SQLite engine's own
 * background resources (the checkpointer thread and the change watcher).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, TestClock } from "effect"
import { createHook } from "node:async_hooks"
import * as fs from "node:fs"
import * as path from "node:path"
import { Queues } from "../src/index.js"
import { runChild } from "./child.js"
import { freshFile, sqliteFromClient, sqliteOwned } from "./contract/harness.js"

/** Threads, file watches and timers created by the library's code, while they live. */
const trackResources = () => {
  const live = new Map<number, string>()
  const source = path.resolve("src") + path.sep
  const hook = createHook({
    init(asyncId, type) {
      if (type !== "WORKER" && type !== "FSEVENTWRAP" && type !== "Timeout") return
      const limit = Error.stackTraceLimit
      Error.stackTraceLimit = 40
      const stack = new Error().stack ?? ""
      Error.stackTraceLimit = limit
      const frame = stack.split("\n").find((line) => line.includes(source))
      if (frame !== undefined) live.set(asyncId, `${type} from ${frame.trim()}`)
    },
    destroy(asyncId) {
      live.delete(asyncId)
    }
  })
  hook.enable()
  return {
    live: () => [...live.values()],
    types: () => new Set([...live.values()].map((entry) => entry.split(" ")[0])),
    stop: () => hook.disable()
  }
}

/** This process's open file descriptors on the database file (or its -wal/-shm). */
const openOn = (filename: string): ReadonlyArray<string> => {
  if (!fs.existsSync("/proc/self/fd")) return []
  const open: Array<string> = []
  for (const fd of fs.readdirSync("/proc/self/fd")) {
    try {
      const target = fs.readlinkSync(`/proc/self/fd/${fd}`)
      if (target.startsWith(filename)) open.push(target)
    } catch {
      // closed while we looked
    }
  }
  return open
}

// Handles close asynchronously: their destroy hooks run a loop turn or two later.
const loopTurns = Effect.promise(() => new Promise<void>((resolve) => setImmediate(() => setImmediate(resolve))))

describe("closing a SQLite store", () => {
  for (const engine of [sqliteOwned, sqliteFromClient]) {
    it.effect(`under TestClock leaves no thread, file watch, timer or connection behind — ${engine.name}`, () =>
      Effect.gen(function*() {
        const filename = freshFile("close")
        const tracker = trackResources()
        yield* Effect.gen(function*() {
          const queue = yield* (yield* Queues.Queues).queue("close")
          // A waiter starts the watcher's file watch and its timers.
          const taker = yield* Effect.fork(queue.take("w"))
          yield* TestClock.adjust("1 millis")
          yield* loopTurns
          const whileWaiting = tracker.types()
          expect(whileWaiting.has("FSEVENTWRAP")).toBe(true)
          expect(whileWaiting.has("WORKER")).toBe(engine === sqliteOwned)
          yield* queue.enqueue({ n: 1 })
          yield* (yield* Fiber.join(taker)).ack
          expect(openOn(filename).length).toBeGreaterThan(0)
        }).pipe(Effect.provide(engine.store({ filename })))
        yield* loopTurns
        tracker.stop()
        expect(tracker.live()).toEqual([])
        expect(openOn(filename)).toEqual([])
      }))
  }

  it.live("under TestClock in a program of its own: Node does not exit before the store's scope has closed", () =>
    Effect.gen(function*() {
      const outcome = yield* runChild("test/fixtures/close-under-testclock.ts", [freshFile("close-child")])
      expect(outcome.code).toBe(0)
      expect(outcome.stdout.trim().split("\n")).toEqual(["used", "closed"])
    }), 30_000)
})
