import { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import { createRequire } from "node:module"
import { Worker } from "node:worker_threads"

/**
 * Checkpoints the WAL from a worker thread. SQLite's automatic checkpoint
 * runs inside whichever commit crosses the threshold, with an fsync of the
 * WAL and the database on the event loop: milliseconds that land on one
 * unlucky enqueue or claim (the p99), and ~30 µs per job on average. Here
 * the store's own connection has `wal_autocheckpoint = 0` and a thread with
 * its own connection runs a `PASSIVE` checkpoint (which never blocks readers
 * or writers) `everyMillis` after the WAL was written — prompted by
 * file-system events, so an idle store wakes nobody (a plain interval where
 * events are unavailable).
 */
const workerSource = `
const { workerData, parentPort } = require("node:worker_threads")
const fs = require("node:fs")
const path = require("node:path")
const Database = require(workerData.driver)
const db = new Database(workerData.filename, { timeout: 0 })
const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)")
const run = () => { pending = undefined; try { checkpoint.all() } catch {} }
let pending
let interval
let events
try {
  const wal = path.basename(workerData.filename) + "-wal"
  events = fs.watch(path.dirname(workerData.filename), (event, name) => {
    if ((name === null || name === wal) && pending === undefined) pending = setTimeout(run, workerData.everyMillis)
  })
} catch {
  interval = setInterval(run, workerData.everyMillis)
}
parentPort.on("message", () => {
  if (events) events.close()
  if (interval) clearInterval(interval)
  if (pending) clearTimeout(pending)
  run()
  db.close()
  parentPort.close()
})
`

export const startCheckpointer = (filename: string, everyMillis: number) =>
  Effect.acquireRelease(
    Effect.try({
      try: () => {
        const driver = createRequire(import.meta.url).resolve("better-sqlite3")
        const worker = new Worker(workerSource, { eval: true, workerData: { filename, everyMillis, driver } })
        worker.unref()
        return worker
      },
      catch: (cause) => new SqlError({ cause, message: `Failed to start the WAL checkpointer: ${String(cause)}` })
    }),
    (worker) =>
      Effect.async<void>((resume) => {
        worker.once("exit", () => resume(Effect.void))
        worker.postMessage("stop")
      }).pipe(Effect.timeoutTo({ duration: "2 seconds", onTimeout: () => undefined, onSuccess: () => undefined }))
  )
