/**
 * fast-check settings shared by the property tests: a fixed seed in CI (a
 * failure there replays exactly), a fresh one locally (printed on failure:
 * replay with ALKSTORE_FC_SEED=<seed>).
 */
import { fc } from "@fast-check/vitest"

const fixed = process.env.ALKSTORE_FC_SEED ?? (process.env.CI !== undefined && process.env.CI !== "" ? "20261201" : undefined)

export const fcParams = (numRuns: number): { numRuns: number; seed?: number } => ({
  numRuns,
  ...(fixed !== undefined ? { seed: Number(fixed) } : {})
})

fc.configureGlobal(fcParams(100))
