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
 * or writers) `everyMillis` after the store's connection wrote.
 *
 * How the thread learns of writes: a flag in shared memory, set by every
 * statement of the store's connection; only the first write after a
 * checkpoint wakes the thread (`Atomics.notify`), and an idle store leaves it
 * blocked in `Atomics.wait`, costing nothing. (A file watch wakes the thread
 * on every WAL write, ~20 µs of each commit on a two-core machine; a timer
 * costs an idle store ~0.5 % of a core.)
 */
const workerSource = `
const { workerData, parentPort } = require("node:worker_threads")
const Database = require(workerData.driver)
const db = new Database(workerData.filename, { timeout: 0 })
const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)")
const cells = workerData.cells
const run = () => { try { checkpoint.all() } catch {} }
while (Atomics.load(cells, 1) === 0) {
  Atomics.wait(cells, 0, 0)
  if (Atomics.load(cells, 1) !== 0) break
  Atomics.wait(cells, 1, 0, workerData.everyMillis)
  Atomics.store(cells, 0, 0)
  run()
}
run()
db.close()
parentPort.close()
`

/**
 * The shared flag between the store's connection and its checkpointer:
 * cell 0 is "written since the last checkpoint", cell 1 is "stop".
 */
export interface WalSignal {
  readonly cells: Int32Array
  /** Marks a write; wakes the checkpointer on the first one after a checkpoint. */
  readonly wrote: () => void
}

export const makeWalSignal = (): WalSignal => {
  const cells = new Int32Array(new SharedArrayBuffer(8))
  return {
    cells,
    wrote: () => {
      if (Atomics.compareExchange(cells, 0, 0, 1) === 0) Atomics.notify(cells, 0)
    }
  }
}

export const startCheckpointer = (filename: string, everyMillis: number, signal: WalSignal) =>
  Effect.acquireRelease(
    Effect.try({
      try: () => {
        const driver = createRequire(import.meta.url).resolve("better-sqlite3")
        const worker = new Worker(workerSource, {
          eval: true,
          workerData: { filename, everyMillis, driver, cells: signal.cells }
        })
        worker.unref()
        return worker
      },
      catch: (cause) => new SqlError({ cause, message: `Failed to start the WAL checkpointer: ${String(cause)}` })
    }),
    (worker) =>
      Effect.async<void>((resume) => {
        worker.once("exit", () => resume(Effect.void))
        Atomics.store(signal.cells, 1, 1)
        Atomics.notify(signal.cells, 0)
        Atomics.notify(signal.cells, 1)
      }).pipe(Effect.timeoutTo({ duration: "2 seconds", onTimeout: () => undefined, onSuccess: () => undefined }))
  )
