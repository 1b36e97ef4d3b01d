/** The cap of the retry curve: a contract constant, not a knob. */
export const backoffCapMillis = 3_600_000

/**
 * The one retry curve (CONTRACT §3): `min(base × 2^(attempts−1), 1 h)`, where
 * `attempts` counts the claim that failed (the first failure waits `base`).
 */
export const backoffMillis = (baseMillis: number, attempts: number): number => {
  if (baseMillis <= 0) return 0
  const exponent = Math.max(0, attempts - 1)
  if (exponent >= 52) return backoffCapMillis
  return Math.min(baseMillis * 2 ** exponent, backoffCapMillis)
}
