import { createHash } from "node:crypto"

/**
 * How a write that makes work claimable tells the other processes: a
 * `pg_notify` in the same statement, so it is sent on commit only (never for
 * a rollback) and PostgreSQL folds identical notifications of one
 * transaction. The channel is per schema; the payload is the wake topic (the
 * queue's name, the lock's name, ...), or `*` ("everything") when the name
 * is too long for a NOTIFY payload.
 */
export interface Notifier {
  readonly channel: string
  /** A select-list expression notifying the topic in `column`, with the channel bound as `$k`. */
  readonly tail: (k: number, column?: string) => string
  /** The parameter `tail` binds. */
  readonly params: readonly [string]
}

export const everything = "*"

export const channelOf = (schema: string) =>
  `alkstore_${createHash("sha256").update(schema).digest("hex").slice(0, 24)}`

export const makeNotifier = (schema: string): Notifier => {
  const channel = channelOf(schema)
  return {
    channel,
    tail: (k, column = "w.topic") =>
      `pg_notify($${k}::text, CASE WHEN octet_length(${column}) < 7900 THEN ${column} ELSE '${everything}' END) AS notified`,
    params: [channel]
  }
}
