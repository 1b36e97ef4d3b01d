/**
 * For tests that drive the SQLite engine's synchronous insert code
 * (src/internal/sqlite/jobInsert.ts) on a plain better-sqlite3 connection:
 * a new job's values, and that connection as the store's code sees one.
 */
import type Database from "better-sqlite3"
import type { NewJob } from "../../src/internal/engine.js"
import type { DirectConnection, NamedParams, Param } from "../../src/internal/sqlite/executor.js"

/** A job as `enqueue` hands it to the engine: due at once, no key, no trace, the default group. */
export const newJobOf = (overrides: Partial<NewJob> = {}): NewJob => ({
  queue: "q",
  payload: "{\"n\":1}",
  createdAt: 1_000,
  priority: 0,
  runAt: 1_000,
  maxAttempts: 3,
  visibilityTimeoutMillis: 30_000,
  backoffBaseMillis: 1_000,
  expiresAt: undefined,
  key: undefined,
  traceContext: undefined,
  group: "",
  ...overrides
})

/** `db` as the store's own connection (`DirectConnection`). */
export const directConnectionOf = (db: Database.Database): DirectConnection => ({
  all: <A>(text: string, params: ReadonlyArray<Param>) => db.prepare(text).all(...params) as ReadonlyArray<A>,
  values: (text, params) => db.prepare(text).raw(true).all(...params) as ReadonlyArray<ReadonlyArray<unknown>>,
  run: (text: string, params: ReadonlyArray<Param | NamedParams>) => db.prepare(text).run(...params),
  transaction: (body) => db.transaction(body)()
})
