/**
 * Event-loop delay with the machine's share taken out. A timer due every
 * `intervalMs` records, each time it fires, how late it was (the loop's
 * delay) and how long the main thread waited for a CPU meanwhile (Linux's
 * schedstat: runnable, not running). The difference is the process's own:
 * synchronous stretches and blocking sleeps (SQLite's `busy_timeout` sleeps,
 * it does not wait for a CPU), which is what a store must keep short.
 *
 * Eight busy processes on two cores each wait ~650 ms a second for a CPU, so
 * the raw delay's p99 is the OS's time slicing (32–69 ms in CI runs here),
 * not the store. A wait accrued before the timer was due (while other work
 * ran) is subtracted too, so the process's own delay may read up to one
 * interval low.
 */
import * as fs from "node:fs"
import { createHistogram, performance } from "node:perf_hooks"

/** The main thread's time runnable but waiting for a CPU so far (ms), or undefined off Linux. */
export const runqueueWaitMs = (): number | undefined => {
  try {
    const waited = Number(fs.readFileSync("/proc/thread-self/schedstat", "utf8").split(" ")[1]) / 1e6
    return Number.isFinite(waited) ? waited : undefined
  } catch {
    return undefined
  }
}

export interface LoopDelay {
  /** Whether the machine's share could be read (Linux); else `ownP99Ms` is the raw delay's. */
  readonly schedstat: boolean
  readonly p99Ms: number
  readonly maxMs: number
  /** The delay less the CPU wait of the same stretch: the process's own. */
  readonly ownP99Ms: number
  readonly ownMaxMs: number
  /** The CPU wait while sampling (ms). */
  readonly runqueueWaitMs: number
}

const record = (histogram: ReturnType<typeof createHistogram>, ms: number) =>
  histogram.record(Math.max(1, Math.round(ms * 1e6)))

/** Starts sampling at once; `stop` ends it and returns the figures. */
export const sampleLoopDelay = (intervalMs = 5) => {
  const all = createHistogram()
  const own = createHistogram()
  const waitedFrom = runqueueWaitMs()
  let lastWait = waitedFrom
  let due = performance.now() + intervalMs
  let timer: NodeJS.Timeout | undefined
  const tick = () => {
    const now = performance.now()
    const waited = runqueueWaitMs()
    const late = Math.max(0, now - due)
    const machine = waited !== undefined && lastWait !== undefined ? Math.min(late, waited - lastWait) : 0
    record(all, late)
    record(own, late - machine)
    lastWait = waited
    due = now + intervalMs
    timer = setTimeout(tick, intervalMs)
  }
  timer = setTimeout(tick, intervalMs)
  return {
    stop: (): LoopDelay => {
      clearTimeout(timer)
      const waitedTo = runqueueWaitMs()
      const ms = (ns: number) => (Number.isFinite(ns) ? ns / 1e6 : 0)
      return {
        schedstat: waitedFrom !== undefined && waitedTo !== undefined,
        p99Ms: ms(all.percentile(99)),
        maxMs: ms(all.max),
        ownP99Ms: ms(own.percentile(99)),
        ownMaxMs: ms(own.max),
        runqueueWaitMs: waitedFrom !== undefined && waitedTo !== undefined ? waitedTo - waitedFrom : NaN
      }
    }
  }
}
