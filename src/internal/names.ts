import { Effect } from "effect"
import { InvalidName, ReservedName } from "../StoreError.js"

/** Every storage object and engine-derived name carries this prefix. */
export const reservedPrefix = "__alkstore"

/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/** The fallback rule on its own, so a test can hold it to the native one. */
export const isWellFormedByPattern = (text: string): boolean => !loneSurrogate.test(text)

const nativeIsWellFormed = (String.prototype as { isWellFormed?: (this: string) => boolean }).isWellFormed

/**
 * Whether `text` is well-formed UTF-16 (no lone surrogate): only then is it
 * stored and read back as the same string (SQLite, like PostgreSQL, keeps
 * UTF-8, and a lone surrogate comes back as U+FFFD). `String.prototype.isWellFormed`
 * where the runtime has it (not in every Node 20 lib typing), else the same rule as a regex.
 */
export const isWellFormed: (text: string) => boolean = nativeIsWellFormed !== undefined
  ? (text) => nativeIsWellFormed.call(text)
  : isWellFormedByPattern

/** `text` with each lone surrogate replaced by U+FFFD (what `String.prototype.toWellFormed` does). */
export const toWellFormed = (text: string): string =>
  isWellFormed(text) ? text : text.replace(new RegExp(loneSurrogate.source, "g"), "\uFFFD")

/** The reason a string the store keeps and compares is refused when it is not well-formed. */
export const notWellFormedReason = "must be well-formed UTF-16 (it has a lone surrogate, which storage cannot keep)"

/**
 * The longest name, key, worker id or owner the store keeps, in UTF-8 bytes.
 * PostgreSQL cannot index a B-tree entry over about 2 700 bytes (a third of a
 * page), and names and keys are indexed together (`queue`, `idempotency_key`);
 * SQLite has no such limit, but both engines must accept the same input.
 */
export const maxTextBytes = 1000

/** Whether `text` fits in `maxTextBytes` (no encoding for short strings: 3 bytes per UTF-16 unit at most). */
export const fitsStorage = (text: string): boolean =>
  text.length * 3 <= maxTextBytes || Buffer.byteLength(text, "utf8") <= maxTextBytes

export const tooLongReason = `must be at most ${maxTextBytes} bytes in UTF-8`

/** PostgreSQL's text cannot hold U+0000; both engines must accept the same input, so neither takes it. */
export const nulReason = "must not contain NUL (U+0000), which PostgreSQL text cannot hold"

/**
 * `String(value)`, or — for a value that has no text (`Object.create(null)`,
 * a throwing `toString`) — its `Object.prototype.toString` tag, else
 * `"<unprintable>"`: the text of a bad input or a failure never throws.
 */
export const printable = (value: unknown): string => {
  try {
    return String(value)
  } catch {
    try {
      return Object.prototype.toString.call(value)
    } catch {
      return "<unprintable>"
    }
  }
}

/** The namespace rule shared by queue, lock, schedule and outbox names (CONTRACT §2). */
export const checkName = (name: string): InvalidName | ReservedName | undefined => {
  if (typeof name !== "string") return new InvalidName({ name: printable(name), reason: "must be a string" })
  if (name.length === 0) return new InvalidName({ name, reason: "must not be empty" })
  if (!isWellFormed(name)) return new InvalidName({ name, reason: notWellFormedReason })
  if (!fitsStorage(name)) return new InvalidName({ name, reason: tooLongReason })
  if (name.includes("\u0000")) return new InvalidName({ name, reason: nulReason })
  if (name.startsWith(reservedPrefix)) return new ReservedName({ name })
  return undefined
}

export const validateName = (name: string): Effect.Effect<string, InvalidName | ReservedName> => {
  const error = checkName(name)
  return error === undefined ? Effect.succeed(name) : Effect.fail(error)
}

/** The backing queue of an outbox: unreachable through `Queues` because of the prefix. */
export const outboxQueueName = (name: string) => `${reservedPrefix}_outbox:${name}`

/** The leadership lock of the scheduler. */
export const schedulerLockName = `${reservedPrefix}_scheduler`
