import { Effect, Option } from "effect"
import type { LockRow, LockStorage } from "../engine.js"
import type { Executor } from "./executor.js"

/**
 * Every statement of the SQLite lock mechanism; each operation is one
 * statement. A released or lapsed lock keeps its row so the next tenure's
 * fencing token continues from the last one.
 */
const sql = {
  // Free (lapsed) or re-entrant for the same owner; a new tenure bumps the token. Re-entry
  // shares the tenure's lease, so it only ever extends it: a shorter ttl never moves
  // expires_at earlier (the other holders of the tenure count on it). RETURNING gives the
  // lease end as stored, which the handle carries. (better-sqlite3 binds `?` by position.)
  acquire: `INSERT INTO __alkstore_locks (name, owner, token, expires_at) VALUES (?, ?, 1, ?)
    ON CONFLICT (name) DO UPDATE SET
      token = CASE WHEN __alkstore_locks.owner = excluded.owner AND __alkstore_locks.expires_at > ?
        THEN __alkstore_locks.token ELSE __alkstore_locks.token + 1 END,
      owner = excluded.owner,
      expires_at = CASE WHEN __alkstore_locks.owner = excluded.owner AND __alkstore_locks.expires_at > ?
        THEN max(__alkstore_locks.expires_at, excluded.expires_at) ELSE excluded.expires_at END
    WHERE __alkstore_locks.expires_at <= ? OR __alkstore_locks.owner = excluded.owner
    RETURNING token, expires_at`,
  // A renewal extends the tenure's lease, never shortens it (as re-entry).
  renew: `UPDATE __alkstore_locks SET expires_at = max(expires_at, ?)
    WHERE name = ? AND owner = ? AND token = ? AND expires_at > ?`,
  release: `UPDATE __alkstore_locks SET expires_at = 0
    WHERE name = ? AND owner = ? AND token = ? AND expires_at > ?`,
  // Whatever the token: a `withLock`'s owner, used by its one acquire alone (locks.ts `cutOffGivenBack`).
  releaseOwner: `UPDATE __alkstore_locks SET expires_at = 0 WHERE name = ? AND owner = ? AND expires_at > ?`,
  holds: `SELECT 1 FROM __alkstore_locks WHERE name = ? AND owner = ? AND token = ? AND expires_at > ?`,
  held: `SELECT 1 FROM __alkstore_locks WHERE name = ? AND expires_at > ?`
} as const

export const makeLockStorage = (db: Executor): LockStorage => ({
  acquire: (name, owner, now, expiresAt) =>
    Effect.map(
      db.all<LockRow>(sql.acquire, [name, owner, expiresAt, now, now, now]),
      (rows) => Option.fromNullable(rows[0])
    ),
  renew: (name, owner, token, now, expiresAt) =>
    Effect.map(db.run(sql.renew, [expiresAt, name, owner, token, now]), (result) => result.changes > 0),
  release: (name, owner, token, now) =>
    Effect.map(db.run(sql.release, [name, owner, token, now]), (result) => result.changes > 0),
  releaseOwner: (name, owner, now) => Effect.map(db.run(sql.releaseOwner, [name, owner, now]), (result) => result.changes > 0),
  holds: (name, owner, token, now) =>
    Effect.map(db.all(sql.holds, [name, owner, token, now]), (rows) => rows.length > 0),
  held: (name, now) => Effect.map(db.all(sql.held, [name, now]), (rows) => rows.length > 0)
})
