/**
 * The crash check's checker: from the ledger (enqueues, handler starts and
 * ends, own acks, kills, freezes — and, in the PostgreSQL faults check, the
 * database faults and the enqueues that failed) and the final dead list, it
 * proves what issue 11 item 1 asks, and explains every duplicate.
 */
import type { Queues } from "../../src/index.js"
import { violations as collect } from "../lib/check.js"

export type CrashRecord =
  | { readonly e: "ready"; readonly pid: number; readonly at: number }
  | { readonly e: "enq"; readonly job: number; readonly poison: boolean; readonly at: number; readonly pid: number }
  | {
    readonly e: "start"
    readonly job: number
    /** The payload's sequence number (the PostgreSQL faults worker records it). */
    readonly n?: number
    readonly token: number
    readonly until: number
    /**
     * When the start was recorded, on the store's clock, the one `until` is written in: on PostgreSQL
     * the host's plus its measured offset to the server's, which the ledger's `at` (the host's
     * `Date.now()`) can trail by the measurement's error (docs/engines.md, "The clock").
     */
    readonly clockAt?: number
    readonly worker: string
    readonly selfAck: boolean
    readonly at: number
    readonly pid: number
  }
  | { readonly e: "done" | "fail"; readonly job: number; readonly token: number; readonly at: number; readonly pid: number }
  /** The handler's own ack failed (`SqlError`): the handler fails, and `process` gives the claim back. */
  | { readonly e: "ackFailed"; readonly job: number; readonly token: number; readonly at: number; readonly pid: number }
  | { readonly e: "ack"; readonly job: number; readonly token: number; readonly ok: boolean; readonly at: number; readonly pid: number }
  | { readonly e: "kill" | "freeze" | "thaw"; readonly target: number; readonly at: number; readonly pid: number }
  /** A database fault (a killed connection, a restarting server) from `fault` to its `faultEnd`. */
  | { readonly e: "fault" | "faultEnd"; readonly kind: string; readonly at: number; readonly pid: number }
  /**
   * An enqueue that failed with `SqlError`: its commit may still have happened (the connection died
   * between COMMIT and its answer), so a job with this `n` may turn up, and is accounted for.
   */
  | { readonly e: "enqFailed"; readonly n: number; readonly poison: boolean; readonly at: number; readonly pid: number }

type Start = Extract<CrashRecord, { e: "start" }>
/** When a start was recorded, on the clock its lease is written in (a ledger without it: the host's). */
const onStoreClock = (s: Start) => s.clockAt ?? s.at
type Ack = Extract<CrashRecord, { e: "ack" }>

