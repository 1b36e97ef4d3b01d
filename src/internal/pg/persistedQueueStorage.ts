import { Effect } from "effect"
import type { PersistedQueueStorage } from "../engine.js"
import type { PgExecutor } from "./executor.js"

/**
 * The ids PersistedQueue elements were offered with, on PostgreSQL: the
 * primary key decides (a concurrent offer of the same id waits for the
 * first one's transaction and then finds it).
 */
export const makePersistedQueueStorage = (db: PgExecutor, schema: string): PersistedQueueStorage => {
  const rememberId = `INSERT INTO ${schema}.__alkstore_queue_ids (id, queue, offered_at) VALUES ($1, $2, $3::bigint)
    ON CONFLICT (id) DO NOTHING RETURNING 1`
  return {
    rememberId: (id, queue, now) => Effect.map(db.all(rememberId, [id, queue, now]), (rows) => rows.length > 0)
  }
}
