import type { Duration, Schema } from "effect"
import { Effect } from "effect"
import { InvalidOptions } from "../StoreError.js"
import {
  checkDuration,
  checkInstant,
  checkInstantAfter,
  type Checked,
  checkOptionalDuration,
  fromChecked,
  type InstantInput,
  isInvalid
} from "./duration.js"
import { failureText } from "./errorText.js"
import type { NewJob } from "./engine.js"
import { fitsStorage, isWellFormed, notWellFormedReason, nulReason, printable, tooLongReason } from "./names.js"

/** The contract defaults of a queue handle (CONTRACT §3), also stamped on scheduler fires. */
export const queueDefaults: Stamp = {
  visibilityTimeoutMillis: 300_000,
  maxAttempts: 3,
  backoffBaseMillis: 5_000,
  expiresMillis: undefined
}

/** The outbox's defaults (CONTRACT §6). */
export const outboxDefaults: Stamp = {
  visibilityTimeoutMillis: 60_000,
  maxAttempts: 5,
  backoffBaseMillis: 5_000,
  expiresMillis: undefined
}

/** The resolved values written onto every job row at enqueue. */
export interface Stamp {
  readonly visibilityTimeoutMillis: number
  readonly maxAttempts: number
  readonly backoffBaseMillis: number
  readonly expiresMillis: number | undefined
}

export interface QueueOptionsInput {
  readonly visibilityTimeout?: Duration.DurationInput | undefined
  readonly maxAttempts?: number | undefined
  readonly backoffBase?: Duration.DurationInput | undefined
  readonly expires?: Duration.DurationInput | undefined
  readonly schema?: Schema.Schema<any, any, never> | undefined
}

export interface EnqueueOptionsInput {
  readonly priority?: number | undefined
  readonly maxAttempts?: number | undefined
  readonly expires?: Duration.DurationInput | undefined
  readonly delay?: Duration.DurationInput | undefined
  readonly runAt?: InstantInput | undefined
  readonly key?: string | undefined
  readonly group?: string | undefined
}

export const checkSafeInteger = (field: string, value: number | undefined, min?: number): Checked<number | undefined> => {
  if (value === undefined) return undefined
  if (typeof value !== "number" || !Number.isSafeInteger(value)) {
    return new InvalidOptions({ field, reason: "must be a safe integer" })
  }
  if (min !== undefined && value < min) return new InvalidOptions({ field, reason: `must be at least ${min}` })
  return value
}

export const safeInteger = (field: string, value: number | undefined, min?: number) =>
  Effect.suspend(() => fromChecked(checkSafeInteger(field, value, min)))

/**
 * A string the store keeps and compares (an idempotency key, a worker id, a
 * lock owner): non-empty and well-formed, for the same reason as names.
 */
export const checkText = (field: string, value: string): InvalidOptions | undefined => {
  if (typeof value !== "string" || value.length === 0) {
    return new InvalidOptions({ field, reason: "must be a non-empty string" })
  }
  if (!isWellFormed(value)) return new InvalidOptions({ field, reason: notWellFormedReason })
  if (!fitsStorage(value)) return new InvalidOptions({ field, reason: tooLongReason })
  return value.includes("\u0000") ? new InvalidOptions({ field, reason: nulReason }) : undefined
}

export const validateText = (field: string, value: string): Effect.Effect<string, InvalidOptions> => {
  const error = checkText(field, value)
  return error === undefined ? Effect.succeed(value) : Effect.fail(error)
}

/** An options object whose fields could not be read (a getter that throws, a JS caller's Proxy). */
export const unreadableOptions = (cause: unknown) =>
  new InvalidOptions({ field: "options", reason: `could not be read: ${failureText(cause)}` })

/** `check`, whose reads of nested options may throw (a getter of `rate`): InvalidOptions on "options" then. */
export const readingOptions = <A>(check: () => Checked<A>): Checked<A> => {
  try {
    return check()
  } catch (cause) {
    return unreadableOptions(cause)
  }
}

/**
 * An options object as a plain copy of what it answers, read once: its own
 * fields and those its class gives it (getters, inherited fields; not its
 * class's methods). A getter that throws (or a Proxy's trap) is
 * `InvalidOptions` on "options", never a defect; `null` is no options
 * (`undefined`); a primitive is read as having no fields.
 */
