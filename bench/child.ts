/**
 * Child-process entry: runs ONE workload for ONE contender on ONE fresh
 * database file, then prints a single `RESULT {json}` line and exits.
 *
 *   node --import tsx bench/child.ts <contender> <workload> <dbfile> <sizes-json>
 *
 * bench/run.ts normally runs a per-contender esbuild bundle of this file
 * instead (bench/.cache/child-<contender>.mjs): same code, but no per-child
 * TypeScript loader and module-resolution cost (~2 s per Effect-based child).
 */
import { rmSync } from "node:fs"
import { loadContender } from "./contenders/index.js"
import type { ChildResult, Sizes, WorkloadId } from "./workloads.js"
import { baseOf, isWarm, WARM_RUNS } from "./workloads.js"

const [name, workload, file, sizesJson] = process.argv.slice(2)
if (!name || !workload || !file || !sizesJson) {
  console.error("usage: child.ts <contender> <workload> <dbfile> <sizes-json>")
  process.exit(2)
}

try {
  const contender = await loadContender(name)
  const sizes = JSON.parse(sizesJson) as Sizes
  const id = workload as WorkloadId
  if (isWarm(id)) {
    // The warm-up: the same workload, untimed, on throw-away files next to the real one.
    for (let run = 1; run <= WARM_RUNS; run++) {
      const warmup = `${file}-warmup${run}`
      await contender.run(baseOf(id), { file: warmup, sizes })
      for (const suffix of ["", "-wal", "-shm", "-journal"]) rmSync(`${warmup}${suffix}`, { force: true })
    }
  }
  const result = await contender.run(baseOf(id), { file, sizes })
  const out: ChildResult = { ...result, maxRssMB: process.resourceUsage().maxRSS / 1024 }
  process.stdout.write(`RESULT ${JSON.stringify(out)}\n`)
  // Some libraries keep timers/fibers around; the measurement is done.
  process.exit(0)
} catch (e) {
  console.error(e instanceof Error ? (e.stack ?? e.message) : String(e))
  process.exit(1)
}
