/**
 * Seeded randomness for the chaos programs: every random choice a check makes
 * comes from one of these, so a failing run replays with `--seed`.
 */
export interface Rng {
  readonly seed: number
  /** Uniform in [0, 1). */
  readonly next: () => number
  /** Integer in [lo, hi]. */
  readonly int: (lo: number, hi: number) => number
  readonly pick: <A>(items: ReadonlyArray<A>) => A
  readonly chance: (p: number) => boolean
  /** An independent stream derived from this one (e.g. for a child process). */
  readonly fork: () => number
}

/** mulberry32: small, fast, and good enough to drive fault schedules. */
export const makeRng = (seed: number): Rng => {
  let state = seed >>> 0
  const next = () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (lo: number, hi: number) => lo + Math.floor(next() * (hi - lo + 1))
  return {
    seed,
    next,
    int,
    pick: (items) => items[int(0, items.length - 1)]!,
    chance: (p) => next() < p,
    fork: () => int(1, 2 ** 31 - 1)
  }
}