export const ownOptions = <O>(
  options: O | null | undefined,
  /** Keep functions the class gives (settings that are functions, as a PostgreSQL client's `transformQueryNames`). */
  keepMethods = false
): Checked<O | undefined> => {
  if (options === undefined || options === null) return undefined
  if (typeof options !== "object") return options
  try {
    const copy: Record<string, unknown> = {}
    for (let level: object | null = options; level !== null && level !== Object.prototype; level = Object.getPrototypeOf(level)) {
      const own = level === options
      for (const key of Object.getOwnPropertyNames(level)) {
        if (Object.hasOwn(copy, key)) continue
        // From the class: its getters and fields, not its methods (nor its constructor).
        if (!own && (key === "constructor" || (!keepMethods && typeof Object.getOwnPropertyDescriptor(level, key)?.value === "function"))) {
          continue
        }
        // Defined, not assigned: a field named `__proto__` stays a field.
        Object.defineProperty(copy, key, {
          value: (options as Record<string, unknown>)[key],
          enumerable: true,
          writable: true,
          configurable: true
        })
      }
    }
    return copy as O
  } catch (cause) {
    return unreadableOptions(cause)
  }
}

/**
 * A SQLite file to open, checked before anything is opened: SQLite cuts a
 * path at a NUL (`x.db\0.bak` would open `x.db`), and a lone surrogate is
 * written as another byte name than the one given.
 */
export const checkFilename = (filename: unknown): Effect.Effect<string, InvalidOptions> => {
  const invalid = (reason: string) => Effect.fail(new InvalidOptions({ field: "filename", reason }))
  if (typeof filename !== "string") return invalid(`is required: a path, ":memory:" or "" (got ${printable(filename)})`)
  if (filename.includes("\u0000")) return invalid("must not contain NUL (U+0000): SQLite would open the path cut at it")
  if (!isWellFormed(filename)) return invalid(notWellFormedReason)
  return Effect.succeed(filename)
}

/** A check of a function argument that must be a function (a handler, a delivery): before anything is claimed. */
export const checkFunction = (field: string, value: unknown): Effect.Effect<void, InvalidOptions> =>
  typeof value === "function" ? Effect.void : Effect.fail(new InvalidOptions({ field, reason: "must be a function" }))

/** A handle's defaults over the base defaults (queue or outbox). */
export const resolveQueueOptions = (
  base: Stamp,
  options: QueueOptionsInput | undefined
): Effect.Effect<Stamp, InvalidOptions> =>
  Effect.suspend(() => {
    // `null` is no options, as everywhere else options are read (`opts?.`): never a TypeError. The callers
    // read the options once (`ownOptions`) and hand over that copy.
    if (options === undefined || options === null) return Effect.succeed(base)
    const visibilityTimeout = checkOptionalDuration("visibilityTimeout", options.visibilityTimeout, true)
    if (isInvalid(visibilityTimeout)) return Effect.fail(visibilityTimeout)
    const maxAttempts = checkSafeInteger("maxAttempts", options.maxAttempts, 1)
    if (isInvalid(maxAttempts)) return Effect.fail(maxAttempts)
    const backoffBase = checkOptionalDuration("backoffBase", options.backoffBase)
    if (isInvalid(backoffBase)) return Effect.fail(backoffBase)
    const expires = checkOptionalDuration("expires", options.expires, true)
    if (isInvalid(expires)) return Effect.fail(expires)
    return Effect.succeed({
      visibilityTimeoutMillis: visibilityTimeout ?? base.visibilityTimeoutMillis,
      maxAttempts: maxAttempts ?? base.maxAttempts,
      backoffBaseMillis: backoffBase ?? base.backoffBaseMillis,
      expiresMillis: expires ?? base.expiresMillis
    })
  })

/** One enqueue, resolved: everything the engine writes except the payload. */
export interface ResolvedEnqueue {
  readonly priority: number
  readonly runAt: number
  readonly maxAttempts: number
  readonly visibilityTimeoutMillis: number
  readonly backoffBaseMillis: number
  readonly expiresAt: number | undefined
  readonly key: string | undefined
  /** The job's group; `""` for none (a given group is never empty). */
  readonly group: string
}

