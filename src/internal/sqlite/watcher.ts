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
  /**
   * `PRAGMA data_version` of the store's own connection, where the store
   * owns it, or `undefined` while a transaction is open on it (it cannot
   * tell then). It moves only for other connections' commits, so the watcher
   * wakes nobody for the store's own: those signalled their waiters already.
   */
  readonly ownDataVersion?: (() => number | undefined) | undefined
}

/**
 * How the watcher looks again after a WAL write event that found no new
 * commit. A commit writes its frames over 50–250 µs and becomes visible
 * 20–150 µs after its last write, with no event of its own, and on a
 * two-core machine the writer can lose its CPU in between for a millisecond
 * or more. Until `NAP_UNTIL_MILLIS` after the latest event, each look waits
 * `NAP_MILLIS` first (a blocking `Atomics.wait`) and runs on the next turn of
 * the event loop; then 1 ms timers. Napping, not spinning: a look on every
 * turn (1–3 µs each) kept this thread on a core the writer needed — the
 * other process's enqueue took ~2 ms in one sample of ten, its commit
 * became visible after the spin was over and the wake waited the 1 ms
 * timer (docs/performance.md, "Issue 14, the cross-process tail"). At most
 * `NAPS_MAX` naps per round of looks, so a foreign writer's long
 * transaction (an event per frame) blocks this thread for at most ~2 ms at
 * a stretch; I/O callbacks run between the naps. Only while a worker here
 * waits, and only after another process's WAL write.
 */
const NAP_UNTIL_MILLIS = 2
const NAP_MILLIS = 0.1
const NAPS_MAX = 20
/**
 * Naps after a WAL write event within `SEEN_MILLIS` of a look that found a
 * commit. Such an event is most often that commit's later writes, read
 * late, and a full round of naps would be wasted on it; but it can be the
 * next commit's first write: another commit within 2 ms, or the same
 * writer's transaction after its WAL restart (once per checkpoint, a look
 * finds `data_version` moved with no job in it 0.4–0.8 ms before that
 * transaction commits). With no naps, such a commit waited the 1 ms timer:
 * 8 of the 16 slowest of 500 cross-process wakes (docs/performance.md,
 * "Issue 14, the cross-process tail, 2026-12-03"). Each such event gives
 * three naps again, so a commit still being written is looked for until
 * 0.3 ms after its last write.
 */
const JUST_SEEN_NAPS = 3
const napCell = new Int32Array(new SharedArrayBuffer(4))
/** Events this soon after a look found a new commit are most often that commit's later writes (`JUST_SEEN_NAPS`). */
const SEEN_MILLIS = 2

/** The watcher's looks after WAL write events: one round runs until a look finds a commit or it runs out. */
export interface LookRound {
  naps: number
  napUntil: number
  followUps: number
}
export const newLookRound = (): LookRound => ({ naps: 0, napUntil: 0, followUps: 0 })

/**
 * A WAL write event at `at`. A new round (`inFlight` false) gets its naps;
 * events during one extend its time, not its count. An event soon after a
 * commit was seen (`justSeen`) gets `JUST_SEEN_NAPS`, not a round: each look
 * takes a read lock, and a writer restarting the WAL waits out readers.
 */
export const walWritten = (round: LookRound, at: number, justSeen: boolean, inFlight: boolean): void => {
  round.followUps = 5
  round.napUntil = at + NAP_UNTIL_MILLIS
  if (justSeen) round.naps = JUST_SEEN_NAPS
  else if (!inFlight) round.naps = NAPS_MAX
}

/** After a look at `at` that found nothing: nap and look on the next turn, look after a 1 ms timer, or stop. */
export const afterEmptyLook = (round: LookRound, at: number): "nap" | "timer" | "stop" => {
  if (round.naps > 0 && at < round.napUntil) {
    round.naps--
    return "nap"
  }
  if (round.followUps > 0) {
    round.followUps--
    return "timer"
  }
  return "stop"
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
        // WAL is a property of the file (any connection reads it); a rollback journal is not WAL.
        const journalMode = db.prepare("PRAGMA journal_mode").pluck()
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
        const own = options.ownDataVersion
        let ownLast = own?.()
        const checkVersion = () => {
          try {
            const version = dataVersion.get() as number
            if (version !== last) {
              last = version
              // Somebody committed: the store's own connection tells whether it was somebody else.
              const ownNow = own?.()
              if (own !== undefined && ownNow !== undefined && ownNow === ownLast) return
              if (ownNow !== undefined) ownLast = ownNow
              hub.signalAll()
            }
          } catch {
            // A busy or vanished file shows up in the identity check.
          }
        }

        // A WAL write is seen before the commit that makes it visible (the
        // wal-index in shared memory moves last, without an event), and a
        // waiting process reads the event within microseconds, so the first
        // look often finds nothing new. It looks again after a nap, on the
        // next turn of the event loop (`setImmediate`), until
        // `NAP_UNTIL_MILLIS` after the latest event (see the constants), then
        // on 1 ms timers a few times. (Timers alone put half the cross-process
        // wakes a whole timer tick, 1–1.5 ms, behind the commit.) The immediate stays
        // referenced: an unreferenced one does not keep the poll phase from
        // blocking, and would wait for the next timer.
        const round = newLookRound()
        let followUp: NodeJS.Timeout | undefined
        let nextTurn: NodeJS.Immediate | undefined
        let seenAt = Number.NEGATIVE_INFINITY
        const onEvent = () => {
          followUp = undefined
          nextTurn = undefined
          if (closed || failed || !waiting) return
          const before = last
          checkVersion()
          if (last !== before) {
            seenAt = performance.now()
            return
          }
          const next = afterEmptyLook(round, performance.now())
          if (next === "nap") {
            Atomics.wait(napCell, 0, 0, NAP_MILLIS)
            nextTurn = setImmediate(onEvent)
          } else if (next === "timer") followUp = setTimeout(onEvent, 1).unref()
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
          let wal = true
          try {
            wal = journalMode.get() === "wal"
          } catch {
            // A busy file: taken as WAL, the store's own mode (a slower wake at worst, by the fallback poll).
          }
          try {
            const watcher = fs.watch(path.dirname(filename), { persistent: false }, (event, name) => {
              if (!waiting || closed || failed) return
              if (name !== null && name !== base && name !== `${base}-wal` && name !== `${base}-journal`) return
              if (event === "rename" && name !== `${base}-journal`) checkIdentity()
              // In WAL mode commits write the WAL, and writes to the database file itself are checkpoints; with
              // a rollback journal (an application's connection that turned WAL off) a commit writes the
              // database file and ends its journal.
              if (failed || (wal && name === base && event !== "rename")) return
              const at = performance.now()
              walWritten(round, at, at - seenAt < SEEN_MILLIS, nextTurn !== undefined)
              if (nextTurn !== undefined) return
              if (followUp !== undefined) clearTimeout(followUp)
              onEvent()
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
            // A commit between the waiter's last look and its wait had no event it heeded: the watch was not
            // started yet, or lingered ignoring events while nobody waited.
            checkVersion()
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
            if (nextTurn !== undefined) clearImmediate(nextTurn)
            if (linger !== undefined) clearTimeout(linger)
            events?.close()
            db.close()
          }
        }
      }
    }),
    (watcher) => Effect.sync(watcher.close)
  )
