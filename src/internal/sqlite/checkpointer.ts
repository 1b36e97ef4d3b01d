import { SqlError } from "@effect/sql/SqlError"
import { Deferred, Effect, Exit, FiberId } from "effect"
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
 *
 * A PASSIVE checkpoint copies the frames that were in the WAL when it began,
 * and SQLite restarts the WAL from its start only when a write transaction
 * begins with every frame copied. Under a steady stream of commits one lands
 * during every pass, so the WAL grew without end (1 GB after 120 000 enqueues
 * back to back, each slower than the last: 3.9 s for them against 1.6 s). So
 * a pass that finds the WAL at `catchUpFrames` or more (not restarted for
 * that long) runs a second pass for what came during the first and asks the
 * store's connection to catch up (cell 2): before its next statement outside
 * a transaction it runs a RESTART checkpoint itself, which, between its own
 * writes and holding the write lock against other processes' (waiting for it
 * within the connection's `busy_timeout`), copies the last frames, so the
 * next write restarts the WAL. At most once per pass; its fsyncs on the event
 * loop are the price (1.1–1.3 ms at a 5 ms interval, 6–9 ms at the default
 * 200 ms, measured at ~75 000 enqueues/s from one process; 2–14 ms with a
 * second process writing).
 *
 * The thread opens the file by name, so it must find the store's own file
 * there (`fileMustExist`, same device and inode): a file deleted or renamed
 * over in between is not the store's, and the thread fails rather than
 * create or checkpoint somebody else's.
 */
const workerSource = `
const { workerData, parentPort } = require("node:worker_threads")
const fs = require("node:fs")
const Database = require(workerData.driver)
const db = new Database(workerData.filename, { timeout: 0, fileMustExist: true })
const stat = fs.statSync(workerData.filename)
if (workerData.identity !== undefined && stat.dev + ":" + stat.ino !== workerData.identity) {
  db.close()
  throw new Error("the database file was replaced before the checkpointer opened it")
}
const checkpoint = db.prepare("PRAGMA wal_checkpoint(PASSIVE)")
const cells = workerData.cells
// A pass's \`log\` is the WAL's length when it began: at the catch-up length or more, the WAL has not
// restarted for that long. Another pass copies what came during the first (a short one: its fsyncs), then
// the store's connection is asked to copy the last frames.
const pass = () => {
  try {
    return checkpoint.get().log
  } catch {
    return 0
  }
}
const run = () => {
  if (pass() < workerData.catchUpFrames) return
  pass()
  Atomics.store(cells, 2, 1)
}
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
 * The WAL's length (frames, i.e. pages) at which a pass asks the store's
 * connection to catch up: 16 MiB of 4 KiB pages. A WAL that restarts before
 * that (any pause in the writes as long as a pass) is the thread's alone.
 */
export const catchUpFrames = 4096

/**
 * The shared flags between the store's connection and its checkpointer:
 * cell 0 is "written since the last checkpoint", cell 1 is "stop", cell 2
 * is "the WAL has not restarted for `catchUpFrames`: catch up".
 */
export interface WalSignal {
  readonly cells: Int32Array
  /** Marks a write; wakes the checkpointer on the first one after a checkpoint. */
  readonly wrote: () => void
  /** Whether the checkpointer asked the store's connection to catch up (a load of one cell). */
  readonly behind: () => boolean
  /** The connection took the request (it checkpoints now). */
  readonly caughtUp: () => void
}

export const makeWalSignal = (): WalSignal => {
  const cells = new Int32Array(new SharedArrayBuffer(12))
  return {
    cells,
    wrote: () => {
      if (Atomics.compareExchange(cells, 0, 0, 1) === 0) Atomics.notify(cells, 0)
    },
    behind: () => Atomics.load(cells, 2) === 1,
    caughtUp: () => Atomics.store(cells, 2, 0)
  }
}

export interface CheckpointerOptions {
  readonly filename: string
  readonly everyMillis: number
  readonly signal: WalSignal
  /** The file's identity (`fileIdentity`) when the store's connection opened it. */
  readonly identity: string | undefined
  /**
   * Runs in the store's scope if the thread fails or ends before the store
   * closes (it is not restarted): the store recovers (the file's own
   * automatic checkpoint) and logs; it never crashes the host.
   */
  readonly onFailure: (cause: unknown) => Effect.Effect<void>
}

/** How long a closing store lets the thread finish its last checkpoint before terminating it. */
const stopPatienceMillis = 2_000

/**
 * Starts the checkpointer in the current scope. Closing the scope stops the
 * thread and waits for its exit on real time (a plain timer, not Effect's
 * `Clock`: under `TestClock` a clock-bound wait would never time out, and
 * the unref'd thread would let Node exit mid-close). The thread is kept
 * referenced while it stops, so the host process waits for it.
 */
export const startCheckpointer = (options: CheckpointerOptions) =>
  Effect.gen(function*() {
    const thread = yield* Effect.acquireRelease(
      Effect.try({
        try: () => spawn(options),
        catch: (cause) => new SqlError({ cause, message: `Failed to start the WAL checkpointer: ${String(cause)}` })
      }),
      (thread) => thread.stop
    )
    yield* Effect.forkScoped(Effect.flatMap(Deferred.await(thread.failed), options.onFailure))
  })

const spawn = (options: CheckpointerOptions) => {
  const driver = createRequire(import.meta.url).resolve("better-sqlite3")
  const worker = new Worker(workerSource, {
    eval: true,
    workerData: {
      filename: options.filename,
      everyMillis: options.everyMillis,
      catchUpFrames,
      driver,
      cells: options.signal.cells,
      identity: options.identity
    }
  })
  // An idle store's thread must not keep the host process alive.
  worker.unref()
  const failed = Deferred.unsafeMake<unknown>(FiberId.none)
  let exited = false
  let stopping = false
  let error: unknown
  // Without this listener a failure in the thread is an unhandled 'error' event: the host exits.
  worker.on("error", (cause) => {
    error = cause
  })
  worker.once("exit", (code) => {
    exited = true
    if (!stopping) Deferred.unsafeDone(failed, Exit.succeed(error ?? new Error(`the thread exited with code ${code}`)))
  })
  const stop = Effect.async<void>((resume) => {
    stopping = true
    if (exited) return resume(Effect.void)
    worker.ref()
    const patience = setTimeout(() => void worker.terminate(), stopPatienceMillis)
    worker.once("exit", () => {
      clearTimeout(patience)
      resume(Effect.void)
    })
    const { cells } = options.signal
    Atomics.store(cells, 1, 1)
    Atomics.notify(cells, 0)
    Atomics.notify(cells, 1)
  })
  return { failed, stop }
}