/** The row an enqueue writes: `resolved` options stamped onto one encoded payload of `queue`. */
export const jobOf = (
  queue: string,
  resolved: ResolvedEnqueue,
  payload: string,
  at: number,
  traceContext: string | undefined
): NewJob => ({
  queue,
  payload,
  createdAt: at,
  priority: resolved.priority,
  runAt: resolved.runAt,
  maxAttempts: resolved.maxAttempts,
  visibilityTimeoutMillis: resolved.visibilityTimeoutMillis,
  backoffBaseMillis: resolved.backoffBaseMillis,
  expiresAt: resolved.expiresAt,
  key: resolved.key,
  traceContext,
  group: resolved.group
})

/**
 * Validates `EnqueueOpts` and stamps them over the handle's defaults at
 * `now`. Every instant the job is written with (runAt, expiry) and its first
 * lease end (runAt + visibility timeout) must be one a `DateTime` can hold;
 * later lease ends are kept in range by the duration cap (`maxDurationMillis`).
 */
export const checkEnqueue = (
  stamp: Stamp,
  options: EnqueueOptionsInput | undefined,
  now: number
): Checked<ResolvedEnqueue> => {
  // Read in place (no copy on the hot path): a getter that throws is InvalidOptions, never a defect.
  // `readingOptions` inlined: enqueue 1/tx is a bench row at its target, and that costs it a closure a call.
  try {
    return checkEnqueueOptions(stamp, options, now)
  } catch (cause) {
    return unreadableOptions(cause)
  }
}

const checkEnqueueOptions = (
  stamp: Stamp,
  options: EnqueueOptionsInput | undefined,
  now: number
): Checked<ResolvedEnqueue> => {
  if (options === undefined || options === null) {
    const lease = checkInstantAfter("visibilityTimeout", now, stamp.visibilityTimeoutMillis)
    if (isInvalid(lease)) return lease
    const expiresAt = stamp.expiresMillis === undefined ? undefined : checkInstantAfter("expires", now, stamp.expiresMillis)
    if (isInvalid(expiresAt)) return expiresAt
    return {
      priority: 0,
      runAt: now,
      maxAttempts: stamp.maxAttempts,
      visibilityTimeoutMillis: stamp.visibilityTimeoutMillis,
      backoffBaseMillis: stamp.backoffBaseMillis,
      expiresAt,
      key: undefined,
      group: ""
    }
  }
  // Each field read once (a getter or a Proxy answers each read anew): the value checked is the value written.
  const {
    delay: delayInput,
    expires: expiresInput,
    group,
    key,
    maxAttempts: maxAttemptsInput,
    priority: priorityInput,
    runAt: runAtInput
  } = options
  const priority = checkSafeInteger("priority", priorityInput)
  if (isInvalid(priority)) return priority
  const maxAttempts = checkSafeInteger("maxAttempts", maxAttemptsInput, 1)
  if (isInvalid(maxAttempts)) return maxAttempts
  const expires = checkOptionalDuration("expires", expiresInput)
  if (isInvalid(expires)) return expires
  if (delayInput !== undefined && runAtInput !== undefined) {
    return new InvalidOptions({ field: "delay", reason: "delay and runAt cannot be given together" })
  }
  const delay = checkOptionalDuration("delay", delayInput)
  if (isInvalid(delay)) return delay
  const runAtField = runAtInput !== undefined ? "runAt" : delay !== undefined ? "delay" : "visibilityTimeout"
  const runAt = runAtInput !== undefined
    ? checkInstant("runAt", runAtInput)
    : checkInstantAfter("delay", now, delay ?? 0)
  if (isInvalid(runAt)) return runAt
  const keyError = key === undefined ? undefined : checkText("key", key)
  if (keyError !== undefined) return keyError
  const groupError = group === undefined ? undefined : checkText("group", group)
  if (groupError !== undefined) return groupError
  const expiresAfter = expires ?? stamp.expiresMillis
  const expiresAt = expiresAfter === undefined ? undefined : checkInstantAfter("expires", now, expiresAfter)
  if (isInvalid(expiresAt)) return expiresAt
  if (expiresAt !== undefined && expiresAt <= runAt) {
    return new InvalidOptions({ field: "expires", reason: "the job would expire at or before it becomes due" })
  }
  // The first lease's end; named after what put the job so late (its runAt, its delay, or the clock itself).
  const lease = checkInstantAfter(runAtField, runAt, stamp.visibilityTimeoutMillis)
  if (isInvalid(lease)) return lease
  return {
    priority: priority ?? 0,
    runAt,
    maxAttempts: maxAttempts ?? stamp.maxAttempts,
    visibilityTimeoutMillis: stamp.visibilityTimeoutMillis,
    backoffBaseMillis: stamp.backoffBaseMillis,
    expiresAt,
    key,
    group: group ?? ""
  }
}

