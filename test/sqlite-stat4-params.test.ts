import { describe, expect, it } from "vitest"
import { flowSql } from "../src/internal/sqlite/flowStatements.js"
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

  it("nor do flow control's statements on a limited claim's path (the readiness read, pages, groups, log, claim)", () => {
    // After the first WHERE: the select lists and SET clauses before it bind no compared value
    // (a row value's `(?3, ?4)` counts too).
    const bareIn = (text: string) => (text.slice(text.indexOf("WHERE")).match(/(=|<=|<|>=|>|\(|,)\s*\?/g) ?? [])
    const texts = {
      limits: flowSql.limits,
      readiness: flowSql.readiness.text,
      inFlight: flowSql.inFlight,
      pendingFirst: flowSql.pendingFirst(8).text,
      pendingSame: flowSql.pendingSame(8).text,
      pendingLower: flowSql.pendingLower(8).text,
      lapsed: flowSql.lapsed.text,
      lapsedAfter: flowSql.lapsedAfter.text,
      dueScheduled: flowSql.dueScheduled(8).text,
      dueAfter: flowSql.dueAfter.text,
      groupStart: flowSql.groupStart("1:1").text,
      groupAhead: flowSql.groupAhead(3).text,
      pendingHead: flowSql.pendingHead("1:1").text,
      logLast: flowSql.logLast,
      logAt: flowSql.logAt,
      claim: whereOf(flowSql.claim.text),
      claimFirst: whereOf(flowSql.claimFirst("1:5:1000:2:1000")!.statement.text),
      claimFirstPlain: whereOf(flowSql.claimFirst("::::")!.statement.text),
      prune: flowSql.prune,
      advanceRound: flowSql.advanceRound.text
    }
    const bare = Object.fromEntries(Object.entries(texts).map(([name, text]) => [name, bareIn(text)]))
    expect(bare).toEqual(Object.fromEntries(Object.keys(texts).map((name) => [name, []])))
  })
})
