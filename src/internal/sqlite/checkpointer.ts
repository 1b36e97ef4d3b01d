import { Effect } from "effect"
import { createRequire } from "node:module"
import { Worker } from "node:worker_threads"

/**
 * Checkpoints the WAL from a worker thread. SQLite's automatic checkpoint
 * runs inside whichever commit crosses the threshold, with an fsync of the
 * WAL and the database on the event loop: milliseconds that land on one
 * unlucky enqueue or claim (the p99), and ~30 µs per job on average. Here
 * the store's own connection has `wal_autocheckpoint = 0` and a thread with
 * its own connection runs `PASSIVE` checkpoints (which never block readers
 * or writers) every `everyMillis`.
 */
const workerSource = `
const { workerData, parentPort } = require("node:worker_threads")
const Database = require(workerData.driver)
const db = new Database(workerData.filename, { timeout: 0 })
const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)")
const tick = () => { try { checkpoint.all() } catch {} }
const timer = setInterval(tick, workerData.everyMillis)
parentPort.on("message", () => { clearInterval(timer); tick(); db.close(); parentPort.close() })
`

export const startCheckpointer = (filename: string, everyMillis: number) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const driver = createRequire(import.meta.url).resolve("better-sqlite3")
      const worker = new Worker(workerSource, { eval: true, workerData: { filename, everyMillis, driver } })
      worker.unref()
      return worker
    }),
    (worker) =>
      Effect.async<void>((resume) => {
        worker.once("exit", () => resume(Effect.void))
        worker.postMessage("stop")
      }).pipe(Effect.timeoutTo({ duration: "2 seconds", onTimeout: () => undefined, onSuccess: () => undefined }))
  )
