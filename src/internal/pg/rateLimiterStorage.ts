import type { SqlError } from "@effect/sql/SqlError"
import { type Clock, Effect } from "effect"
import type { RateLimiterStorage } from "../engine.js"
import type { Param, PgExecutor } from "./executor.js"

/**
 * RateLimiter's two algorithms on PostgreSQL. A take is one statement that
 * never waits for another take of its key: an existing row is taken `FOR
 * UPDATE SKIP LOCKED` and updated, a missing one inserted (`ON CONFLICT`:
 * two first takes of a key race there, the second waiting for the first's
 * commit). When another transaction holds the row, nothing is returned, and
 * the take runs the locked way: a transaction that takes the row `FOR
 * UPDATE`, then reads the clock, then makes the take — judged when it is
 * made, not when it was asked for. The rules are those of
 * `@effect/experimental`'s in-memory store, in double precision as it
 * computes them (see `RateLimiterStorage` in engine.ts; the SQLite
 * statements say the same).
 */
const statements = (s: string) => {
  const windows = `${s}.__alkstore_rate_windows`
  const buckets = `${s}.__alkstore_rate_buckets`
  /** The take without waiting (`held`: the row, unless another transaction holds it), or the plain upsert. */
  const take = (table: string, alias: string, columns: string, values: string, set: string, returning: string) => ({
    optimistic: `WITH held AS (SELECT key FROM ${table} WHERE key = $1 FOR UPDATE SKIP LOCKED),
      updated AS (UPDATE ${table} AS ${alias} SET ${set} FROM held WHERE ${alias}.key = held.key RETURNING ${returning}),
      inserted AS (INSERT INTO ${table} AS ${alias} (${columns}) SELECT ${values}
        WHERE NOT EXISTS (SELECT 1 FROM ${table} WHERE key = $1)
        ON CONFLICT (key) DO UPDATE SET ${set} RETURNING ${returning})
      SELECT * FROM updated UNION ALL SELECT * FROM inserted`,
    lock: `SELECT key FROM ${table} WHERE key = $1 FOR UPDATE`,
    upsert: `INSERT INTO ${table} AS ${alias} (${columns}) VALUES (${values})
      ON CONFLICT (key) DO UPDATE SET ${set} RETURNING ${returning}`
  })
  // $1 key, $2 now, $3 tokens, $4 refill interval, $5 limit (NULL: no cap), $6–$8 a new key's row.
  const used = "(CASE WHEN w.expires_at <= $2::float8 THEN 0 ELSE w.used END)"
  const refused = `($5::float8 IS NOT NULL AND ${used} + $3::float8 > $5::float8)`
  const fixedWindow = take(
    windows,
    "w",
    "key, used, expires_at, granted",
    "$1, $6::float8, $7::float8, $8::boolean",
    `used = ${used} + CASE WHEN ${refused} THEN 0 ELSE $3::float8 END,
      expires_at = greatest(w.expires_at, $2::float8) + CASE WHEN ${refused} THEN 0 ELSE $4::float8 * $3::float8 END,
      granted = NOT ${refused}`,
    "w.used, w.expires_at, w.granted"
  )
  // $1 key, $2 now, $3 tokens, $4 refill interval, $5 limit, $6 overflow, $7–$8 a new key's row.
  const refills = "floor(($2::float8 - b.last_refill) / $4::float8)"
  const current = `(CASE WHEN ${refills} > 0 THEN least($5::float8, b.tokens + ${refills}) ELSE b.tokens END)`
  const granted = `($6::boolean OR ${current} - $3::float8 >= 0)`
  const tokenBucket = take(
    buckets,
    "b",
    "key, tokens, last_refill, granted",
    "$1, $7::float8, $2::float8, $8::boolean",
    `tokens = CASE WHEN ${granted} THEN ${current} - $3::float8 ELSE ${current} END,
      last_refill = CASE WHEN ${refills} > 0 THEN b.last_refill + ${refills} * $4::float8 ELSE b.last_refill END,
      granted = ${granted}`,
    "b.tokens, b.granted"
  )
  return { fixedWindow, tokenBucket }
}

/** float8 arrives as a number from `pg`'s default parsers; text, from a client that maps it otherwise. */
const num = (value: unknown) => (typeof value === "number" ? value : Number(value))

export const makeRateLimiterStorage = (db: PgExecutor, schema: string): RateLimiterStorage => {
  const sql = statements(schema)
  /** A take's row and the time it was judged at: without waiting, else on the row's lock. */
  const taken = <A>(
    statements: { readonly optimistic: string; readonly lock: string; readonly upsert: string },
    key: string,
    clock: Clock.Clock,
    params: (now: number) => ReadonlyArray<Param>
  ): Effect.Effect<{ readonly row: A; readonly now: number }, SqlError> => {
    const now = clock.unsafeCurrentTimeMillis()
    return Effect.flatMap(db.all<A>(statements.optimistic, params(now)), (rows) =>
      rows.length > 0
        ? Effect.succeed({ row: rows[0]!, now })
        : db.transaction(Effect.zipRight(
          db.all(statements.lock, [key]),
          Effect.suspend(() => {
            const at = clock.unsafeCurrentTimeMillis()
            return Effect.map(db.all<A>(statements.upsert, params(at)), (r) => ({ row: r[0]!, now: at }))
          })
        )))
  }
  return {
    fixedWindow: ({ clock, key, limit, refillMillis, tokens }) => {
      // A new key is a lapsed window: the same rule decides whether the take is granted.
      const refusedFresh = limit !== undefined && tokens > limit
      return Effect.map(
        taken<{ used: unknown; expires_at: unknown; granted: boolean }>(sql.fixedWindow, key, clock, (now) => [
          key,
          now,
          tokens,
          refillMillis,
          limit ?? null,
          refusedFresh ? 0 : tokens,
          now + (refusedFresh ? 0 : refillMillis * tokens),
          !refusedFresh
        ]),
        ({ now, row }) => {
          const stored = num(row.used)
          return { count: row.granted ? stored : stored + tokens, expiresAt: num(row.expires_at), now }
        }
      )
    },
    tokenBucket: ({ allowOverflow, clock, key, limit, refillMillis, tokens }) => {
      // A new bucket is full.
      const grantedFresh = allowOverflow || limit - tokens >= 0
      return Effect.map(
        taken<{ tokens: unknown; granted: boolean }>(sql.tokenBucket, key, clock, (now) => [
          key,
          now,
          tokens,
          refillMillis,
          limit,
          allowOverflow,
          grantedFresh ? limit - tokens : limit,
          grantedFresh
        ]),
        ({ row }) => {
          const stored = num(row.tokens)
          return row.granted ? stored : stored - tokens
        }
      )
    }
  }
}
