import { Effect } from "effect"
import { InvalidSpec } from "../StoreError.js"
import { printable } from "./names.js"

const unitMillis = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const

/** The longest interval v1 accepts. */
export const maxIntervalMillis = 3650 * unitMillis.d

/**
 * The v1 grammar, exactly `@every <n><s|m|h|d>`: one ASCII space, a lowercase
 * unit, no sign, no leading zeros, at most 3650 days. Cron strings, `@daily`
 * and whitespace variants are rejected.
 */
export const parseEvery = (spec: string): Effect.Effect<number, InvalidSpec> => {
  if (typeof spec !== "string") return Effect.fail(new InvalidSpec({ spec: printable(spec), reason: "must be a string" }))
  const match = /^@every ([1-9][0-9]*)([smhd])$/.exec(spec)
  if (match === null) {
    return Effect.fail(new InvalidSpec({ spec, reason: "v1 accepts exactly `@every <n><s|m|h|d>`" }))
  }
  const n = Number(match[1])
  const millis = n * unitMillis[match[2] as keyof typeof unitMillis]
  if (!Number.isSafeInteger(n) || !(millis <= maxIntervalMillis)) {
    return Effect.fail(new InvalidSpec({ spec, reason: "the interval must be at most 3650 days" }))
  }
  return Effect.succeed(millis)
}

/** The most boundaries one schedule fires in one tick; past it, skip forward. A contract constant. */
export const catchUpCap = 64

/**
 * The boundaries of one schedule due at `now` (oldest first, at most
 * `catchUpCap`), and the boundary it advances to: whole intervals on, or the
 * first boundary after `now` when the cap cut the catch-up short.
 */
export const dueBoundaries = (nextFireAt: number, intervalMillis: number, now: number) => {
  const boundaries: Array<number> = []
  let at = nextFireAt
  while (at <= now && boundaries.length < catchUpCap) {
    boundaries.push(at)
    at += intervalMillis
  }
  if (at <= now) at = nextFireAt + (Math.floor((now - nextFireAt) / intervalMillis) + 1) * intervalMillis
  return { boundaries, next: at }
}
