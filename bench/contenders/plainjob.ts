/**
 * Peer: plainjob (npm), on the root better-sqlite3 (same SQLite build as raw
 * and alkstore). defineQueue itself sets journal_mode=WAL, synchronous=1
 * (NORMAL), busy_timeout=5000.
 */
import type { Contender, RunContext, RunResult, WorkloadId } from "../workloads.js"
import { payload, range } from "../workloads.js"

const TYPE = "bench"
const silent = { error() {}, warn() {}, info() {}, debug() {} }

const run = async (workload: WorkloadId, { file, sizes: s }: RunContext): Promise<RunResult> => {
  const { default: Database } = await import("better-sqlite3")
  const { better, defineQueue, defineWorker } = await import("plainjob")
  const db = new Database(file)
  const queue = defineQueue({ connection: better(db), logger: silent })
  const notes: Array<string> = []

  /** untimed preload through the public batch API (addMany = one transaction) */
  const preload = (n: number, from = 0) => {
    for (let i = 0; i < n; i += s.preloadChunk) {
      queue.addMany(TYPE, range(Math.min(s.preloadChunk, n - i), from + i).map(payload))
    }
  }
  const claimAck = (ops: number) => {
    for (let i = 0; i < ops; i++) {
      const claimed = queue.getAndMarkJobAsProcessing(TYPE)
      if (!claimed) throw new Error(`plainjob: queue empty after ${i}`)
      const job = queue.getJobById(claimed.id)!
      JSON.parse(job.data)
      queue.markJobAsDone(job.id)
    }
  }

  let t0 = 0
  let ops = 0
  const start = () => (t0 = performance.now())
  switch (workload) {
    case "enqueue-1tx":
      start()
      for (let i = 0; i < s.enqueueJobs; i++) queue.add(TYPE, payload(i))
      ops = s.enqueueJobs
      break
    case "enqueue-100tx": {
      // the user-facing way to group single adds: the connection's own transaction
      const addGroup = db.transaction((from: number, to: number) => {
        for (let j = from; j < to; j++) queue.add(TYPE, payload(j))
      })
      start()
      for (let i = 0; i < s.enqueueJobs; i += s.batch) addGroup.immediate(i, Math.min(i + s.batch, s.enqueueJobs))
      ops = s.enqueueJobs
      break
    }
    case "enqueue-batch100":
      start()
      for (let i = 0; i < s.enqueueJobs; i += s.batch) {
        queue.addMany(TYPE, range(Math.min(s.batch, s.enqueueJobs - i), i).map(payload))
      }
      ops = s.enqueueJobs
      break
    case "drain-1":
      preload(s.drainJobs)
      start()
      claimAck(s.drainJobs)
      ops = s.drainJobs
      break
    case "drain-1-process": {
      preload(s.drainJobs)
      let done = 0
      let stop: () => void = () => {}
      const finished = new Promise<void>((resolve) => (stop = resolve))
      const worker = defineWorker(
        TYPE,
        (job) => {
          JSON.parse(job.data)
        },
        {
          queue,
          logger: silent,
          pollIntervall: 10,
          onCompleted: () => {
            if (++done === s.drainJobs) stop()
          }
        }
      )
      start()
      void worker.start()
      await finished
      await worker.stop()
      ops = s.drainJobs
      break
    }
    case "claim-1k":
    case "claim-1m":
    case "claim-dead100k": {
      if (workload === "claim-dead100k") {
        // dead rows: what markJobAsFailed leaves behind (status Failed = 3), made in bulk (untimed)
        preload(s.deadRows)
        db.prepare("UPDATE plainjob_jobs SET status = 3, failed_at = ?, error = 'boom'").run(Date.now())
      }
      preload((workload === "claim-1m" ? s.claimLarge : s.claimSmall) + s.claimOps + s.warmupOps)
      claimAck(s.warmupOps)
      db.exec("PRAGMA wal_checkpoint(TRUNCATE)")
      start()
      claimAck(s.claimOps)
      ops = s.claimOps
      break
    }
    default:
      throw new Error(`plainjob: unsupported workload ${workload}`)
  }
  const ms = performance.now() - t0
  if (workload.startsWith("drain")) {
    const left = queue.countJobs({ type: TYPE, status: 0 }) + queue.countJobs({ type: TYPE, status: 1 })
    if (left !== 0) throw new Error(`plainjob: ${left} jobs not done`)
  }
  const pragmas = {
    journal_mode: String(db.pragma("journal_mode", { simple: true })),
    synchronous: Number(db.pragma("synchronous", { simple: true }))
  }
  const sqliteVersion = (db.prepare("SELECT sqlite_version() AS v").get() as { v: string }).v
  queue.close()
  return { ops, ms, pragmas, sqliteVersion, notes }
}

export const contender: Contender = {
  name: "plainjob",
  label: "plainjob",
  packages: ["bench/node_modules/plainjob/package.json", "node_modules/better-sqlite3/package.json"],
  supports: {
    "enqueue-1tx": true,
    "enqueue-100tx": true,
    "enqueue-batch100": true,
    "drain-1": true,
    "drain-1-process": true,
    "drain-batch100": "no batch claim: getAndMarkJobAsProcessing claims exactly one job",
    "drain-batch100-read": "no batch claim: getAndMarkJobAsProcessing claims exactly one job",
    "drain-stream100": "no stream / batch consumer API",
    "claim-1k": true,
    "claim-1m": true,
    "claim-dead100k": true,
    "memory-1m": "memory is measured for alkstore and raw only"
  },
  run
}