export const checkCrashLedger = (records: ReadonlyArray<CrashRecord>, dead: ReadonlyArray<Queues.Job>) => {
  const v = collect()
  const byJob = new Map<
    number,
    { poison: boolean; starts: Array<Start>; done: Set<number>; acks: Array<Ack>; gaveBack: Map<number, number> }
  >()
  const failedEnqueues = new Map<number, boolean>()
  const faults: Array<{ from: number; to: number }> = []
  let ambiguousEnqueues = 0
  const killedAt = new Map<number, number>()
  const frozen = new Map<number, Array<{ from: number; to: number }>>()
  for (const r of records) {
    if (r.e === "enq") byJob.set(r.job, { poison: r.poison, starts: [], done: new Set(), acks: [], gaveBack: new Map() })
    else if (r.e === "kill") killedAt.set(r.target, r.at)
    else if (r.e === "freeze") frozen.set(r.target, [...(frozen.get(r.target) ?? []), { from: r.at, to: Infinity }])
    else if (r.e === "enqFailed") failedEnqueues.set(r.n, r.poison)
    else if (r.e === "fault") faults.push({ from: r.at, to: Infinity })
    else if (r.e === "faultEnd") {
      const open = faults.find((f) => f.to === Infinity)
      if (open !== undefined) open.to = r.at
    }
    else if (r.e === "thaw") {
      const spans = frozen.get(r.target) ?? []
      const open = spans.find((s) => s.to === Infinity)
      if (open !== undefined) open.to = r.at
    }
  }
  for (const r of records) {
    if (r.e !== "start" && r.e !== "done" && r.e !== "ack" && r.e !== "fail" && r.e !== "ackFailed") continue
    let job = byJob.get(r.job)
    if (job === undefined && r.e === "start" && r.n !== undefined && failedEnqueues.has(r.n)) {
      // its enqueue reported a failure, yet committed: accounted for, and held to every rule from here
      ambiguousEnqueues++
      job = { poison: failedEnqueues.get(r.n)!, starts: [], done: new Set(), acks: [], gaveBack: new Map() }
      byJob.set(r.job, job)
    }
    if (job === undefined) {
      v.add("unknown job", `job ${r.job} handled but never enqueued by the producer`)
      continue
    }
    if (r.e === "start") job.starts.push(r)
    else if (r.e === "done") job.done.add(r.token)
    else if (r.e === "ack") job.acks.push(r)
    else if (r.e === "ackFailed") job.gaveBack.set(r.token, r.at)
  }
  const deadIds = new Map(dead.map((j) => [j.id, j]))
  const frozenDuring = (pid: number, from: number, to: number) =>
    (frozen.get(pid) ?? []).some((s) => s.from < to && s.to > from)

  let redelivered = 0
  let duplicates = 0
  const explained = { killedBeforeAck: 0, frozenPastLease: 0, dbFault: 0, leaseLapsed: 0 }
  const faultDuring = (from: number, to: number) => faults.some((f) => f.from < to && f.to > from)
  let lateAcksLost = 0
  // acked past its lease end with nobody having claimed it since: the contract lets that ack stand
  let lateAcksKept = 0
  let maxToken = 0
  let staleStarts = 0
  let handled = 0
  let poisonDead = 0

  for (const [id, job] of byJob) {
    // in claim order (the token's): a worker frozen between its claim and its handler's first step
    // records its start after the next claim's (a stale start, its own lease already lapsed)
    const starts = [...job.starts].sort((a, b) => a.token - b.token)
    // dead exactly when the attempts were meant to run out
    const deadJob = deadIds.get(id)
    if (job.poison) {
      if (deadJob === undefined) v.add("poison not dead", `job ${id} should have spent its 2 attempts`)
      else if (deadJob.attempts !== deadJob.maxAttempts) v.add("poison attempts", `job ${id} died at ${deadJob.attempts}`)
      else poisonDead++
      continue
    }
    if (deadJob !== undefined) v.add("dead", `job ${id} died (${deadJob.lastError._tag === "Some" ? deadJob.lastError.value : ""})`)
    if (job.done.size === 0) v.add("lost", `job ${id} was never handled to the end`)
    else handled++
    if (starts.length > 1) redelivered++
    for (let i = 0; i < starts.length; i++) {
      const s = starts[i]!
      maxToken = Math.max(maxToken, s.token)
      const next = starts[i + 1]
      if (next === undefined) continue
      // claim tokens only grow
      if (next.token === s.token) v.add("token", `job ${id}: token ${s.token} claimed twice`)
      if (s.at > next.at) {
        staleStarts++
        // inside its own lease, it was claimed after the next token's claim: a token going back
        if (onStoreClock(s) < s.until) v.add("token", `job ${id}: token ${s.token} claimed after token ${next.token}`)
      }
      // no second claim while the first was within its lease ([claim, until): lapsed at now >= until),
      // judged on the clock the leases are written in (unless the claim was given back first: its
      // handler failed, and the retry ended the tenure)
      const gaveBack = job.gaveBack.get(s.token)
      if (onStoreClock(next) < s.until && !(gaveBack !== undefined && gaveBack <= next.at)) {
        v.add(
          "overlap",
          `job ${id}: claimed by ${next.worker} at ${onStoreClock(next)} inside ${s.worker}'s lease (until ${s.until})`
        )
      }
      // every re-delivery after a completed handler is explained
      if (job.done.has(s.token)) {
        duplicates++
        const ownAck = job.acks.find((a) => a.token === s.token)
        const killed = killedAt.get(s.pid)
        if (ownAck?.ok === true && ownAck.at < next.at) {
          v.add("duplicate", `job ${id}: acked by token ${s.token}, yet claimed again`)
        } else if (killed !== undefined && killed >= s.at && killed < next.at) explained.killedBeforeAck++
        else if (frozenDuring(s.pid, s.at, next.at)) explained.frozenPastLease++
        // the ack (or its answer) was lost to a killed connection or a restarting server
        else if (faultDuring(s.at, next.at)) explained.dbFault++
        else explained.leaseLapsed++
      }
    }
    // acks report the truth: true only while no later claim existed, false only when one did
    for (const ack of job.acks) {
      const own = starts.find((s) => s.token === ack.token)
      if (ack.ok && own !== undefined && ack.at >= own.until) lateAcksKept++
      const later = starts.filter((s) => s.token > ack.token)
      if (ack.ok && later.some((s) => s.at < ack.at)) {
        v.add("ack", `job ${id}: ack of token ${ack.token} succeeded after token ${later[0]!.token} claimed it`)
      }
      if (!ack.ok) {
        if (later.length === 0) v.add("ack", `job ${id}: ack of token ${ack.token} lost with no later claim`)
        else if (!later.some((s) => job.done.has(s.token))) {
          v.add("late ack", `job ${id}: no later claim finished after token ${ack.token}'s lost ack`)
        } else lateAcksLost++
      }
    }
  }
  return {
    facts: {
      jobs: byJob.size,
      handled,
      poisonDead,
      redelivered,
      duplicates,
      "dup.killedBeforeAck": explained.killedBeforeAck,
      "dup.frozenPastLease": explained.frozenPastLease,
      ...(faults.length > 0 ? { "dup.dbFault": explained.dbFault, ambiguousEnqueues } : {}),
      "dup.leaseLapsed": explained.leaseLapsed,
      lateAcksLost,
      lateAcksKept,
      maxToken,
      staleStarts
    },
    violations: v.list
  }
}