/**
 * Whether a job could have this id (a positive safe integer): any other number names no job, on every
 * engine (PostgreSQL would refuse it as a `bigint` with an error, SQLite finds no row).
 */
export const isJobId = (id: unknown): id is number => typeof id === "number" && Number.isSafeInteger(id) && id >= 1

/** A positive batch size or list limit. */
export const positiveCount = (field: string, value: number, max = Number.MAX_SAFE_INTEGER) =>
  typeof value === "number" && Number.isSafeInteger(value) && value >= 1 && value <= max
    ? Effect.succeed(value)
    : Effect.fail(
      new InvalidOptions({
        field,
        reason: max === Number.MAX_SAFE_INTEGER ? "must be a whole number of at least 1" : `must be a whole number from 1 to ${max}`
      })
    )

/** The most handlers one `process` runs at once: each is a fiber of its own, allocated up front. */
export const maxProcessConcurrency = 100_000

/** A queue's limits as every engine stores them (CONTRACT §9); `null` for a limit not set. */
export interface ResolvedLimits {
  readonly concurrency: number | null
  readonly rateLimit: number | null
  readonly ratePerMillis: number | null
  readonly groupConcurrency: number | null
  readonly groupRateLimit: number | null
  readonly groupRatePerMillis: number | null
}

const checkRate = (
  field: string,
  rate: { readonly limit: number; readonly per: Duration.DurationInput } | undefined
): Checked<readonly [number, number] | undefined> => {
  if (rate === undefined) return undefined
  if (typeof rate !== "object" || rate === null) {
    return new InvalidOptions({ field, reason: "must be an object { limit, per }" })
  }
  const limit = checkSafeInteger(`${field}.limit`, rate.limit, 1)
  if (isInvalid(limit)) return limit
  if (limit === undefined) return new InvalidOptions({ field: `${field}.limit`, reason: "is required" })
  if (rate.per === undefined) return new InvalidOptions({ field: `${field}.per`, reason: "is required" })
  const per = checkDuration(`${field}.per`, rate.per, true)
  if (isInvalid(per)) return per
  return [limit, per]
}

/** Validates `Queues.setLimits`' argument; the error names the field (`"rate.per"`, `"groupConcurrency"`, …). */
export const checkLimits = (limits: {
  readonly concurrency?: number | undefined
  readonly rate?: { readonly limit: number; readonly per: Duration.DurationInput } | undefined
  readonly groupConcurrency?: number | undefined
  readonly groupRate?: { readonly limit: number; readonly per: Duration.DurationInput } | undefined
}): Checked<ResolvedLimits> => {
  if (typeof limits !== "object" || limits === null) {
    return new InvalidOptions({ field: "limits", reason: "must be an object" })
  }
  const concurrency = checkSafeInteger("concurrency", limits.concurrency, 1)
  if (isInvalid(concurrency)) return concurrency
  const rate = checkRate("rate", limits.rate)
  if (isInvalid(rate)) return rate
  const groupConcurrency = checkSafeInteger("groupConcurrency", limits.groupConcurrency, 1)
  if (isInvalid(groupConcurrency)) return groupConcurrency
  const groupRate = checkRate("groupRate", limits.groupRate)
  if (isInvalid(groupRate)) return groupRate
  return {
    concurrency: concurrency ?? null,
    rateLimit: rate?.[0] ?? null,
    ratePerMillis: rate?.[1] ?? null,
    groupConcurrency: groupConcurrency ?? null,
    groupRateLimit: groupRate?.[0] ?? null,
    groupRatePerMillis: groupRate?.[1] ?? null
  }
}
