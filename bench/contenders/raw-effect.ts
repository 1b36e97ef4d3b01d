/**
 * The Effect floor: the raw baseline's own statements (bench/contenders/raw.ts),
 * each call wrapped in one `Effect.sync` and driven from an `Effect.gen` loop —
 * the cheapest any Effect API over the same SQL can be. Its ratio to raw is the
 * tax of calling through Effect at all (one fiber step per call, JIT warm-up
 * of the runtime included), which bounds what a library with an Effect API
 * can reach on the per-call workloads. Not a peer: a reference.
 */
import type { Contender, RunContext, RunResult, WorkloadId } from "../workloads.js"
import { open } from "./raw.js"

const run = async (workload: WorkloadId, { file, sizes: s }: RunContext): Promise<RunResult> => {
  const { Effect } = await import("effect")
  const store = await open(file)
  let ops = 0
  let t0 = 0
  const start = Effect.sync(() => (t0 = performance.now()))
  const enqueue = (i: number) => Effect.sync(() => store.enqueue(i))
  const claim = Effect.sync(() => store.claim())
  const ack = (id: number) => Effect.sync(() => store.ack.run(id))
  const begin = Effect.sync(() => store.db.prepare("BEGIN IMMEDIATE").run())
  const commit = Effect.sync(() => store.db.prepare("COMMIT").run())
  const program = Effect.gen(function*() {
    switch (workload) {
      case "enqueue-1tx":
        yield* start
        for (let i = 0; i < s.enqueueJobs; i++) yield* enqueue(i)
        ops = s.enqueueJobs
        break
      case "enqueue-100tx":
        yield* start
        for (let i = 0; i < s.enqueueJobs; i += s.batch) {
          yield* begin
          for (let j = i; j < Math.min(i + s.batch, s.enqueueJobs); j++) yield* enqueue(j)
          yield* commit
        }
        ops = s.enqueueJobs
        break
      case "drain-1":
        store.preload(s.drainJobs)
        yield* start
        for (let i = 0; i < s.drainJobs; i++) {
          const row = yield* claim
          if (!row) return yield* Effect.die(new Error(`raw-effect: queue empty after ${i} claims`))
          yield* ack(row.id)
        }
        ops = s.drainJobs
        break
      default:
        return yield* Effect.die(new Error(`raw-effect: unsupported workload ${workload}`))
    }
  })
  await Effect.runPromise(program)
  const ms = performance.now() - t0
  const left = (store.db.prepare("SELECT count(*) AS c FROM jobs WHERE state != 'dead'").get() as { c: number }).c
  const expectedLeft = workload.startsWith("enqueue") ? s.enqueueJobs : 0
  if (left !== expectedLeft) throw new Error(`raw-effect: ${left} live rows left, expected ${expectedLeft}`)
  const result = { ops, ms, pragmas: store.pragmas(), sqliteVersion: store.sqliteVersion() }
  store.db.close()
  return result
}

const reference = "a reference for the per-call workloads only"

export const contender: Contender = {
  name: "raw-effect",
  label: "raw SQL in Effect.sync (the Effect floor)",
  packages: ["node_modules/better-sqlite3/package.json", "node_modules/effect/package.json"],
  supports: {
    "enqueue-1tx": true,
    "enqueue-100tx": true,
    "enqueue-batch100": reference,
    "drain-1": true,
    "drain-1-process": reference,
    "drain-batch100": reference,
    "drain-batch100-read": reference,
    "drain-stream100": reference,
    "claim-1k": reference,
    "claim-1m": reference,
    "claim-dead100k": reference,
    "memory-1m": reference
  },
  run
}
