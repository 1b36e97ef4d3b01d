/**
 * The chaos checkers can fail: synthetic ledgers with one planted breach
 * each (a lost job, an acked job delivered again, a claim inside a valid
 * lease, a token going back, a late ack that succeeded, overlapping lock
 * tenures, a stale write accepted) are each reported, and a clean ledger is
 * not.
 */
import { DateTime, Duration, Option } from "effect"
import { describe, expect, it } from "vitest"
import type { Queues } from "../src/index.js"
import { checkCrashLedger, type CrashRecord } from "../chaos/checks/crash-ledger.js"
import { checkLockLedger, type LockRecord } from "../chaos/checks/locks-ledger.js"

const base = { pid: 1 }
const enq = (job: number, at = 0): CrashRecord => ({ e: "enq", job, poison: false, at, pid: 0 })
const start = (job: number, token: number, at: number, until: number, pid = 1): CrashRecord => ({
  e: "start", job, token, until, worker: `w${pid}`, selfAck: true, at, pid
})
const done = (job: number, token: number, at: number, pid = 1): CrashRecord => ({ e: "done", job, token, at, pid })
const ack = (job: number, token: number, ok: boolean, at: number, pid = 1): CrashRecord => ({ e: "ack", job, token, ok, at, pid })
const kinds = (violations: ReadonlyArray<string>) => violations.map((v) => v.split(":")[0])

describe("the crash checker", () => {
  it("passes a clean ledger and explains a duplicate by the kill", () => {
    const records: Array<CrashRecord> = [
      enq(1), start(1, 1, 10, 1_010), done(1, 1, 20), { e: "kill", target: 1, at: 25, pid: 0 },
      start(1, 2, 1_100, 2_100, 2), done(1, 2, 1_110, 2), ack(1, 2, true, 1_120, 2)
    ]
    const result = checkCrashLedger(records, [])
    expect(result.violations).toEqual([])
    expect(result.facts).toMatchObject({ duplicates: 1, "dup.killedBeforeAck": 1, handled: 1 })
  })

  it("accepts a start recorded after the next claim's when its own lease had lapsed, and explains a duplicate by a database fault", () => {
    const records: Array<CrashRecord> = [
      // frozen between its claim (lease until 1 010) and its handler's first step, which it records at 1 600
      enq(1), start(1, 2, 1_100, 2_100, 2), done(1, 2, 1_110, 2), ack(1, 2, true, 1_120, 2), start(1, 1, 1_600, 1_010),
      // handled, its ack lost to a restarting server, handled again
      enq(2), start(2, 1, 10, 1_010), done(2, 1, 20), { e: "fault", kind: "restartFast", at: 25, pid: 0 },
      { e: "faultEnd", kind: "restartFast", at: 900, pid: 0 }, start(2, 2, 1_100, 2_100, 2), done(2, 2, 1_110, 2)
    ]
    const result = checkCrashLedger(records, [])
    expect(result.violations).toEqual([])
    expect(result.facts).toMatchObject({ staleStarts: 1, duplicates: 1, "dup.dbFault": 1 })
  })

  // On PostgreSQL a lease is written and judged on the store's clock (the host's plus its measured offset to
  // the server's); the host's Date.now() of the ledger can trail it by the measurement's error. One CI run:
  // "claimed by w4 at …462 inside w1's lease (until …463)", a claim made when w4's store clock said 463.
  it("judges a claim against the previous lease on the store's clock, not the ledger's host time", () => {
    const onClock = (job: number, token: number, at: number, until: number, clockAt: number, pid: number): CrashRecord => ({
      ...(start(job, token, at, until, pid) as Extract<CrashRecord, { e: "start" }>), clockAt
    })
    const frozen = { e: "freeze", target: 1, at: 5, pid: 0 } as const
    const reclaimed: Array<CrashRecord> = [
      enq(1), frozen, onClock(1, 1, 10, 1_010, 10, 1), done(1, 1, 1_500),
      onClock(1, 2, 1_009, 2_009, 1_010, 2), done(1, 2, 1_020, 2), ack(1, 2, true, 1_030, 2)
    ]
    expect(checkCrashLedger(reclaimed, []).violations).toEqual([]) // before: an overlap at 1 009 < 1 010
    const early: Array<CrashRecord> = [
      enq(1), onClock(1, 1, 10, 1_010, 10, 1), done(1, 1, 20),
      onClock(1, 2, 1_011, 2_009, 1_009, 2), done(1, 2, 1_020, 2), ack(1, 2, true, 1_030, 2)
    ]
    expect(kinds(checkCrashLedger(early, []).violations)).toContain("overlap")
  })

  it("reports a lost job, a claim inside a valid lease, a token going back, and a duplicate after a good ack", () => {
    const records: Array<CrashRecord> = [
      enq(1), // never handled
      enq(2), start(2, 1, 10, 1_010), start(2, 2, 500, 1_500, 2), done(2, 2, 510, 2), // overlap
      enq(3), start(3, 2, 10, 1_010), done(3, 2, 20), start(3, 1, 2_000, 3_000, 2), done(3, 1, 2_010, 2), // token back
      enq(4), start(4, 1, 10, 1_010), done(4, 1, 20), ack(4, 1, true, 30), start(4, 2, 2_000, 3_000, 2), done(4, 2, 2_010, 2)
    ]
    expect(kinds(checkCrashLedger(records, []).violations)).toEqual(
      expect.arrayContaining(["lost", "overlap", "token", "duplicate"])
    )
  })

  it("reports an ack that succeeded after a later claim, and a dead job that should have lived", () => {
    const dead: Queues.Job = {
      id: 6, queue: "chaos", payload: null, state: "dead", priority: 0, runAt: DateTime.unsafeMake(0),
      attempts: 1, maxAttempts: 50, visibilityTimeout: Duration.seconds(1), backoffBase: Duration.seconds(1),
      expiresAt: Option.none(), claimedUntil: Option.none(), workerId: Option.none(), createdAt: DateTime.unsafeMake(0),
      lastError: Option.some("max attempts exceeded"), diedAt: Option.some(DateTime.unsafeMake(0))
    }
    const records: Array<CrashRecord> = [
      enq(5), start(5, 1, 10, 1_010), start(5, 2, 1_100, 2_100, 2), done(5, 2, 1_110, 2), done(5, 1, 1_200),
      ack(5, 1, true, 1_210),
      enq(6), start(6, 1, 10, 1_010), done(6, 1, 20)
    ]
    expect(kinds(checkCrashLedger(records, [dead]).violations)).toEqual(expect.arrayContaining(["ack", "dead"]))
  })
})

