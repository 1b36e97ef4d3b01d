/**
 * The raw baseline: better-sqlite3 (root node_modules, the same build
 * @effect/sql-sqlite-node uses) with a minimal jobs table. Two write
 * transactions per job one-by-one (claim = one UPDATE … RETURNING, ack = one
 * DELETE), JSON.stringify on enqueue and JSON.parse on claim.
 */
import type { Contender, RunContext, RunResult, WorkloadId } from "../workloads.js"
import { payload } from "../workloads.js"

const QUEUE = "bench"
const WORKER = "w1"
const LEASE_MS = 300_000

interface Row {
  id: number
  queue: string
  payload: string
  priority: number
  run_at: number
  state: string
  attempts: number
  claimed_until: number | null
  worker_id: string | null
}

/** The minimal jobs table of the raw baseline (shared with the waking benchmark). */
export const rawSchema = `
  CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY,
    queue TEXT NOT NULL,
    payload TEXT NOT NULL,
    priority INTEGER NOT NULL DEFAULT 0,
    run_at INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    claimed_until INTEGER,
    worker_id TEXT
  );
  CREATE INDEX IF NOT EXISTS jobs_claim ON jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';
`

export const open = async (file: string) => {
  const { default: Database } = await import("better-sqlite3")
  const db = new Database(file)
  db.pragma("journal_mode = WAL")
  db.pragma("synchronous = NORMAL")
  db.exec(rawSchema)
  const insert = db.prepare(
    "INSERT INTO jobs (queue, payload, priority, run_at, state, attempts) VALUES (?, ?, 0, ?, ?, 0)"
  )
  const pick = `SELECT id FROM jobs WHERE queue = ? AND state = 'pending' AND run_at <= ?
                ORDER BY priority DESC, run_at, id LIMIT`
  const claimOne = db.prepare(
    `UPDATE jobs SET state = 'claimed', attempts = attempts + 1, claimed_until = ?, worker_id = ?
     WHERE id = (${pick} 1) RETURNING *`
  )
  const claimMany = db.prepare(
    `UPDATE jobs SET state = 'claimed', attempts = attempts + 1, claimed_until = ?, worker_id = ?
     WHERE id IN (${pick} ?) RETURNING *`
  )
  const ack = db.prepare("DELETE FROM jobs WHERE id = ?")
  const begin = db.prepare("BEGIN IMMEDIATE")
  const commit = db.prepare("COMMIT")

  const enqueue = (n: number, state = "pending") => insert.run(QUEUE, JSON.stringify(payload(n)), Date.now(), state)
  const claim = (): Row | undefined => {
    const now = Date.now()
    const row = claimOne.get(now + LEASE_MS, WORKER, QUEUE, now) as Row | undefined
    if (row) JSON.parse(row.payload)
    return row
  }
  const claimBatch = (n: number): Array<Row> => {
    const now = Date.now()
    const rows = claimMany.all(now + LEASE_MS, WORKER, QUEUE, now, n) as Array<Row>
    for (const r of rows) JSON.parse(r.payload)
    return rows
  }
  const inTx = <A>(f: () => A): A => {
    begin.run()
    try {
      const a = f()
      commit.run()
      return a
    } catch (e) {
      db.exec("ROLLBACK")
      throw e
    }
  }
  /** untimed preload: everything in one transaction */
  const preload = (n: number, state = "pending", from = 0) =>
    inTx(() => {
      for (let i = 0; i < n; i++) enqueue(from + i, state)
    })
  const drainBatched = (total: number, batch: number) => {
    let done = 0
    while (done < total) {
      const rows = claimBatch(batch)
      if (rows.length === 0) throw new Error(`raw: queue empty after ${done} of ${total}`)
      inTx(() => {
        for (const r of rows) ack.run(r.id)
      })
      done += rows.length
    }
  }
  const pragmas = () => ({
    journal_mode: String(db.pragma("journal_mode", { simple: true })),
    synchronous: Number(db.pragma("synchronous", { simple: true }))
  })
  const sqliteVersion = () => (db.prepare("SELECT sqlite_version() AS v").get() as { v: string }).v
  return { db, enqueue, claim, claimBatch, ack, inTx, preload, drainBatched, pragmas, sqliteVersion }
}

