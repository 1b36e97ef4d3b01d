import { Data } from "effect"

/**
 * The CLI's exit codes (docs/operations.md lists them): scripts tell a bad
 * command line from a database they cannot reach from an operation the store
 * refused.
 */
export const exitCodes = {
  ok: 0,
  /** The store refused the operation or found nothing: no such job, not dead, … */
  refused: 1,
  /** Bad arguments or options (the message says which); nothing was done. */
  usage: 2,
  /** The database could not be opened or reached, or this build has no engine for it. */
  unavailable: 3,
  /** The database failed during the operation (a storage error). */
  storage: 4,
  /** `dashboard` could not listen on its address: the port in use, no such address, no permission. */
  listen: 5,
  /** A command other than `watch` or `dashboard` stopped by Ctrl-C or SIGTERM before it was done (128 + SIGINT). */
  interrupted: 130
} as const

/** A bad argument caught by the CLI itself (exit 2). */
export class UsageError extends Data.TaggedError("UsageError")<{ readonly reason: string }> {
  override get message() {
    return this.reason
  }
}

/** The operation found nothing to do, or was refused (exit 1). */
export class Refused extends Data.TaggedError("Refused")<{ readonly reason: string }> {
  override get message() {
    return this.reason
  }
}

const usageTags = new Set(["UsageError", "InvalidOptions", "InvalidName", "ReservedName", "InvalidSpec", "InvalidPayload"])
const unavailableTags = new Set(["DatabaseUnavailable"])

/**
 * A failure's text: its message, else its cause's (some errors, such as the
 * platform's, carry the reason in `cause` only), else its tag.
 */
const textOf = (error: unknown, depth = 0): string => {
  if (typeof error !== "object" || error === null) return String(error)
  const message = (error as { message?: unknown }).message
  if (typeof message === "string" && message.trim() !== "") return message
  const cause = (error as { cause?: unknown }).cause
  if (cause !== undefined && depth < 5) {
    const text = textOf(cause, depth + 1)
    if (text !== "") return text
  }
  const tag = (error as { _tag?: unknown })._tag
  return typeof tag === "string" ? tag : String(error)
}

/** The exit code and the message of a failure. */
export const classify = (error: unknown): { readonly code: number; readonly message: string } => {
  const tag = (error as { _tag?: unknown } | null)?._tag
  const message = textOf(error)
  if (typeof tag === "string") {
    if (tag === "Refused") return { code: exitCodes.refused, message }
    if (usageTags.has(tag)) return { code: exitCodes.usage, message }
    if (unavailableTags.has(tag)) return { code: exitCodes.unavailable, message }
    if (tag === "ListenFailed") return { code: exitCodes.listen, message }
  }
  return { code: exitCodes.storage, message: `storage error: ${message}` }
}
