/**
 * The contention check's event-loop measure (chaos/lib/loopDelay.ts) counts
 * a blocking sleep on the main thread — what a long `busy_timeout` would be —
 * as the process's own delay: the CPU wait it takes out is only time spent
 * runnable, never asleep. Real time, because the loop's delay is what is
 * measured.
 */
import { describe, expect, it } from "vitest"
import { sampleLoopDelay } from "../chaos/lib/loopDelay.js"

const pause = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

describe("the contention check's event-loop measure", () => {
  it("counts an 80 ms blocking sleep on the main thread as the process's own delay", async () => {
    const sampler = sampleLoopDelay(5)
    await pause(20)
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 80)
    await pause(20)
    const delay = sampler.stop()
    expect(delay.schedstat).toBe(process.platform === "linux")
    // the timer due 5 ms after its last run fires once the sleep ends: ~75 ms late at least (70 leaves room
    // for the sleep's and the histogram's precision)
    expect(delay.maxMs).toBeGreaterThanOrEqual(70)
    // the thread slept 80 ms of that stretch, so the CPU wait taken out of it is at most the rest: whatever
    // the machine's load, the stretch's own delay is the sleep's
    expect(delay.ownMaxMs).toBeGreaterThanOrEqual(70)
    expect(delay.ownMaxMs).toBeLessThanOrEqual(delay.maxMs)
  })

  it("reads a loop left alone as short delays", async () => {
    const sampler = sampleLoopDelay(5)
    await pause(60)
    const delay = sampler.stop()
    expect(delay.ownP99Ms).toBeLessThan(50)
    expect(delay.ownP99Ms).toBeLessThanOrEqual(delay.p99Ms)
  })
})
