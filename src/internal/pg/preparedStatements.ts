import { createHash } from "node:crypto"
import type { SqlError } from "@effect/sql/SqlError"
import type { SizeClasses } from "./planSize.js"

type Param = string | number | bigint | boolean | null | ReadonlyArray<string | number | null>

/**
 * What the `pg` driver is given for each of the engine's statements.
 *
 * With parameters, a named prepared statement (its name the text's hash, so
 * one name never means two texts), parsed and planned once per pooled
 * connection instead of on every call — for the queue's statements most of
 * their server time (an enqueue's insert: ~0.5 ms of parse and plan against
 * ~0.25 ms to run it). The name ends with the size class of each engine table
 * the text names, so that a plan made on a table of a few pages is not run on
 * one of thousands (planSize.ts). Without parameters, the text as it is (the
 * simple protocol, which also runs multi-statement texts). Unprepared (the
 * `prepare: false` setting, or after `unprepare`) every statement is sent as
 * its text, parsed and planned on every call.
 *
 * The driver remembers, per connection, which names it has parsed and from
 * then on sends only their parameters. That fails when the server session
 * behind the connection no longer has the statement (SQLSTATE 26000) or
 * already has it from another client (42P05): behind a pooler in transaction
 * mode that hands each transaction to whichever server connection is free
 * (PgBouncer before 1.21 or with `max_prepared_statements = 0`, other
 * transaction poolers), or after a `DEALLOCATE ALL` / `DISCARD ALL` on a
 * connection the application shares with the store. The statement was then
 * not run (the server refused its Parse or Bind): `lost` tells such a failure
 * and the executor runs the statement again unprepared, and every statement
 * after it (docs/engines.md, "Behind a connection pooler").
 */
/**
 * Marks a statement to be planned on every call, never prepared: a bulk
 * round (maintenance, `purgeDead`) whose rows it visits by joining the ones
 * it picked. Its cached plan would be costed on the table as it was when the
 * plan was made, up to twice smaller (planSize.ts) — or empty, when a
 * backlog arrived within the size check's second: a join planned for a few
 * rows compares every row with every other (100 million comparisons for a
 * round of 10 000). Planned with its parameters, on the table's size now, it
 * is a hash join or a tuple-id lookup per row; rare, so the planning is
 * nothing beside the work.
 */
export const plannedEachCall = (text: string) => `${plannedEachCallMark}${text}`
const plannedEachCallMark = "/* planned each call */ "

export interface Statements {
  /** What to give the driver for `text`: a named statement's config (as the text argument) or the text. */
  readonly statement: (text: string, params: ReadonlyArray<Param>) => string
  /** The engine tables' size classes now: from the next call on, names carry them. */
  readonly planFor: (classes: SizeClasses) => void
  /** Whether statements are still prepared. */
  readonly prepared: () => boolean
  /** From now on every statement is sent as its text; `true` for the call that switched. */
  readonly unprepare: () => boolean
}

export const makeStatements = (prepare: boolean): Statements => {
  let preparing = prepare
  let classes: SizeClasses = []
  let mentions: ReadonlyArray<readonly [RegExp, number]> = []
  let names = new Map<string, string>()
  const nameOf = (text: string) => {
    let suffix = ""
    for (const [mention, sizeClass] of mentions) if (mention.test(text)) suffix += `_${sizeClass}`
    // PostgreSQL cuts names at 63 bytes (two names cut alike would collide): a long suffix is hashed too
    if (suffix.length > 21) suffix = `_${createHash("sha256").update(suffix).digest("hex").slice(0, 20)}`
    return `alkstore_${createHash("sha256").update(text).digest("hex").slice(0, 32)}${suffix}`
  }
  return {
    statement: (text, params) => {
      if (!preparing || params.length === 0 || text.startsWith(plannedEachCallMark)) return text
      let name = names.get(text)
      if (name === undefined) {
        name = nameOf(text)
        names.set(text, name)
      }
      // The driver's `query(config, values)` takes a config object where a text goes (and writes to it).
      return { name, text } as unknown as string
    },
    planFor: (next) => {
      if (next.length === classes.length && next.every(([t, c], i) => classes[i]![0] === t && classes[i]![1] === c)) {
        return
      }
      classes = next
      // `schema.table` as the statements write it (table names are plain identifiers)
      mentions = next.map(([table, sizeClass]) => [new RegExp(`\\.${table}(?![a-z0-9_])`), sizeClass] as const)
      names = new Map() // names again on the next call: those of statements on unchanged tables come out the same
    },
    prepared: () => preparing,
    unprepare: () => {
      const switched = preparing
      preparing = false
      return switched
    }
  }
}

/** SQLSTATEs of a prepared statement the session does not have (26000) or has already (42P05). */
const lostCodes = new Set(["26000", "42P05"])

/** Whether `error`, from a named statement, says the session behind the connection did not keep it. */
export const lostPreparedStatement = (error: SqlError): boolean => {
  const code = (error.cause as { code?: unknown } | null | undefined)?.code
  return typeof code === "string" && lostCodes.has(code)
}
