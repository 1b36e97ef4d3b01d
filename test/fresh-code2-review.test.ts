/**
 * Adversarial review of the code changed in 4efdbc4..805db85 (input validation through `ownOptions`, the
 * PostgreSQL import's `ALTER … RESTART`, stop give-backs, stoppable claims). Each test failed on 805db85, before its fix, because of
 * a defect.
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Duration, Effect, Exit, Layer, Option, Redacted } from "effect"
import Pg from "pg"
import { Admin, Locks, PgStore, Queues, SqliteStore } from "../src/index.js"
import { freshFile, pgDatabaseUrl } from "./contract/harness.js"

const memory = SqliteStore.layer({ filename: ":memory:" })
let schemaCounter = 0
const freshSchema = () => `fresh2_${process.pid}_${++schemaCounter}`

const pgLayer = (schema: string, url?: string) =>
  Layer.unwrapEffect(Effect.map(Effect.promise(pgDatabaseUrl), (base) =>
    PgStore.layer({ url: Redacted.make(url ?? base), schema, fallbackPoll: "1 hour" })))

/** A SQLite store file with `count` jobs enqueued on "q", the first `acked` of them acked. */
const sqliteFile = (count: number, acked = 0) =>
  Effect.gen(function*() {
    const filename = freshFile("import-src")
    yield* Effect.gen(function*() {
      const queue = yield* (yield* Queues.Queues).queue("q")
      for (let i = 0; i < count; i++) yield* queue.enqueue({ n: i })
      for (let i = 0; i < acked; i++) yield* Effect.flatMap(Effect.map(queue.claim("w"), Option.getOrThrow), (h) => h.ack)
    }).pipe(Effect.provide(SqliteStore.layer({ filename })))
    return filename
  })

const failureText = (exit: Exit.Exit<unknown, unknown>) => {
  if (Exit.isSuccess(exit)) return exit.value
  const error = Cause.squash(exit.cause) as { message?: string; cause?: { message?: string } }
  return `${error.message} / ${error.cause?.message}`
}

describe("fresh code review 2 — options read as own fields only", () => {
  // docs/decisions.md ("`null` as an options object"): options are read "as where options are read with `?.`".
  // `ownOptions` (src/internal/options.ts) now copies the options with `{ ...options }`: only own enumerable
  // fields. An options object whose fields are getters of its class (a settings class, a config object) had its
  // fields read before 4efdbc4; now they are dropped silently: the queue's `maxAttempts: 1` is ignored and the job
  // is retried (default 3) instead of dead after its first failure.
  it.effect("a queue's options given as a class instance with getters are not dropped", () =>
    Effect.gen(function*() {
      class QueueSettings {
        get maxAttempts() {
          return 1
        }
      }
      const queue = yield* (yield* Queues.Queues).queue("q", new QueueSettings())
      yield* queue.enqueue({ n: 1 })
      const handle = Option.getOrThrow(yield* queue.claim("w"))
      yield* handle.retry("broken")
      // observed: { dead: 0, scheduled: 1 } — maxAttempts 1 silently dropped
      expect(yield* queue.stats).toMatchObject({ dead: 1, pending: 0, scheduled: 0 })
    }).pipe(Effect.provide(memory)))

  // Same root cause, on Locks.acquire (src/Locks.ts: `acquire(name, { ttl, owner? })`): a ttl given by a getter
  // (a settings class) is read as missing and the acquire fails `InvalidOptions` on "ttl".
  it.effect("Locks.acquire reads a ttl given by a getter of the options' class", () =>
    Effect.gen(function*() {
      class LockSettings {
        get ttl() {
          return Duration.seconds(30)
        }
      }
      const got = yield* Effect.either((yield* Locks.Locks).acquire("nightly", new LockSettings()))
      // observed: Left(InvalidOptions { field: "ttl", reason: "is not a duration" })
      expect(got._tag === "Right" ? Option.isSome(got.right) : got.left).toBe(true)
    }).pipe(Effect.provide(memory)))
})

