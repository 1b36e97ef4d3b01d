/**
 * The JavaScript cost of SQLite's flow walk alone (issue 13): `readinessNow` + `flowWalkNow` of one limited
 * claim (concurrency 10, groupConcurrency 1) against a fake connection that answers every statement at once
 * with a canned row, so no SQL runs and what is timed is the walk, its operations and their statement steps.
 * `flowWalk on plain ops` is the engine-free walk alone, on plain functions: the floor of that layer.
 *
 *   tsx bench/flow-walk.ts
 */
import type { DirectConnection } from "../src/internal/sqlite/executor.js"
import { flowWalk } from "../src/internal/flow.js"
import type { FlowOps } from "../src/internal/flowOps.js"
import { flowWalkNow, readinessNow } from "../src/internal/sqlite/flowStorage.js"

const N = 200_000
const job = [1, "bench", "{}", "claimed", 0, 0, 1, 3, 30000, 1000, null, 31000, "w", 1, 0, null, null, null]
let id = 0
const candidate = () => ({ id: ++id, priority: 0, round: 5, runAt: 0, group: "t-1", state: "pending" as const })
const limits = {
  concurrency: 10,
  rateLimit: null,
  ratePerMillis: null,
  groupConcurrency: 1,
  groupRateLimit: null,
  groupRatePerMillis: null,
  currentRound: 5
}
const c: DirectConnection = {
  all: <A>(text: string) =>
    (text.startsWith("SELECT EXISTS")
      ? [{ due: 0, lapsed: 0, limited: 1, ...limits }]
      : text.includes("AS inFlight")
      ? [{ inFlight: 0, ahead: 0, last: 0 }]
      : text.startsWith("SELECT count")
      ? [{ n: 0 }]
      : [candidate()]) as unknown as ReadonlyArray<A>,
  values: () => [job],
  run: () => ({ changes: 1, lastInsertRowid: 0 }),
  transaction: (f) => f()
}
const plainOps = {
  limits: () => limits,
  promote: () => undefined,
  start: () => ({ inFlight: 0, queueLast: 0, lapsed: [], dueScheduled: [], page: [candidate()] }),
  groupStart: () => ({ inFlight: 0, ahead: 0, last: 0 }),
  claim: () => ({ state: "claimed" })
} as unknown as Record<keyof FlowOps, (...args: ReadonlyArray<unknown>) => unknown>

const cpuMicros = (body: (i: number) => void) => {
  const started = process.cpuUsage()
  for (let i = 0; i < N; i++) body(i)
  const used = process.cpuUsage(started)
  return ((used.user + used.system) / N).toFixed(2)
}
for (let round = 0; round < 3; round++) {
  const sqlite = cpuMicros((i) => flowWalkNow(c, "bench", "w", 1000 + i, 1, "claim", readinessNow(c, "bench", 1000 + i)))
  const plain = cpuMicros((i) => {
    const walk = flowWalk(1000 + i, 1, "claim")
    let step = walk.next()
    while (!step.done) step = walk.next(plainOps[step.value.op](...step.value.args))
  })
  process.stdout.write(`readiness + walk on SQLite's ops: ${sqlite} µs CPU per claim; flowWalk on plain ops: ${plain} µs\n`)
}
