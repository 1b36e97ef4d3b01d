import { Cause } from "effect"
import { printable, toWellFormed } from "./names.js"

/**
 * The text stored as a job's `lastError` for a failure (CONTRACT §3): its
 * non-empty `message`, else its `_tag` and fields as JSON, else `String(error)`.
 * It never throws: a value whose fields throw when read falls back to
 * `printable`.
 */
export const failureText = (error: unknown): string => {
  if (typeof error === "object" && error !== null) {
    try {
      const message = (error as { message?: unknown }).message
      if (typeof message === "string" && message.length > 0) return message
      const tag = (error as { _tag?: unknown })._tag
      if (typeof tag === "string") {
        const fields: Record<string, unknown> = {}
        for (const key of Object.keys(error)) if (key !== "_tag") fields[key] = (error as Record<string, unknown>)[key]
        let json: string
        try {
          json = JSON.stringify(fields)
        } catch {
          json = "{}"
        }
        return `${tag} ${json}`
      }
    } catch {
      // a throwing getter: the value's own text, as for one without a message
    }
  }
  return printable(error)
}

/** The text stored for any cause: a failure's text, or the pretty cause of a defect (never throws). */
export const causeText = <E>(cause: Cause.Cause<E>): string => {
  const failure = Cause.failureOption(cause)
  if (failure._tag === "Some") return failureText(failure.value)
  try {
    return Cause.pretty(cause)
  } catch {
    const defect = Cause.dieOption(cause)
    return defect._tag === "Some" ? printable(defect.value) : "<unprintable error>"
  }
}

/**
 * Error text as storage keeps it alike on every engine, each character it
 * cannot hold as U+FFFD (the replacement character) — a `lastError` is read
 * by people, never compared: a NUL (PostgreSQL's text holds none), and a
 * lone surrogate (PostgreSQL's driver writes one U+FFFD, better-sqlite3
 * its three invalid UTF-8 bytes, read back as three U+FFFD).
 */
export const storableText = (text: string): string => {
  const withoutNul = text.includes("\u0000") ? text.replaceAll("\u0000", "\uFFFD") : text
  return toWellFormed(withoutNul)
}