describe("fresh code review 2 — PgStore.importSqlite's ALTER … RESTART", () => {
  // docs/operations.md (Upgrades and migrations): "an application role with USAGE on the schema and SELECT, INSERT,
  // UPDATE and DELETE on its tables and sequences opens a store the owner migrated". docs/engines.md (Moving a
  // deployment): "Provide `PgStore.layer` once against the new database ... Run the import with that layer".
  // With the id sequence moved by `setval` (UPDATE on the sequence) that role could import; `ALTER TABLE … ALTER
  // COLUMN id RESTART` (src/internal/pg/importSqlite.ts:199) needs the table's owner: the import fails with
  // "must be owner of table __alkstore_jobs".
  it.live("an application role with DML privileges on tables and sequences can import into a migrated schema", () => {
    const schema = freshSchema()
    const role = `app_${schema}`
    return Effect.gen(function*() {
      const filename = yield* sqliteFile(2)
      const base = yield* Effect.promise(pgDatabaseUrl)
      yield* Effect.scoped(Layer.build(pgLayer(schema))) // migrated by the owner
      const owner = new Pg.Client({ connectionString: base })
      yield* Effect.acquireRelease(
        Effect.promise(async () => {
          await owner.connect()
          await owner.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pw'`)
          await owner.query(`GRANT USAGE ON SCHEMA ${schema} TO ${role}`)
          await owner.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA ${schema} TO ${role}`)
          await owner.query(`GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA ${schema} TO ${role}`)
        }),
        () =>
          Effect.promise(async () => {
            await owner.query(`DROP OWNED BY ${role}`).catch(() => {})
            await owner.query(`DROP ROLE ${role}`).catch(() => {})
            await owner.end().catch(() => {})
          })
      )
      const url = new URL(base)
      url.username = role
      url.password = "pw"
      const exit = yield* Effect.exit(PgStore.importSqlite({ filename, schema }).pipe(Effect.provide(pgLayer(schema, url.toString()))))
      // observed: "Failed to execute statement / must be owner of table __alkstore_jobs"
      expect(failureText(exit)).toEqual({ jobs: 2, schedules: 0, locks: 0 })
    }).pipe(Effect.scoped)
  }, 20_000)

  // src/Queues.ts: "A job's id: a positive integer, unique in the store and never reused"; docs/engines.md: the
  // import "refuses a schema that was ever used — any row in its tables, or a job id already handed out".
  // `ALTER … RESTART` leaves the sequence not called, and the "used" check reads `pg_sequence_last_value(...) IS NOT
  // NULL` (NULL when not called): a schema that imported a SQLite store whose jobs were all acked (no row left,
  // its mark 5 moved onto the sequence; Admin's lastJobId reads 5) passes as fresh, and a second import restarts
  // the sequence lower: ids the store reported as handed out are handed out again (with `setval` the sequence
  // was called and the second import refused).
  it.live("a schema that imported a store's id mark is not imported into again (no id handed out twice)", () => {
    const schema = freshSchema()
    return Effect.gen(function*() {
      const first = yield* sqliteFile(5, 5) // ids 1..5, all acked: only the mark remains
      const second = yield* sqliteFile(1) // id 1, pending
      const exit = yield* Effect.gen(function*() {
        yield* PgStore.importSqlite({ filename: first, schema })
        const before = (yield* (yield* Admin.Admin).totals).lastJobId
        expect(before).toBe(5)
        return yield* Effect.exit(PgStore.importSqlite({ filename: second, schema }))
      }).pipe(Effect.provide(pgLayer(schema)))
      // observed: Success { jobs: 1 } — job id 1 handed out again in a store whose lastJobId was 5
      expect(Exit.isFailure(exit)).toBe(true)
    })
  }, 20_000)
})
