/**
 * The chaos drivers' fault order (chaos/lib/faultDeck.ts): every kind comes
 * within the first draws whatever the seed, so a short run always injects
 * each kind it claims to test (one CI run drew 23 kills and no freeze from
 * independent coin flips), the rest follows the weights, and a seed replays.
 */
import { describe, expect, it } from "vitest"
import { faultDeck } from "../chaos/lib/faultDeck.js"
import { makeRng } from "../chaos/lib/rng.js"

const draw = <K extends string>(seed: number, weights: Record<K, number>, n: number) => {
  const next = faultDeck(makeRng(seed), weights)
  return Array.from({ length: n }, next)
}

describe("the chaos fault deck", () => {
  it("deals every kind within the first draws, for every seed", () => {
    for (let seed = 1; seed <= 2_000; seed++) {
      expect(new Set(draw(seed, { freeze: 0.3, kill: 0.7 }, 2))).toEqual(new Set(["freeze", "kill"]))
      expect(new Set(draw(seed, { a: 1, b: 1, c: 1, d: 1 }, 4))).toEqual(new Set(["a", "b", "c", "d"]))
    }
  })

  it("follows the weights after the first round", () => {
    const later = draw(7, { freeze: 0.3, kill: 0.7 }, 20_002).slice(2)
    const share = later.filter((k) => k === "freeze").length / later.length
    expect(share).toBeGreaterThan(0.28)
    expect(share).toBeLessThan(0.32)
  })

  it("replays the same order for the same seed and a different one for another", () => {
    expect(draw(42, { kill: 0.5, freeze: 0.5 }, 50)).toEqual(draw(42, { kill: 0.5, freeze: 0.5 }, 50))
    expect(draw(42, { kill: 0.5, freeze: 0.5 }, 50)).not.toEqual(draw(43, { kill: 0.5, freeze: 0.5 }, 50))
  })
})
