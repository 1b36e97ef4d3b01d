/**
 * The PostgreSQL contenders. Literal dynamic imports, so a child loads only
 * the library it measures.
 */
import type { PgContender } from "../workloads.js"

export const PG_CONTENDER_NAMES = ["raw", "alkstore-pg", "pg-boss", "graphile-worker", "bullmq-pg", "effect-floor-pg"] as const

export const loadPgContender = async (name: string): Promise<PgContender> => {
  switch (name) {
    case "raw":
      return (await import("./raw.js")).contender
    case "alkstore-pg":
      return (await import("./alkstore.js")).contender
    case "pg-boss":
      return (await import("./pgboss.js")).contender
    case "graphile-worker":
      return (await import("./graphile.js")).contender
    case "bullmq-pg":
      return (await import("./bullmq.js")).contender
    case "effect-floor-pg":
      return (await import("./effectFloor.js")).contender
    default:
      throw new Error(`unknown PostgreSQL contender ${name}`)
  }
}
