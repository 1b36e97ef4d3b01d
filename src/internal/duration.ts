import { DateTime, Duration, Effect } from "effect"
import { InvalidOptions } from "../StoreError.js"

/**
 * Validators here are plain functions returning the value or the error, so
 * hot paths (every enqueue) validate without building effects; the
 * `Effect` wrappers below serve everything else.
 */
export type Checked<A> = A | InvalidOptions

export const isInvalid = (value: unknown): value is InvalidOptions => value instanceof InvalidOptions

export const fromChecked = <A>(value: Checked<A>): Effect.Effect<A, InvalidOptions> =>
  isInvalid(value) ? Effect.fail(value) : Effect.succeed(value)

/** The latest instant a `Date`, and so a `DateTime`, can hold: 8.64e15 ms after the epoch (+275760-09-13). */
export const maxInstantMillis = 8_640_000_000_000_000

/**
 * The longest duration any option takes: 50 000 000 days (about 136 900
 * years), half the instant range. Instants are checked where they are made
 * (`instantAfter`), but a lease end is made at claim time, later, by storage
 * (claim time + the job's visibility timeout): with every duration capped at
 * half the range, it stays representable for any clock before the year
 * ~138 000.
 */
export const maxDurationMillis = maxInstantMillis / 2

const pastRange = "would reach an instant past the latest a DateTime can hold (+275760-09-13)"

const durationPattern =
  /^\s*(-?(?:\d+(?:\.\d+)?|Infinity|NaN))\s+(nanos?|micros?|millis?|seconds?|minutes?|hours?|days?|weeks?)\s*$/

/**
 * Validates a `Duration.DurationInput` as given — `Duration.decode` silently
 * turns negative, NaN and infinite inputs into zero — and returns whole
 * milliseconds (sub-millisecond remainders round up, so a lease is never
 * shorter than asked).
 */
export const checkDuration = (
  field: string,
  input: Duration.DurationInput,
  positive = false
): Checked<number> => {
  const invalid = (reason: string) => new InvalidOptions({ field, reason })
  const checkMillis = (ms: number): Checked<number> => {
    if (Number.isNaN(ms)) return invalid("must not be NaN")
    if (!Number.isFinite(ms)) return invalid("must be finite")
    if (ms < 0) return invalid("must not be negative")
    const whole = Math.ceil(ms)
    if (whole > maxDurationMillis) {
      return invalid("must be at most 50000000 days (every instant it reaches must stay within what a DateTime can hold)")
    }
    if (positive && whole === 0) return invalid("must be positive")
    return whole
  }
  if (typeof input === "number") return checkMillis(input)
  if (typeof input === "bigint") return input < 0n ? invalid("must not be negative") : checkMillis(Number(input) / 1e6)
  if (Array.isArray(input)) {
    const [seconds, nanos] = input as unknown as readonly [unknown, unknown]
    if (typeof seconds !== "number" || typeof nanos !== "number") return invalid("is not a duration")
    if (Number.isNaN(seconds) || Number.isNaN(nanos)) return invalid("must not be NaN")
    if (seconds < 0 || nanos < 0) return invalid("must not be negative")
    return checkMillis(seconds * 1000 + nanos / 1e6)
  }
  if (typeof input === "string") {
    const match = durationPattern.exec(input)
    if (match === null) return invalid(`cannot read ${JSON.stringify(input)} as a duration`)
    const value = Number(match[1])
    if (Number.isNaN(value)) return invalid("must not be NaN")
    if (!Number.isFinite(value)) return invalid("must be finite")
    if (value < 0) return invalid("must not be negative")
    try {
      return checkMillis(Duration.toMillis(Duration.decode(input)))
    } catch {
      return invalid(`cannot read ${JSON.stringify(input)} as a duration`)
    }
  }
  if (Duration.isDuration(input)) return checkMillis(Duration.toMillis(input))
  return invalid("is not a duration")
}

/** An optional duration: `undefined` stays `undefined`. */
export const checkOptionalDuration = (
  field: string,
  input: Duration.DurationInput | undefined,
  positive = false
): Checked<number | undefined> => (input === undefined ? undefined : checkDuration(field, input, positive))

export const durationMillis = (
  field: string,
  input: Duration.DurationInput,
  { positive = false }: { readonly positive?: boolean } = {}
): Effect.Effect<number, InvalidOptions> => Effect.suspend(() => fromChecked(checkDuration(field, input, positive)))

export const optionalDurationMillis = (
  field: string,
  input: Duration.DurationInput | undefined,
  { positive = false }: { readonly positive?: boolean } = {}
): Effect.Effect<number | undefined, InvalidOptions> =>
  Effect.suspend(() => fromChecked(checkOptionalDuration(field, input, positive)))

/**
 * The longest a store's settings may make it wait in one timer: 24 days.
 * Effect's clock never ends a single sleep past 2^31 − 1 ms (~24.8 days; a
 * JS timer cannot hold more), so a longer poll, lease or interval would
 * silently never come round.
 */
export const maxWaitMillis = 24 * 86_400_000

/**
 * The longest wait between two renewals of a lease (a worker's heartbeat, a
 * PersistedQueue take's, a lock's): a third of a lease past ~74 days would
 * be a wait no timer fires (`maxWaitMillis`), so such leases renew daily.
 */
export const maxRenewalMillis = 86_400_000

/**
 * A store setting that is waited in one timer (`optionalDurationMillis`,
 * positive, at most `maxWaitMillis`), or `fallback` when not given.
 */
export const waitSettingMillis = (
  field: string,
  input: Duration.DurationInput | undefined,
  fallback: number
): Effect.Effect<number, InvalidOptions> =>
  Effect.flatMap(optionalDurationMillis(field, input, { positive: true }), (millis) =>
    millis !== undefined && millis > maxWaitMillis
      ? Effect.fail(
        new InvalidOptions({
          field,
          reason: "must be at most 24 days (it is waited in one timer, and a timer past ~24.8 days never fires)"
        })
      )
      : Effect.succeed(millis ?? fallback))

/** An instant given as a `Date`, a `DateTime` or epoch milliseconds. */
export type InstantInput = Date | DateTime.DateTime | number

export const checkInstant = (field: string, input: InstantInput): Checked<number> => {
  const invalid = (reason: string) => new InvalidOptions({ field, reason })
  let ms: number
  if (input instanceof Date) ms = input.getTime()
  else if (typeof input === "number") ms = input
  else if (DateTime.isDateTime(input)) ms = DateTime.toEpochMillis(input)
  else return invalid("must be a Date, a DateTime or epoch milliseconds")
  if (!Number.isFinite(ms)) return invalid("is not a valid instant")
  if (!Number.isSafeInteger(ms)) return invalid("must be whole epoch milliseconds")
  if (ms < 0) return invalid("must not be before the epoch")
  if (ms > maxInstantMillis) return invalid("is past the latest instant a DateTime can hold (+275760-09-13)")
  return ms
}

/** `at + millis`, an instant something will be stored at, when a `DateTime` can hold it. */
export const checkInstantAfter = (field: string, at: number, millis: number): Checked<number> => {
  const end = at + millis
  return end <= maxInstantMillis ? end : new InvalidOptions({ field, reason: pastRange })
}

export const instantAfter = (field: string, at: number, millis: number): Effect.Effect<number, InvalidOptions> =>
  Effect.suspend(() => fromChecked(checkInstantAfter(field, at, millis)))