const acq = (token: number, start: number, pid: number, via = "acquire"): LockRecord => ({
  e: "acq", token, start, via, pid, at: start + 1
})
const proof = (token: number, t: number, pid: number): LockRecord => ({ e: "proof", token, t, pid, at: t + 1 })
const write = (token: number, ok: boolean, before: number, pid: number): LockRecord => ({
  e: "write", token, ok, before, pid, at: before + 1
})
const end = (token: number, at: number, pid: number): LockRecord => ({ e: "end", token, how: "released", pid, at })

describe("the lock checker", () => {
  it("passes clean tenures and counts a refused late write", () => {
    const records: Array<LockRecord> = [
      acq(1, 0, 1), write(1, true, 0, 1), proof(1, 100, 1), { e: "freeze", target: 1, at: 150, ...base },
      acq(2, 1_200, 2), write(2, true, 1_200, 2), proof(2, 1_300, 2), end(2, 1_400, 2),
      { e: "thaw", target: 1, at: 1_500, ...base }, write(1, false, 1_500, 1)
    ]
    const result = checkLockLedger(records)
    expect(result.violations).toEqual([])
    expect(result.facts).toMatchObject({ tenures: 2, lateWritesRejected: 1 })
  })

  it("reports overlapping tenures, a token that does not grow, and an accepted stale write", () => {
    const records: Array<LockRecord> = [
      acq(5, 0, 1), write(5, true, 0, 1),
      acq(4, 100, 2), write(4, true, 100, 2), // begins inside 5's proven tenure, and with a smaller token
      proof(5, 500, 1), end(5, 600, 1),
      acq(6, 700, 3), write(6, true, 700, 3), write(5, true, 900, 1) // 5 writes after 6 wrote: must be refused
    ]
    expect(checkLockLedger(records).violations.map((v) => v.split(":")[0])).toEqual(
      expect.arrayContaining(["overlap", "token order", "late write"])
    )
  })
})
