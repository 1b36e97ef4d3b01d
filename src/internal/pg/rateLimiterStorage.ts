import { Effect } from "effect"
import type { RateLimiterStorage } from "../engine.js"
import type { PgExecutor } from "./executor.js"

/**
 * RateLimiter's two algorithms on PostgreSQL, each one INSERT … ON CONFLICT
 * DO UPDATE … RETURNING: the conflicting row is locked and re-read at its
 * latest version, so concurrent takes of one key serialize, across
 * processes and hosts. The rules are those of `@effect/experimental`'s
 * in-memory store, in double precision as it computes them (see
 * `RateLimiterStorage` in engine.ts; the SQLite statements say the same).
 */
const statements = (s: string) => {
  // $1 key, $2 now, $3 tokens, $4 refill interval, $5 limit (NULL: no cap), $6–$8 a new key's row.
  const used = "(CASE WHEN w.expires_at <= $2::float8 THEN 0 ELSE w.used END)"
  const refused = `($5::float8 IS NOT NULL AND ${used} + $3::float8 > $5::float8)`
  const fixedWindow = `INSERT INTO ${s}.__alkstore_rate_windows AS w (key, used, expires_at, granted)
    VALUES ($1, $6::float8, $7::float8, $8::boolean)
    ON CONFLICT (key) DO UPDATE SET
      used = ${used} + CASE WHEN ${refused} THEN 0 ELSE $3::float8 END,
      expires_at = greatest(w.expires_at, $2::float8) + CASE WHEN ${refused} THEN 0 ELSE $4::float8 * $3::float8 END,
      granted = NOT ${refused}
    RETURNING used, expires_at, granted`
  // $1 key, $2 now, $3 tokens, $4 refill interval, $5 limit, $6 overflow, $7–$8 a new key's row.
  const refills = "floor(($2::float8 - b.last_refill) / $4::float8)"
  const current = `(CASE WHEN ${refills} > 0 THEN least($5::float8, b.tokens + ${refills}) ELSE b.tokens END)`
  const granted = `($6::boolean OR ${current} - $3::float8 >= 0)`
  const tokenBucket = `INSERT INTO ${s}.__alkstore_rate_buckets AS b (key, tokens, last_refill, granted)
    VALUES ($1, $7::float8, $2::float8, $8::boolean)
    ON CONFLICT (key) DO UPDATE SET
      tokens = CASE WHEN ${granted} THEN ${current} - $3::float8 ELSE ${current} END,
      last_refill = CASE WHEN ${refills} > 0 THEN b.last_refill + ${refills} * $4::float8 ELSE b.last_refill END,
      granted = ${granted}
    RETURNING tokens, granted`
  return { fixedWindow, tokenBucket }
}

/** float8 arrives as a number from `pg`'s default parsers; text, from a client that maps it otherwise. */
const num = (value: unknown) => (typeof value === "number" ? value : Number(value))

export const makeRateLimiterStorage = (db: PgExecutor, schema: string): RateLimiterStorage => {
  const sql = statements(schema)
  return {
    fixedWindow: ({ key, limit, now, refillMillis, tokens }) => {
      // A new key is a lapsed window: the same rule decides whether the take is granted.
      const refusedFresh = limit !== undefined && tokens > limit
      return Effect.map(
        db.all<{ used: unknown; expires_at: unknown; granted: boolean }>(sql.fixedWindow, [
          key,
          now,
          tokens,
          refillMillis,
          limit ?? null,
          refusedFresh ? 0 : tokens,
          now + (refusedFresh ? 0 : refillMillis * tokens),
          !refusedFresh
        ]),
        (rows) => {
          const row = rows[0]!
          const stored = num(row.used)
          return { count: row.granted ? stored : stored + tokens, expiresAt: num(row.expires_at) }
        }
      )
    },
    tokenBucket: ({ allowOverflow, key, limit, now, refillMillis, tokens }) => {
      // A new bucket is full.
      const grantedFresh = allowOverflow || limit - tokens >= 0
      return Effect.map(
        db.all<{ tokens: unknown; granted: boolean }>(sql.tokenBucket, [
          key,
          now,
          tokens,
          refillMillis,
          limit,
          allowOverflow,
          grantedFresh ? limit - tokens : limit,
          grantedFresh
        ]),
        (rows) => {
          const row = rows[0]!
          const stored = num(row.tokens)
          return row.granted ? stored : stored - tokens
        }
      )
    }
  }
}
