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
  storage: 4
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

/** The exit code and the message of a failure. */
export const classify = (error: unknown): { readonly code: number; readonly message: string } => {
  const tag = (error as { _tag?: unknown } | null)?._tag
  const message = error instanceof Error ? error.message : String(error)
  if (typeof tag === "string") {
    if (tag === "Refused") return { code: exitCodes.refused, message }
    if (usageTags.has(tag)) return { code: exitCodes.usage, message }
    if (unavailableTags.has(tag)) return { code: exitCodes.unavailable, message }
  }
  return { code: exitCodes.storage, message: `storage error: ${message}` }
}
