import { describe, expect, it } from "vitest"
import { batchClaimSql, claimSet, claimStatements, lapsedCandidatesSql, sql } from "../src/internal/sqlite/queueStatements.js"

/**
 * better-sqlite3 builds SQLite with STAT4: once `sqlite_stat4` has samples
 * (an application's `ANALYZE`, or `PRAGMA optimize`), the planner reads the
 * bound value of a bare parameter in a WHERE term, and the statement is then
 * re-prepared at every bind — the claim at ~4× its cost, measured with
 * `sqlite3_stmt_status(SQLITE_STMTSTATUS_REPREPARE)` (docs/performance.md).
 * The claim path writes such parameters `+?`, which the planner does not read.
 */
const whereOf = (text: string) => text.replace(claimSet.replace(/\?\d+/g, "?"), "")
const bareComparisons = (text: string) => whereOf(text).match(/(=|<=|<|>=|>)\s*\?/g) ?? []

describe("the SQLite claim path's statements under STAT4", () => {
  it("compare no column with a bare parameter (a planner reading its value re-prepares the statement per call)", () => {
    const texts = {
      readiness: claimStatements.readiness.text,
      claim: claimStatements.claim.text,
      claimPending: claimStatements.claimPending.text,
      claimMany: claimStatements.claimMany.text,
      claimManyPending: claimStatements.claimManyPending.text,
      batchClaim: batchClaimSql(7).lapsed.text,
      batchClaimPending: batchClaimSql(7).pending.text,
      batchLapsedCandidates: batchClaimSql(7).lapsedCandidates.text,
      lapsedCandidates: lapsedCandidatesSql.text,
      promoteDue: sql.promoteDue,
      anyClaimable: sql.anyClaimable,
      nextDeadline: sql.nextDeadline
    }
    const bare = Object.fromEntries(Object.entries(texts).map(([name, text]) => [name, bareComparisons(text)]))
    expect(bare).toEqual(Object.fromEntries(Object.keys(texts).map((name) => [name, []])))
  })
})
