/**
 * Wake latency of Effect's PersistedQueue (`npx tsx bench/pq-wake.ts`): an
 * idle `take` waits, one element is offered from another fiber of the same
 * process, and the time from just before `offer` to the handler's first
 * line is one sample. PersistedQueue over alkstore (EffectStores, woken by
 * the commit) against PersistedQueue over `@effect/sql`'s SqlPersistedQueue
 * (its poller, every 1 s by default), each on a fresh SQLite file, in
 * interleaved rounds (PQ_WAKE_ROUNDS, default 3; PQ_WAKE_SAMPLES per round,
 * default 200 for alkstore and 20 for the poller). Prints a Markdown table.
 */
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import * as SqlPersistedQueue from "@effect/sql/SqlPersistedQueue"
import * as SqliteClient from "@effect/sql-sqlite-node/SqliteClient"
import { Deferred, Effect, Fiber, Layer, Schema } from "effect"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { EffectStores, SqliteStore } from "../src/index.js"

const rounds = Number(process.env.PQ_WAKE_ROUNDS ?? 3)
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "pq-wake-"))

type Side = "alkstore-pq" | "effect-pq"
const layerOf = (side: Side, filename: string): Layer.Layer<PersistedQueue.PersistedQueueFactory, unknown> =>
  side === "alkstore-pq"
    ? PersistedQueue.layer.pipe(
      Layer.provide(EffectStores.layerPersistedQueueStore()),
      Layer.provide(SqliteStore.layer({ filename }))
    )
    : PersistedQueue.layer.pipe(Layer.provide(SqlPersistedQueue.layerStore()), Layer.provide(SqliteClient.layer({ filename })))

const measure = (side: Side, samples: number) =>
  Effect.gen(function*() {
    const queue = yield* PersistedQueue.make({ name: "wake", schema: Schema.Number })
    const latencies: Array<number> = []
    for (let i = 0; i < samples; i++) {
      const handled = yield* Deferred.make<void>()
      let offeredAt = 0
      const taker = yield* Effect.fork(queue.take(() =>
        Effect.suspend(() => {
          latencies.push(performance.now() - offeredAt)
          return Deferred.succeed(handled, undefined)
        })
      ))
      yield* Effect.sleep("20 millis") // the take is idle, waiting
      offeredAt = performance.now()
      yield* queue.offer(i)
      yield* Deferred.await(handled)
      yield* Fiber.join(taker)
    }
    return latencies
  }).pipe(Effect.scoped, Effect.provide(layerOf(side, path.join(dir, `${side}-${Date.now()}.db`))))

const pct = (xs: ReadonlyArray<number>, p: number) => {
  const sorted = [...xs].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}
const fmt = (ms: number) => (ms < 1 ? `${(ms * 1000).toFixed(0)} µs` : `${ms.toFixed(1)} ms`)

const main = Effect.gen(function*() {
  const all: Record<Side, Array<number>> = { "alkstore-pq": [], "effect-pq": [] }
  const perRound: Array<{ alk: number; eff: number }> = []
  for (let r = 0; r < rounds; r++) {
    const alk = yield* measure("alkstore-pq", Number(process.env.PQ_WAKE_SAMPLES ?? 200))
    const eff = yield* measure("effect-pq", Number(process.env.PQ_WAKE_SAMPLES_POLL ?? 20))
    all["alkstore-pq"].push(...alk)
    all["effect-pq"].push(...eff)
    perRound.push({ alk: pct(alk, 50), eff: pct(eff, 50) })
  }
  const ratios = perRound.map((r) => r.eff / r.alk).sort((a, b) => a - b)
  console.log(`| store | samples | p50 | p99 |\n|---|---|---|---|`)
  for (const side of ["alkstore-pq", "effect-pq"] as const) {
    console.log(`| ${side} | ${all[side].length} | ${fmt(pct(all[side], 50))} | ${fmt(pct(all[side], 99))} |`)
  }
  console.log(`\np50 ratio effect-pq ÷ alkstore-pq per round: ${ratios.map((x) => `${x.toFixed(0)}×`).join(", ")} (load ${os.loadavg().map((x) => x.toFixed(1)).join(" ")})`)
})

Effect.runPromise(main).finally(() => fs.rmSync(dir, { recursive: true, force: true }))
