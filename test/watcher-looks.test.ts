import { describe, expect, it } from "vitest"
import { afterEmptyLook, newLookRound, walWritten } from "../src/internal/sqlite/watcher.js"

/** The looks of one round, each `stepMillis` after the last, from a WAL write event at time 0. */
const looksOf = (round: ReturnType<typeof newLookRound>, stepMillis: number) => {
  const looks: Array<string> = []
  for (let at = 0; looks.at(-1) !== "stop"; at += stepMillis) looks.push(afterEmptyLook(round, at))
  return looks
}

describe("the cross-process watcher's looks after a WAL write that shows no commit yet", () => {
  it("nap between looks until 2 ms after the event (a writer that lost its CPU is still caught), then 1 ms timers", () => {
    const round = newLookRound()
    walWritten(round, 0, false, false)
    const looks = looksOf(round, 0.12)
    // 0.12 ms per look: 17 naps fit before 2 ms (then five timed looks), where a spin ended 0.4 ms after it.
    expect(looks.filter((l) => l === "nap")).toHaveLength(17)
    expect(looks.slice(17)).toEqual(["timer", "timer", "timer", "timer", "timer", "stop"])
  })

  it("nap at most 20 times per round, however long a foreign transaction keeps writing", () => {
    const round = newLookRound()
    walWritten(round, 0, false, false)
    let naps = 0
    for (let at = 0.01; at < 50; at += 0.01) {
      // An event per frame of a long transaction: each extends the round's time, not its naps.
      walWritten(round, at, false, true)
      if (afterEmptyLook(round, at) === "nap") naps++
    }
    expect(naps).toBe(20)
  })

  it("give the later writes of a commit just seen three naps, not a round, then the timers", () => {
    const round = newLookRound()
    walWritten(round, 0, true, false)
    expect(looksOf(round, 0.12)).toEqual(["nap", "nap", "nap", "timer", "timer", "timer", "timer", "timer", "stop"])
  })

  it("keep napping while the writes of a commit that follows one just seen go on (a WAL restart moved data_version)", () => {
    // Before: no naps for an event within 2 ms of a commit seen, so this commit waited a 1 ms timer.
    const round = newLookRound()
    walWritten(round, 0, true, false)
    const looks: Array<string> = []
    // four frames 50 µs apart, looks 0.12 ms apart: the commit is visible 0.1 ms after its last write
    for (const [at, event] of [[0.05, true], [0.1, true], [0.15, true], [0.17, false], [0.29, false]] as const) {
      if (event) walWritten(round, at, true, true)
      looks.push(afterEmptyLook(round, at))
    }
    expect(looks).toEqual(["nap", "nap", "nap", "nap", "nap"])
  })

  it("give a new round its naps again", () => {
    const round = newLookRound()
    walWritten(round, 0, false, false)
    looksOf(round, 0.01)
    walWritten(round, 10, false, false)
    expect(afterEmptyLook(round, 10.1)).toBe("nap")
  })
})
