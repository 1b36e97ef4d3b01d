import Sqlite from "better-sqlite3"
import { Effect } from "effect"
import * as fs from "node:fs"
import { DatabaseReplaced } from "../../StoreError.js"
import type { WakeHub } from "../wake.js"

export interface WatcherOptions {
  readonly filename: string
  /** How often `PRAGMA data_version` is read while anybody waits. */
  readonly intervalMillis: number
  /** How often the file's identity (device and inode) is checked while anybody waits. */
  readonly identityEveryMillis: number
}

const identity = (filename: string): string | undefined => {
  try {
    const stat = fs.statSync(filename)
    return `${stat.dev}:${stat.ino}`
  } catch {
    return undefined
  }
}

/**
 * The store's one cross-process change feed for SQLite: a second, read-only
 * connection whose `PRAGMA data_version` moves whenever any other connection
 * (another process, or the store's own) commits. It polls only while some
 * waiter waits, and fails the waiters with `DatabaseReplaced` when the file
 * is deleted or renamed over, since nobody could wake them then.
 *
 * Timers here are real time on purpose: they observe the file, not contract time.
 */
export const startWatcher = (hub: WakeHub, options: WatcherOptions) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const original = identity(options.filename)
      const db = new Sqlite(options.filename, { readonly: true, fileMustExist: true, timeout: 0 })
      const dataVersion = db.prepare("PRAGMA data_version").pluck()
      let last = dataVersion.get() as number
      let timer: NodeJS.Timeout | undefined
      let sinceIdentity = 0
      let closed = false
      const tick = () => {
        timer = undefined
        if (closed) return
        sinceIdentity += options.intervalMillis
        if (sinceIdentity >= options.identityEveryMillis) {
          sinceIdentity = 0
          const now = identity(options.filename)
          if (now !== original) {
            hub.fail(
              new DatabaseReplaced({ filename: options.filename, reason: now === undefined ? "deleted" : "replaced" })
            )
            return
          }
        }
        try {
          const version = dataVersion.get() as number
          if (version !== last) {
            last = version
            hub.signalAll()
          }
        } catch {
          // A busy or vanished file shows up in the identity check; keep watching.
        }
        if (waiting) schedule()
      }
      const schedule = () => {
        if (timer === undefined && !closed) timer = setTimeout(tick, options.intervalMillis).unref()
      }
      let waiting = false
      hub.onWaiting((now) => {
        waiting = now
        if (now) schedule()
      })
      return {
        close: () => {
          closed = true
          if (timer !== undefined) clearTimeout(timer)
          db.close()
        }
      }
    }),
    (watcher) => Effect.sync(watcher.close)
  )
