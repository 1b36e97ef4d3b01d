/**
 * The order in which a check injects its kinds of fault. Every kind comes
 * once first, in a seeded shuffle, and only then at random by weight: a short
 * run that happened to draw one kind only (23 kills and no freeze on one CI
 * run) tested half of what it claims to, and its "too short" guard failed it.
 */
import type { Rng } from "./rng.js"

export const faultDeck = <K extends string>(rng: Rng, weights: Readonly<Record<K, number>>): (() => K) => {
  const kinds = Object.keys(weights) as Array<K>
  const total = kinds.reduce((sum, k) => sum + weights[k], 0)
  const first = [...kinds]
  for (let i = first.length - 1; i > 0; i--) {
    const j = rng.int(0, i)
    ;[first[i], first[j]] = [first[j]!, first[i]!]
  }
  const weighted = (): K => {
    let x = rng.next() * total
    for (const k of kinds) {
      x -= weights[k]
      if (x < 0) return k
    }
    return kinds[kinds.length - 1]!
  }
  return () => first.shift() ?? weighted()
}
