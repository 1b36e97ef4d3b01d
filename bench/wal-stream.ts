/**
 * A long stream of commits back to back (docs/performance.md "The WAL under a steady stream"): one job per
 * transaction, no pause, against raw better-sqlite3 doing the same INSERT with SQLite's own automatic
 * checkpoint, in one process, each on a fresh WAL file. Per segment of the stream: jobs a second, the ratio
 * to raw's same segment, and the WAL's live length (frames, from the wal-index header in `-shm`; the `-wal`
 * file's size is only its high-water mark). Under such a stream the store's checkpointer thread never gets
 * the WAL all copied, so without the store's catch-up the WAL never restarts.
 *
 *   tsx bench/wal-stream.ts        WAL_STREAM_JOBS (default 200000), WAL_STREAM_SEGMENT (default 20000)
 */
import Sqlite from "better-sqlite3"
import { Effect } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { Queues, SqliteStore } from "../src/index.js"
import { walIndexReader } from "../test/support/wal-index.js"

const JOBS = Number(process.env.WAL_STREAM_JOBS ?? 200_000)
const SEGMENT = Number(process.env.WAL_STREAM_SEGMENT ?? 20_000)
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-wal-stream-"))

interface Segment {
  readonly perSecond: number
  readonly frames: number
}

/**
 * Call `after(n)` after each job: it samples the WAL every 1000 jobs and closes a segment every SEGMENT.
 * `close` once the file's connections are closed (walIndexReader).
 */
const recorder = (filename: string) => {
  const wal = walIndexReader(filename)
  const segments: Array<Segment> = []
  let started = performance.now()
  let longest = 0
  const after = (n: number) => {
    if (n % 1000 === 999) longest = Math.max(longest, wal.read().frames)
    if (n % SEGMENT !== SEGMENT - 1) return
    segments.push({ perSecond: SEGMENT / ((performance.now() - started) / 1000), frames: longest })
    started = performance.now()
    longest = 0
  }
  return { after, segments, close: wal.close }
}

const alkstore = async () => {
  const filename = path.join(dir, "alkstore.db")
  const record = recorder(filename)
  const program = Effect.gen(function*() {
    const queue = yield* (yield* Queues.Queues).queue("stream")
    yield* queue.enqueue({ n: -1 })
    for (let n = 0; n < JOBS; n++) {
      yield* queue.enqueue({ n })
      record.after(n)
    }
    return record.segments
  })
  try {
    return await Effect.runPromise(
      Effect.scoped(Effect.provide(program, SqliteStore.layer({ filename }))) as Effect.Effect<Array<Segment>>
    )
  } finally {
    record.close()
  }
}

const raw = () => {
  const filename = path.join(dir, "raw.db")
  const db = new Sqlite(filename)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = NORMAL")
  db.exec(`CREATE TABLE jobs (id INTEGER PRIMARY KEY, queue TEXT NOT NULL, payload TEXT NOT NULL, state TEXT NOT NULL,
    run_at INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0)`)
  db.exec(`CREATE INDEX jobs_pending ON jobs (queue, run_at, id) WHERE state = 'pending'`)
  const insert = db.prepare(`INSERT INTO jobs (queue, payload, state, run_at) VALUES ('stream', ?, 'pending', ?)`)
  const record = recorder(filename)
  try {
    for (let n = 0; n < JOBS; n++) {
      insert.run(JSON.stringify({ n }), n)
      record.after(n)
    }
    return record.segments
  } finally {
    db.close()
    record.close()
  }
}

try {
  const store = await alkstore()
  const baseline = raw()
  const k = (x: number) => `${(x / 1000).toFixed(1)}k`
  process.stdout.write([
    `${JOBS} enqueues, one per transaction, back to back; segments of ${SEGMENT}; 1-minute load average ` +
    `${os.loadavg()[0]!.toFixed(2)} on ${os.cpus().length} cores; ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC.`,
    "",
    "| segment | alkstore jobs/s | raw jobs/s | alkstore ÷ raw | alkstore: longest WAL (frames) | raw: longest WAL (frames) |",
    "| --- | ---: | ---: | ---: | ---: | ---: |",
    ...store.map((s, i) => {
      const r = baseline[i]!
      return `| ${k(i * SEGMENT)}–${k((i + 1) * SEGMENT)} | ${k(s.perSecond)} | ${k(r.perSecond)} | ` +
        `${(s.perSecond / r.perSecond).toFixed(2)}× | ${s.frames} | ${r.frames} |`
    })
  ].join("\n") + "\n")
} finally {
  fs.rmSync(dir, { recursive: true, force: true })
}
