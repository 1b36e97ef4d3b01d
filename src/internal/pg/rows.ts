import { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import type { JobRow, LockRow, ScheduleRow } from "../engine.js"

/**
 * PostgreSQL `bigint` arrives as a string (or, under an application's own
 * type parsers, as a number or a bigint). Ids, tokens, counts and instants
 * are decoded strictly: a value past 2^53 fails loudly with `SqlError`
 * instead of silently wrapping to a neighbouring number.
 */
export class UnsafeNumber extends Error {}

/** Up to 15 digits: always below 2^53, so `Number` is exact and no round-trip check is needed. */
const shortUnsigned = /^\d{1,15}$/

export const int = (value: unknown, field: string): number => {
  // The common case (ids, tokens, instants, counts as the driver sends them), checked once per column
  // of every claimed row: no second regex, no string round trip.
  if (typeof value === "string" && shortUnsigned.test(value)) return Number(value)
  const n = typeof value === "number"
    ? value
    : typeof value === "bigint"
    ? Number(value)
    : typeof value === "string" && /^-?\d+$/.test(value)
    ? Number(value)
    : NaN
  if (!Number.isSafeInteger(n) || (typeof value === "bigint" && BigInt(n) !== value)) {
    throw new UnsafeNumber(`column ${field} holds ${String(value)}, which is not a safe integer (|n| < 2^53)`)
  }
  if (typeof value === "string" && String(n) !== value.replace(/^(-?)0+(?=\d)/, "$1")) {
    throw new UnsafeNumber(`column ${field} holds ${value}, which is not a safe integer (|n| < 2^53)`)
  }
  return n
}

export const intOrNull = (value: unknown, field: string): number | null =>
  value === null || value === undefined ? null : int(value, field)

/** The `SqlError` of a row that failed to decode (e.g. an unsafe number). */
export const decodeError = (cause: unknown) =>
  new SqlError({ cause, message: `Failed to decode a row: ${String((cause as Error).message ?? cause)}` })

/** Decodes rows with `decode`; an unsafe number is a `SqlError`. */
export const decoded = <A>(
  rows: Effect.Effect<ReadonlyArray<Record<string, unknown>>, SqlError>,
  decode: (row: Record<string, unknown>) => A
): Effect.Effect<Array<A>, SqlError> =>
  Effect.flatMap(rows, (raw) =>
    Effect.try({
      try: () => raw.map(decode),
      catch: decodeError
    }))

/** The job columns every read selects (`payload` as the exact text stored, not parsed by the driver). */
export const jobColumns = (t = "") =>
  [
    "id",
    "queue",
    "payload::text AS payload",
    "state",
    "priority",
    "run_at",
    "attempts",
    "max_attempts",
    "visibility_timeout",
    "backoff_base",
    "expires_at",
    "claimed_until",
    "worker_id",
    "claim_token",
    "created_at",
    "last_error",
    "died_at",
    "trace_context"
  ].map((c) => (t === "" ? c : `${t}.${c}`)).join(", ")

export const toJobRow = (r: Record<string, unknown>): JobRow => ({
  id: int(r.id, "id"),
  queue: r.queue as string,
  payload: r.payload as string,
  state: r.state as JobRow["state"],
  priority: int(r.priority, "priority"),
  run_at: int(r.run_at, "run_at"),
  attempts: int(r.attempts, "attempts"),
  max_attempts: int(r.max_attempts, "max_attempts"),
  visibility_timeout: int(r.visibility_timeout, "visibility_timeout"),
  backoff_base: int(r.backoff_base, "backoff_base"),
  expires_at: intOrNull(r.expires_at, "expires_at"),
  claimed_until: intOrNull(r.claimed_until, "claimed_until"),
  worker_id: (r.worker_id ?? null) as string | null,
  claim_token: int(r.claim_token, "claim_token"),
  created_at: int(r.created_at, "created_at"),
  last_error: (r.last_error ?? null) as string | null,
  died_at: intOrNull(r.died_at, "died_at"),
  trace_context: (r.trace_context ?? null) as string | null
})

export const toLockRow = (r: Record<string, unknown>): LockRow => ({
  token: int(r.token, "token"),
  expires_at: int(r.expires_at, "expires_at")
})

export const scheduleColumns =
  "name, spec, interval_ms, queue, payload::text AS payload, priority, max_attempts, expires_ms, group_key, next_fire_at, created_at, updated_at"

export const toScheduleRow = (r: Record<string, unknown>): ScheduleRow => ({
  name: r.name as string,
  spec: r.spec as string,
  interval_ms: int(r.interval_ms, "interval_ms"),
  queue: r.queue as string,
  payload: r.payload as string,
  priority: int(r.priority, "priority"),
  max_attempts: int(r.max_attempts, "max_attempts"),
  expires_ms: intOrNull(r.expires_ms, "expires_ms"),
  group_key: (r.group_key ?? "") as string,
  next_fire_at: int(r.next_fire_at, "next_fire_at"),
  created_at: int(r.created_at, "created_at"),
  updated_at: int(r.updated_at, "updated_at")
})
