/**
 * Child-process entry of the waking benchmark (bench/waking.ts): runs ONE
 * scenario for ONE side on ONE fresh database file, prints a single
 * `RESULT {json}` line (a WakeResult) and exits.
 *
 *   node --import tsx bench/waking-child.ts <scenario> <alkstore|raw|plainjob> <dbfile> <settings-json>
 *   node --import tsx bench/waking-child.ts enqueuer <alkstore|raw|plainjob> <dbfile>   (process B, spawned by A over IPC)
 *
 * bench/run.ts normally runs an esbuild bundle of this file instead
 * (bench/.cache/waking-child.mjs); the cross-process worker re-spawns
 * whichever of the two it was started as for its enqueuing process.
 */
import type { WakeSettings, WakeSide } from "./waking.js"
import { isWakeId, runEnqueuer, runWake } from "./waking.js"

const [scenario, side, file, settingsJson] = process.argv.slice(2)
const isSide = (s: string | undefined): s is WakeSide => s === "alkstore" || s === "raw" || s === "plainjob"

try {
  if (scenario === "enqueuer" && isSide(side) && file) {
    await runEnqueuer(side, file) // exits itself when process A says "done"
  } else if (scenario && isWakeId(scenario) && isSide(side) && file && settingsJson) {
    const result = await runWake(scenario, side, file, JSON.parse(settingsJson) as WakeSettings)
    process.stdout.write(`RESULT ${JSON.stringify(result)}\n`)
    process.exit(0)
  } else {
    console.error("usage: waking-child.ts <wake-inprocess|wake-outside|wake-crossprocess|idle-cpu|enqueuer> <alkstore|raw|plainjob> <dbfile> [settings-json]")
    process.exit(2)
  }
} catch (e) {
  console.error(e instanceof Error ? (e.stack ?? e.message) : String(e))
  process.exit(1)
}
