/** Reading PostgreSQL's `EXPLAIN (ANALYZE, FORMAT JSON)` in tests of the engine's plans. */
import type { SqlClient } from "@effect/sql"
import { expect } from "@effect/vitest"
import { Effect } from "effect"

export interface PlanNode {
  readonly "Node Type": string
  readonly "Relation Name"?: string
  readonly "Index Name"?: string
  readonly "Actual Rows"?: number
  readonly "Actual Loops"?: number
  readonly "Rows Removed by Filter"?: number
  readonly "Rows Removed by Index Recheck"?: number
  readonly "Rows Removed by Join Filter"?: number
  readonly Plans?: ReadonlyArray<PlanNode>
}

/** A plan's nodes, the root first. */
export const nodes = (node: PlanNode): Array<PlanNode> => [node, ...(node.Plans ?? []).flatMap(nodes)]

/** The scans of the jobs table in a plan. */
export const jobsScans = (plan: PlanNode): Array<PlanNode> =>
  nodes(plan).filter((n) => n["Relation Name"] === "__alkstore_jobs" && n["Node Type"].includes("Scan"))

/** The plan of an `EXPLAIN (FORMAT JSON)`'s one row (the driver may hand the JSON over as text). */
export const planOf = (rows: ReadonlyArray<{ readonly "QUERY PLAN": unknown }>): PlanNode => {
  const raw = rows[0]!["QUERY PLAN"]
  return ((typeof raw === "string" ? JSON.parse(raw) : raw) as Array<{ Plan: PlanNode }>)[0]!.Plan
}

/** What a transaction that ran EXPLAIN ANALYZE of writes returns while rolling them back. */
class Rollback<A> {
  constructor(readonly value: A) {}
}

/** `effect` in a transaction that is rolled back (EXPLAIN ANALYZE runs the writes it explains), and its value. */
export const rolledBack = <A, E, R>(db: SqlClient.SqlClient, effect: Effect.Effect<A, E, R>) =>
  db.withTransaction(Effect.flatMap(effect, (value) => Effect.fail(new Rollback(value)))).pipe(
    Effect.catchIf((e): e is Rollback<A> => e instanceof Rollback, (e) => Effect.succeed(e.value))
  )

/** The jobs table is read, by index only, no scan visiting more than `maxVisited` rows (`label` names the plan). */
export const expectIndexScansOnly = (label: string, plan: PlanNode, maxVisited: number) => {
  const text = `${label}: ${JSON.stringify(plan, null, 1)}`
  const onJobs = jobsScans(plan)
  expect(onJobs.length, text).toBeGreaterThan(0)
  for (const node of onJobs) {
    expect(node["Node Type"], text).not.toBe("Seq Scan")
    expect((node["Actual Rows"] ?? 0) * (node["Actual Loops"] ?? 1), text).toBeLessThanOrEqual(maxVisited)
  }
}
