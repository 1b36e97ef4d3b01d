import { type Clock, Effect } from "effect"
import type { RateLimiterStorage } from "../engine.js"
import type { Executor, Param } from "./executor.js"

/**
 * RateLimiter's two algorithms on SQLite, each one UPSERT … RETURNING: one
 * statement is atomic across connections and processes (the write lock),
 * judged at the time it runs (`atNow`).
 * The rules are those of `@effect/experimental`'s in-memory store, in the
 * same double arithmetic (see `EffectStoresStorage` in engine.ts).
 *
 * better-sqlite3 binds `?` by position only, so the statements are written
 * with `:name`s and turned into `?`s plus the order of their values.
 */
const positional = (text: string) => {
  const names: Array<string> = []
  const sql = text.replace(/:([a-z]+)/g, (_, name: string) => {
    names.push(name)
    return "?"
  })
  return { sql, params: (values: Record<string, Param>) => names.map((name) => values[name]!) }
}

// The window as it stands at :now: a lapsed one counts from 0 and from :now.
const used = "(CASE WHEN expires_at <= :now THEN 0 ELSE used END)"
const refused = `(:lim IS NOT NULL AND ${used} + :tokens > :lim)`

const fixedWindow = positional(`INSERT INTO __alkstore_rate_windows (key, used, expires_at, granted)
  VALUES (:key, :freshused, :freshexpires, :freshgranted)
  ON CONFLICT (key) DO UPDATE SET
    used = ${used} + CASE WHEN ${refused} THEN 0 ELSE :tokens END,
    expires_at = max(expires_at, :now) + CASE WHEN ${refused} THEN 0 ELSE :rate * :tokens END,
    granted = NOT ${refused}
  RETURNING used, expires_at, granted`)

// Whole refill intervals since the last refill (none when the clock went back).
const refills = "floor((:now - last_refill) / :rate)"
const current = `(CASE WHEN ${refills} > 0 THEN min(:lim, tokens + ${refills}) ELSE tokens END)`
const granted = `(:overflow OR ${current} - :tokens >= 0)`

const tokenBucket = positional(`INSERT INTO __alkstore_rate_buckets (key, tokens, last_refill, granted)
  VALUES (:key, :freshtokens, :now, :freshgranted)
  ON CONFLICT (key) DO UPDATE SET
    tokens = CASE WHEN ${granted} THEN ${current} - :tokens ELSE ${current} END,
    last_refill = CASE WHEN ${refills} > 0 THEN last_refill + ${refills} * :rate ELSE last_refill END,
    granted = ${granted}
  RETURNING tokens, granted`)

/**
 * One statement, its time read when it runs: on the store's own connection
 * a body run again after a busy file waited reads the clock again; over an
 * application's client the statement runs in a transaction of its own,
 * after its `BEGIN IMMEDIATE` took the write lock.
 */
const atNow = <A>(db: Executor, clock: Clock.Clock, text: string, params: (now: number) => ReadonlyArray<Param>) => {
  if (db.direct !== undefined) {
    return db.direct((c) => {
      const now = clock.unsafeCurrentTimeMillis()
      return { rows: c.all<A>(text, params(now)), now }
    })
  }
  return db.transaction(Effect.suspend(() => {
    const now = clock.unsafeCurrentTimeMillis()
    return Effect.map(db.all<A>(text, params(now)), (rows) => ({ rows, now }))
  }))
}

export const makeRateLimiterStorage = (db: Executor): RateLimiterStorage => ({
  fixedWindow: ({ clock, key, limit, refillMillis, tokens }) => {
    // A new key is a lapsed window: the same rule decides whether the take is granted.
    const refusedFresh = limit !== undefined && tokens > limit
    return Effect.map(
      atNow<{ used: number; expires_at: number; granted: number }>(db, clock, fixedWindow.sql, (now) =>
        fixedWindow.params({
          key,
          now,
          tokens,
          rate: refillMillis,
          lim: limit ?? null,
          freshused: refusedFresh ? 0 : tokens,
          freshexpires: now + (refusedFresh ? 0 : refillMillis * tokens),
          freshgranted: refusedFresh ? 0 : 1
        })),
      ({ now, rows }) => {
        const row = rows[0]!
        return { count: row.granted === 1 ? row.used : row.used + tokens, expiresAt: row.expires_at, now }
      }
    )
  },
  tokenBucket: ({ allowOverflow, clock, key, limit, refillMillis, tokens }) => {
    // A new bucket is full.
    const grantedFresh = allowOverflow || limit - tokens >= 0
    return Effect.map(
      atNow<{ tokens: number; granted: number }>(db, clock, tokenBucket.sql, (now) =>
        tokenBucket.params({
          key,
          now,
          tokens,
          rate: refillMillis,
          lim: limit,
          overflow: allowOverflow ? 1 : 0,
          freshtokens: grantedFresh ? limit - tokens : limit,
          freshgranted: grantedFresh ? 1 : 0
        })),
      ({ rows }) => {
        const row = rows[0]!
        return row.granted === 1 ? row.tokens : row.tokens - tokens
      }
    )
  }
})
