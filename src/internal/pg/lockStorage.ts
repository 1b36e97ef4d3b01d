import { Effect, Option } from "effect"
import type { LockStorage } from "../engine.js"
import type { PgExecutor } from "./executor.js"
import type { Notifier } from "./notify.js"
import { decoded, toLockRow } from "./rows.js"

/**
 * Every statement of the PostgreSQL lock mechanism, each operation one
 * statement. A lock's row is never deleted, so each new tenure's fencing
 * token continues from the last one (strictly increasing per name). A
 * release notifies the lock's name (a scheduler standby wakes on its lease's).
 */
const statements = (s: string, n: Notifier) => {
  const locks = `${s}.__alkstore_locks`
  return {
    // Free (lapsed) or re-entrant for the same owner; a new tenure bumps the token. Re-entry
    // shares the tenure's lease, so it only ever extends it (never moves expires_at earlier).
    // An UPDATE locks only the rows its WHERE admits, so a refused acquire locks nothing: as
    // INSERT … ON CONFLICT DO UPDATE … WHERE, it locked the holder's row even when refused, and an
    // acquire refused inside an open transaction held off the holder's renewals and release.
    // A name without a row yet is inserted (the race for it: one inserts, the other is refused).
    acquire: `WITH taken AS (
        UPDATE ${locks} AS l SET
          token = CASE WHEN l.owner = $2 AND l.expires_at > $4::bigint THEN l.token ELSE l.token + 1 END,
          expires_at = CASE WHEN l.owner = $2 AND l.expires_at > $4::bigint
            THEN greatest(l.expires_at, $3::bigint) ELSE $3::bigint END,
          owner = $2
        WHERE l.name = $1 AND (l.expires_at <= $4::bigint OR l.owner = $2)
        RETURNING token, expires_at
      ), first AS (
        INSERT INTO ${locks} (name, owner, token, expires_at)
        SELECT $1, $2, 1, $3::bigint WHERE NOT EXISTS (SELECT 1 FROM ${locks} WHERE name = $1)
        ON CONFLICT (name) DO NOTHING
        RETURNING token, expires_at
      )
      SELECT token, expires_at FROM taken UNION ALL SELECT token, expires_at FROM first`,
    // A renewal extends the tenure's lease, never shortens it (as re-entry).
    renew: `UPDATE ${locks} SET expires_at = greatest(expires_at, $1::bigint)
      WHERE name = $2 AND owner = $3 AND token = $4::bigint AND expires_at > $5::bigint RETURNING 1`,
    release: `WITH w AS (UPDATE ${locks} SET expires_at = 0
        WHERE name = $1 AND owner = $2 AND token = $3::bigint AND expires_at > $4::bigint RETURNING name AS topic)
      SELECT ${n.tail(5)} FROM w`,
    releaseOwner: `WITH w AS (UPDATE ${locks} SET expires_at = 0
        WHERE name = $1 AND owner = $2 AND expires_at > $3::bigint RETURNING name AS topic)
      SELECT ${n.tail(4)} FROM w`,
    // The scheduler's fence: FOR SHARE holds off a takeover until the tick that checked it commits.
    // Whether anybody holds the lock: a read, so a standby watches a lease without writing.
    held: `SELECT 1 FROM ${locks} WHERE name = $1 AND expires_at > $2::bigint`,
    holds: `SELECT 1 FROM ${locks} WHERE name = $1 AND owner = $2 AND token = $3::bigint AND expires_at > $4::bigint
      FOR SHARE`
  } as const
}

export const makeLockStorage = (db: PgExecutor, schema: string, notifier: Notifier): LockStorage => {
  const sql = statements(schema, notifier)
  return {
    acquire: (name, owner, now, expiresAt) =>
      Effect.map(decoded(db.all(sql.acquire, [name, owner, expiresAt, now]), toLockRow), (rows) =>
        Option.fromNullable(rows[0])),
    renew: (name, owner, token, now, expiresAt) =>
      Effect.map(db.all(sql.renew, [expiresAt, name, owner, token, now]), (rows) => rows.length > 0),
    release: (name, owner, token, now) =>
      Effect.map(db.all(sql.release, [name, owner, token, now, ...notifier.params]), (rows) => rows.length > 0),
    held: (name, now) => Effect.map(db.all(sql.held, [name, now]), (rows) => rows.length > 0),
    releaseOwner: (name, owner, now) =>
      Effect.map(db.all(sql.releaseOwner, [name, owner, now, ...notifier.params]), (rows) => rows.length > 0),
    holds: (name, owner, token, now) =>
      Effect.map(db.all(sql.holds, [name, owner, token, now]), (rows) => rows.length > 0)
  }
}
