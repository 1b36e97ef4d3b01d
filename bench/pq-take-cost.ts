/**
 * Where a PersistedQueue take's time goes, over alkstore, in one process on
 * one SQLite file: the CPU time per element of draining N preloaded
 * elements (1) with alkstore's own `claim` + `ack`, (2) with `queue.take` +
 * `ack`, (3) with `PersistedQueue.take(f)` one at a time, (4) with 100
 * concurrent `PersistedQueue.take(f)`; and, for reference, (3) and (4) over
 * Effect's in-memory store (`memory …`) and over a store that does nothing
 * (`noop …`: its take returns a constant and puts a no-op finalizer on the
 * take's scope), the floors of any store. Rounds interleave the variants.
 *
 *   npx tsx bench/pq-take-cost.ts            # PQ_COST_N=2000 PQ_COST_ROUNDS=3
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { Effect, Layer, Schema, Scope } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import os from "node:os"
import path from "node:path"
import { EffectStores, Queues, SqliteStore } from "../src/index.js"

const N = Number(process.env.PQ_COST_N ?? 2000)
const ROUNDS = Number(process.env.PQ_COST_ROUNDS ?? 3)
const dir = mkdtempSync(path.join(os.tmpdir(), "pq-cost-"))

type Variant =
  | "claim+ack"
  | "take+ack"
  | "pq.take"
  | "pq.take x100"
  | "memory pq.take"
  | "memory pq.take x100"
  | "noop pq.take"
  | "noop pq.take x100"
const allVariants: ReadonlyArray<Variant> = [
  "claim+ack",
  "take+ack",
  "pq.take",
  "pq.take x100",
  "memory pq.take",
  "memory pq.take x100",
  "noop pq.take",
  "noop pq.take x100"
]
// PQ_COST_VARIANTS=pq.take (comma-separated) runs only those (e.g. under node --cpu-prof)
const variants = process.env.PQ_COST_VARIANTS === undefined
  ? allVariants
  : allVariants.filter((v) => process.env.PQ_COST_VARIANTS!.split(",").includes(v))

const constant = { id: "constant", attempts: 0, element: { n: 0 } }
const noopStore = Layer.succeed(
  PersistedQueue.PersistedQueueStore,
  PersistedQueue.PersistedQueueStore.of({
    offer: () => Effect.void,
    take: () => Effect.flatMap(Scope.Scope, (scope) => Effect.as(Scope.addFinalizerExit(scope, () => Effect.void), constant))
  })
)

/** The same drains over a reference store (no file: what is left is PersistedQueue's and that store's part). */
const measureReference = (variant: Variant) => {
  const memory = variant.startsWith("memory")
  const live = PersistedQueue.layer.pipe(Layer.provide(memory ? PersistedQueue.layerStoreMemory : noopStore))
  return Effect.gen(function*() {
    const pq = yield* PersistedQueue.make({ name: "bench", schema: Schema.Unknown })
    if (memory) yield* Effect.forEach(Array.from({ length: N }, (_, n) => n), (n) => pq.offer({ n }), { discard: true })
    const cpu0 = process.cpuUsage()
    const t0 = performance.now()
    if (variant.endsWith("x100")) {
      yield* Effect.forEach(Array.from({ length: N }), () => pq.take(() => Effect.void), { concurrency: 100, discard: true })
    } else {
      for (let i = 0; i < N; i++) yield* pq.take(() => Effect.void)
    }
    const ms = performance.now() - t0
    const cpu = process.cpuUsage(cpu0)
    return { variant, wallUs: (ms * 1000) / N, cpuUs: (cpu.user + cpu.system) / N }
  }).pipe(Effect.provide(live))
}

const measure = (variant: Variant, round: number) => {
  if (variant.startsWith("memory") || variant.startsWith("noop")) return measureReference(variant)
  const file = path.join(dir, `${variant.replace(/\W/g, "")}-${round}.db`)
  const live = PersistedQueue.layer.pipe(
    Layer.provideMerge(EffectStores.layerPersistedQueueStore()),
    Layer.provideMerge(SqliteStore.layer({ filename: file }))
  )
  return Effect.gen(function*() {
    const queues = yield* Queues.Queues
    const raw = yield* queues.queue("bench", { visibilityTimeout: "2 minutes", maxAttempts: Number.MAX_SAFE_INTEGER })
    const pq = yield* PersistedQueue.make({ name: "bench", schema: Schema.Unknown })
    for (let i = 0; i < N; i += 1000) {
      yield* raw.enqueueBatch(Array.from({ length: Math.min(1000, N - i) }, (_, j) => ({ id: crypto.randomUUID(), element: { n: i + j } })))
    }
    const cpu0 = process.cpuUsage()
    const t0 = performance.now()
    switch (variant) {
      case "claim+ack":
        for (let i = 0; i < N; i++) {
          const handle = yield* raw.claim("w")
          if (handle._tag === "Some") yield* handle.value.ack
        }
        break
      case "take+ack":
        for (let i = 0; i < N; i++) yield* Effect.flatMap(raw.take("w"), (handle) => handle.ack)
        break
      case "pq.take":
        for (let i = 0; i < N; i++) yield* pq.take(() => Effect.void)
        break
      case "pq.take x100":
        yield* Effect.forEach(Array.from({ length: N }), () => pq.take(() => Effect.void), { concurrency: 100, discard: true })
        break
    }
    const ms = performance.now() - t0
    const cpu = process.cpuUsage(cpu0)
    const st = yield* raw.stats
    if (st.pending + st.claimed !== 0) return yield* Effect.die(new Error(`${variant}: ${st.pending + st.claimed} left`))
    return { variant, wallUs: (ms * 1000) / N, cpuUs: (cpu.user + cpu.system) / N }
  }).pipe(Effect.provide(live), Effect.scoped)
}

const main = Effect.gen(function*() {
  const results = new Map<Variant, Array<{ wallUs: number; cpuUs: number }>>()
  for (let round = 0; round < ROUNDS; round++) {
    for (const variant of variants) {
      const r = yield* measure(variant, round)
      results.set(variant, [...(results.get(variant) ?? []), r])
    }
  }
  const median = (xs: ReadonlyArray<number>) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
  const base = median((results.get("claim+ack") ?? results.get(variants[0]!)!).map((r) => r.cpuUs))
  console.log(`N=${N} rounds=${ROUNDS} load average ${os.loadavg().map((l) => l.toFixed(2)).join(" ")}`)
  for (const variant of variants) {
    const rs = results.get(variant)!
    const cpu = median(rs.map((r) => r.cpuUs))
    console.log(
      `${variant.padEnd(20)} cpu ${cpu.toFixed(1).padStart(7)} µs/elem (${(cpu / base).toFixed(2)}× claim+ack)  wall ${median(rs.map((r) => r.wallUs)).toFixed(1).padStart(7)} µs/elem  [cpu per round: ${rs.map((r) => r.cpuUs.toFixed(0)).join(", ")}]`
    )
  }
})

Effect.runPromise(main).finally(() => rmSync(dir, { recursive: true, force: true }))
