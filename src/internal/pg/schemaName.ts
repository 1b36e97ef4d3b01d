import { InvalidOptions } from "../../StoreError.js"

/**
 * The engine's schema name is written into its SQL as it is (a plain,
 * unquoted identifier), so it must be one PostgreSQL reads as a name: these
 * characters, and none of the keywords PostgreSQL reserves from names
 * (`pg_get_keywords()` categories R and T of PostgreSQL 15, e.g. `user`,
 * `order`, `group`), which passed the characters and then failed every start
 * with a syntax error. (Its non-reserved keywords, `time` or `values`, are
 * names there.)
 */
const schemaPattern = /^[a-z_][a-z0-9_]{0,47}$/

const reserved = new Set([
  "all", "analyse", "analyze", "and", "any", "array", "as", "asc", "asymmetric", "authorization", "binary", "both",
  "case", "cast", "check", "collate", "collation", "column", "concurrently", "constraint", "create", "cross",
  "current_catalog", "current_date", "current_role", "current_schema", "current_time", "current_timestamp",
  "current_user", "default", "deferrable", "desc", "distinct", "do", "else", "end", "except", "false", "fetch", "for",
  "foreign", "freeze", "from", "full", "grant", "group", "having", "ilike", "in", "initially", "inner", "intersect",
  "into", "is", "isnull", "join", "lateral", "leading", "left", "like", "limit", "localtime", "localtimestamp",
  "natural", "not", "notnull", "null", "offset", "on", "only", "or", "order", "outer", "overlaps", "placing", "primary",
  "references", "returning", "right", "select", "session_user", "similar", "some", "symmetric", "table", "tablesample",
  "then", "to", "trailing", "true", "union", "unique", "user", "using", "variadic", "verbose", "when", "where", "window",
  "with"
])

/** `InvalidOptions` for a schema name the engine cannot write into its SQL, else `undefined`. */
export const schemaNameProblem = (schema: unknown): InvalidOptions | undefined => {
  if (typeof schema !== "string" || !schemaPattern.test(schema)) {
    return new InvalidOptions({
      field: "schema",
      reason: "must match ^[a-z_][a-z0-9_]{0,47}$ (a plain, unquoted PostgreSQL identifier)"
    })
  }
  if (reserved.has(schema)) {
    return new InvalidOptions({ field: "schema", reason: `must not be ${schema}, a keyword PostgreSQL reserves from names` })
  }
  if (schema.startsWith("pg_")) {
    return new InvalidOptions({ field: "schema", reason: "must not begin with pg_, which PostgreSQL reserves for system schemas" })
  }
  return undefined
}
