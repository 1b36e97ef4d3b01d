import { Cause } from "effect"

/**
 * The text stored as a job's `lastError` for a failure (CONTRACT §3): its
 * non-empty `message`, else its `_tag` and fields as JSON, else `String(error)`.
 */
export const failureText = (error: unknown): string => {
  if (typeof error === "object" && error !== null) {
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
  }
  return String(error)
}

/** The text stored for any cause: a failure's text, or the pretty cause of a defect. */
export const causeText = <E>(cause: Cause.Cause<E>): string => {
  const failure = Cause.failureOption(cause)
  return failure._tag === "Some" ? failureText(failure.value) : Cause.pretty(cause)
}

/**
 * Error text as storage can keep it on every engine: PostgreSQL's text holds
 * no U+0000, so a NUL becomes U+FFFD (the replacement character) — a
 * `lastError` is read by people, never compared.
 */
export const storableText = (text: string): string => (text.includes("\u0000") ? text.replaceAll("\u0000", "\uFFFD") : text)
