import Sqlite from "better-sqlite3"
import { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { DatabaseReplaced } from "../../StoreError.js"
import type { WakeHub } from "../wake.js"
import { fileIdentity } from "./fileIdentity.js"

export interface WatcherOptions {
  readonly filename: string
  /** How often `PRAGMA data_version` is polled while anybody waits, when file-system events are unavailable. */
  readonly pollMillis: number
  /** The safety-net poll while anybody waits, when file-system events arrive. */
  readonly eventFallbackMillis: number
  /** How often the file's identity (device and inode) is checked while anybody waits. */
  readonly identityEveryMillis: number
  /** The file's identity when the store's connection opened it (default: when the watcher starts). */
  readonly identity?: string | undefined
}

/**
 * The store's one cross-process change feed for SQLite: a second, read-only
 * connection whose `PRAGMA data_version` moves whenever any other connection
 * (another process, or the store's own) commits.
 *
 * What prompts a read of `data_version`: a file-system event on the database
 * or its `-wal` file (another process's commit writes the WAL), so an idle
 * waiter costs no timer wake-ups; where events are unavailable, a poll every
 * `pollMillis` while anybody waits. A slow poll stays as a safety net. It
 * also fails the waiters with `DatabaseReplaced` when the file is deleted or
 * renamed over, since nobody could wake them then.
 *
 * Timers here are real time on purpose: they observe the file, not contract time.
 */
export const startWatcher = (hub: WakeHub, options: WatcherOptions) =>
  Effect.acquireRelease(
    Effect.try({
      catch: (cause) => new SqlError({ cause, message: `Failed to watch ${options.filename}: ${String(cause)}` }),
      try: () => {
        const filename = path.resolve(options.filename)
        const base = path.basename(filename)
        const original = options.identity ?? fileIdentity(filename)
        const db = new Sqlite(filename, { readonly: true, fileMustExist: true, timeout: 0 })
        const dataVersion = db.prepare("PRAGMA data_version").pluck()
        let last = dataVersion.get() as number
        let waiting = false
        let closed = false
        let failed = false
        let timer: NodeJS.Timeout | undefined
        let sinceIdentity = 0

        const checkIdentity = () => {
          const now = fileIdentity(filename)
          if (now === original) return
          failed = true
          hub.fail(new DatabaseReplaced({ filename: options.filename, reason: now === undefined ? "deleted" : "replaced" }))
        }
        const checkVersion = () => {
          try {
            const version = dataVersion.get() as number
            if (version !== last) {
              last = version
              hub.signalAll()
            }
          } catch {
            // A busy or vanished file shows up in the identity check.
          }
        }

        // A WAL write is seen before the commit that makes it visible (the
        // wal-index in shared memory moves last, without an event), so an event
        // that finds no new version is followed up a few times, 1 ms apart.
        let followUps = 0
        let followUp: NodeJS.Timeout | undefined
        const onEvent = () => {
          followUp = undefined
          if (closed || failed || !waiting) return
          const before = last
          checkVersion()
          if (last === before && followUps-- > 0) followUp = setTimeout(onEvent, 1).unref()
        }
        // The watch runs only while somebody waits (and a second after): every
        // event it delivers costs the event loop, ~4 µs per commit of the
        // store's own writes, which nobody needs while no one waits.
        let events: fs.FSWatcher | undefined
        let eventsUnavailable = false
        let linger: NodeJS.Timeout | undefined
        const stopEvents = () => {
          linger = undefined
          events?.close()
          events = undefined
        }
        const startEvents = () => {
          if (events !== undefined || eventsUnavailable) return
          try {
            const watcher = fs.watch(path.dirname(filename), { persistent: false }, (event, name) => {
              if (!waiting || closed || failed) return
              if (name !== null && name !== base && name !== `${base}-wal`) return
              if (event === "rename") checkIdentity()
              // Commits write the WAL; writes to the database file itself are checkpoints.
              if (failed || (name === base && event !== "rename")) return
              followUps = 5
              if (followUp === undefined) onEvent()
            })
            watcher.on("error", () => {
              watcher.close()
              if (events === watcher) events = undefined
              eventsUnavailable = true
            })
            events = watcher
          } catch {
            eventsUnavailable = true
          }
          // A commit between the waiter's last look and the watch starting has no event.
          checkVersion()
        }

        const interval = () => (eventsUnavailable ? options.pollMillis : options.eventFallbackMillis)
        const tick = () => {
          timer = undefined
          if (closed || failed || !waiting) return
          sinceIdentity += interval()
          if (sinceIdentity >= options.identityEveryMillis) {
            sinceIdentity = 0
            checkIdentity()
            if (failed) return
          }
          checkVersion()
          schedule()
        }
        const schedule = () => {
          if (timer === undefined && !closed) timer = setTimeout(tick, interval()).unref()
        }
        hub.onWaiting((now) => {
          waiting = now
          if (closed) return
          if (now) {
            if (linger !== undefined) clearTimeout(linger)
            linger = undefined
            startEvents()
            schedule()
          } else if (events !== undefined && linger === undefined) {
            linger = setTimeout(stopEvents, 1_000).unref()
          }
        })
        return {
          close: () => {
            closed = true
            if (timer !== undefined) clearTimeout(timer)
            if (followUp !== undefined) clearTimeout(followUp)
            if (linger !== undefined) clearTimeout(linger)
            events?.close()
            db.close()
          }
        }
      }
    }),
    (watcher) => Effect.sync(watcher.close)
  )
