import { Effect } from "effect"
import type { PersistedQueueStorage } from "../engine.js"
import type { Executor } from "./executor.js"

/** The ids PersistedQueue elements were offered with, on SQLite: the primary key decides. */
const rememberId = `INSERT INTO __alkstore_queue_ids (id, queue, offered_at) VALUES (?, ?, ?) ON CONFLICT (id) DO NOTHING`

export const makePersistedQueueStorage = (db: Executor): PersistedQueueStorage => ({
  rememberId: (id, queue, now) => Effect.map(db.run(rememberId, [id, queue, now]), (result) => result.changes > 0)
})