const claimAck = (store: Awaited<ReturnType<typeof open>>, ops: number) => {
  for (let i = 0; i < ops; i++) {
    const row = store.claim()
    if (!row) throw new Error(`raw: queue empty after ${i} claims`)
    store.ack.run(row.id)
  }
}

const run = async (workload: WorkloadId, { file, sizes: s }: RunContext): Promise<RunResult> => {
  const store = await open(file)
  let ops = 0
  let t0 = 0
  const start = () => (t0 = performance.now())
  switch (workload) {
    case "enqueue-1tx": {
      start()
      for (let i = 0; i < s.enqueueJobs; i++) store.enqueue(i)
      ops = s.enqueueJobs
      break
    }
    case "enqueue-100tx": {
      start()
      for (let i = 0; i < s.enqueueJobs; i += s.batch) {
        store.inTx(() => {
          for (let j = i; j < Math.min(i + s.batch, s.enqueueJobs); j++) store.enqueue(j)
        })
      }
      ops = s.enqueueJobs
      break
    }
    case "drain-1": {
      store.preload(s.drainJobs)
      start()
      claimAck(store, s.drainJobs)
      ops = s.drainJobs
      break
    }
    case "drain-batch100": {
      store.preload(s.drainJobs)
      start()
      store.drainBatched(s.drainJobs, s.batch)
      ops = s.drainJobs
      break
    }
    case "claim-1k":
    case "claim-1m":
    case "claim-dead100k": {
      if (workload === "claim-dead100k") store.preload(s.deadRows, "dead")
      const pending = workload === "claim-1m" ? s.claimLarge : s.claimSmall
      store.preload(pending + s.claimOps + s.warmupOps)
      claimAck(store, s.warmupOps)
      store.db.exec("PRAGMA wal_checkpoint(TRUNCATE)")
      start()
      claimAck(store, s.claimOps)
      ops = s.claimOps
      break
    }
    case "memory-1m": {
      start()
      for (let i = 0; i < s.memoryJobs; i += s.preloadChunk) {
        store.inTx(() => {
          for (let j = i; j < Math.min(i + s.preloadChunk, s.memoryJobs); j++) store.enqueue(j)
        })
      }
      store.drainBatched(s.memoryJobs, s.batch)
      ops = s.memoryJobs
      break
    }
    default:
      throw new Error(`raw: unsupported workload ${workload}`)
  }
  const ms = performance.now() - t0
  const left = (store.db.prepare("SELECT count(*) AS c FROM jobs WHERE state != 'dead'").get() as { c: number }).c
  const expectedLeft = workload.startsWith("claim-")
    ? (workload === "claim-1m" ? s.claimLarge : s.claimSmall)
    : workload.startsWith("enqueue")
    ? s.enqueueJobs
    : 0
  if (left !== expectedLeft) throw new Error(`raw: ${left} live rows left, expected ${expectedLeft}`)
  const result = { ops, ms, pragmas: store.pragmas(), sqliteVersion: store.sqliteVersion() }
  store.db.close()
  return result
}

export const contender: Contender = {
  name: "raw",
  label: "raw better-sqlite3",
  packages: ["node_modules/better-sqlite3/package.json"],
  supports: {
    "enqueue-1tx": true,
    "enqueue-100tx": true,
    "enqueue-batch100": "baseline row is enqueue-100tx (a raw batch is the same loop in one transaction)",
    "drain-1": true,
    "drain-1-process": "baseline row is drain-1",
    "drain-batch100": true,
    "drain-batch100-read": "baseline row is drain-batch100 (it parses every payload)",
    "drain-stream100": "baseline row is drain-batch100",
    "claim-1k": true,
    "claim-1m": true,
    "claim-dead100k": true,
    "memory-1m": true
  },
  run
}
