/**
 * The SQLite watcher between two waits (src/internal/sqlite/watcher.ts): its file-system watch lingers a
 * second after the last waiter stopped waiting, and ignores the events it sees meanwhile (nobody to wake).
 * A waiter reads, then waits: another process's commit between that read and the wait's start came while
 * nobody waited, so its event was ignored. The next wait must look at `data_version` when it starts, or it
 * learns of that commit only from the safety-net poll (500 ms in the store; here 10 s, so a miss shows).
 * Real time: the watcher observes the file, not contract time.
 */
import { describe, expect, it } from "@effect/vitest"
import Sqlite from "better-sqlite3"
import { Effect, Option } from "effect"
import { startWatcher } from "../src/internal/sqlite/watcher.js"
import { makeWakeHub } from "../src/internal/wake.js"
import { freshFile } from "./contract/harness.js"

const far = () => Date.now() + 60_000

describe("SQLite watcher between waits", () => {
  it.scopedLive("a commit made while nobody waited wakes the next wait when it starts", () =>
    Effect.gen(function*() {
      const filename = freshFile("linger")
      const writer = new Sqlite(filename)
      writer.pragma("journal_mode = WAL")
      writer.exec("CREATE TABLE t (v INTEGER)")
      yield* Effect.addFinalizer(() => Effect.sync(() => writer.close()))
      const hub = makeWakeHub()
      yield* startWatcher(hub, { filename, pollMillis: 1, eventFallbackMillis: 10_000, identityEveryMillis: 60_000 })
      const wait = hub.withTicket("q", (ticket) => ticket.waitUntil(far()))

      // A first wait starts the watch, and another connection's commit wakes it.
      const first = yield* Effect.fork(wait)
      yield* Effect.sleep("50 millis")
      writer.prepare("INSERT INTO t VALUES (1)").run()
      expect(yield* Effect.timeout(first.await, "2 seconds")).toMatchObject({ _tag: "Success", value: "changed" })

      // Nobody waits (the waiter reads between its waits); the watch lingers, and another commit lands.
      writer.prepare("INSERT INTO t VALUES (2)").run()
      yield* Effect.sleep("100 millis")

      // The next wait starts within the linger: that commit is news to it.
      const second = yield* Effect.option(Effect.timeout(wait, "2 seconds"))
      expect(second).toEqual(Option.some("changed"))
    }))
})
