/**
 * Reference contenders for the PersistedQueue rows (issue 15): Effect's
 * `PersistedQueue` through the same API and the same workload code as
 * `alkstore-pq` and `effect-pq` (`take(f)` one at a time, or 100
 * concurrent), over a store that is not durable, so that the floor of any
 * store is a ratio in the same run:
 *
 * - `memory-pq`: Effect's own in-memory store (`layerStoreMemory`), the
 *   elements offered (untimed) before the timed drain;
 * - `noop-pq`: a store that does nothing — its `take` returns one constant
 *   element and puts a no-op finalizer on the take's scope (as cheaply as a
 *   store can: `Scope.addFinalizerExit` on the scope, no FiberRef capture);
 *   what is left is `@effect/experimental`'s own part of a take.
 *
 * Neither writes anything: no file, no SQLite. Only the drains are measured.
 */
import type { BaseWorkloadId, Contender, RunContext, RunResult, WorkloadId } from "../workloads.js"
import { payload } from "../workloads.js"

const QUEUE = "bench"

const unsupported = "a non-durable reference store: only the drains (drain-1, drain-batch100) are measured"

const run = (kind: "memory" | "noop") => async (workload: WorkloadId, { sizes: s }: RunContext): Promise<RunResult> => {
  const { Effect, Layer, Schema, Scope } = await import("effect")
  const PersistedQueue = await import("@effect/experimental/PersistedQueue")

  const constant = { id: "constant", attempts: 0, element: payload(0) }
  const noopStore = Layer.succeed(
    PersistedQueue.PersistedQueueStore,
    PersistedQueue.PersistedQueueStore.of({
      offer: () => Effect.void,
      take: () =>
        Effect.flatMap(Scope.Scope, (scope) => Effect.as(Scope.addFinalizerExit(scope, () => Effect.void), constant))
    })
  )
  const QueueLive = PersistedQueue.layer.pipe(
    Layer.provide(kind === "memory" ? PersistedQueue.layerStoreMemory : noopStore)
  )

  const program = Effect.gen(function*() {
    const q = yield* PersistedQueue.make({ name: QUEUE, schema: Schema.Unknown })
    const noop = () => Effect.void
    const preload = (n: number) =>
      kind === "memory" ? Effect.forEach(Array.from({ length: n }, (_, i) => i), (i) => q.offer(payload(i)), { discard: true }) : Effect.void
    let t0 = 0
    let ops = 0
    const start = Effect.sync(() => (t0 = performance.now()))
    switch (workload) {
      case "drain-1":
        yield* preload(s.drainJobs)
        yield* start
        for (let i = 0; i < s.drainJobs; i++) yield* q.take(noop)
        ops = s.drainJobs
        break
      case "drain-batch100":
        yield* preload(s.drainJobs)
        yield* start
        yield* Effect.forEach(Array.from({ length: s.drainJobs }), () => q.take(noop), { concurrency: s.batch, discard: true })
        ops = s.drainJobs
        break
      default:
        return yield* Effect.die(new Error(`${kind}-pq: unsupported workload ${workload}`))
    }
    const ms = performance.now() - t0
    return { ops, ms, notes: [] } satisfies RunResult
  })
  return Effect.runPromise(program.pipe(Effect.provide(QueueLive), Effect.scoped))
}

const supports: Record<BaseWorkloadId, true | string> = {
  "enqueue-1tx": unsupported,
  "enqueue-100tx": unsupported,
  "enqueue-batch100": unsupported,
  "drain-1": true,
  "drain-1-process": unsupported,
  "drain-batch100": true,
  "drain-batch100-read": unsupported,
  "drain-stream100": unsupported,
  "claim-1k": unsupported,
  "claim-1m": unsupported,
  "claim-dead100k": unsupported,
  "memory-1m": unsupported
}

export const referencePq = (kind: "memory" | "noop"): Contender => ({
  name: `${kind}-pq`,
  label: kind === "memory"
    ? "PersistedQueue over Effect's in-memory store (reference, not durable)"
    : "PersistedQueue over a store that does nothing (reference: PersistedQueue's own part)",
  packages: ["node_modules/@effect/experimental/package.json", "node_modules/effect/package.json"],
  supports,
  run: run(kind)
})
