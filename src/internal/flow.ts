import type { JobRow } from "./engine.js"
import { call, type Candidate, type ExtraKind, type FlowMode, type FlowOutcome, type Walk } from "./flowOps.js"

/**
 * Flow control (CONTRACT §9, docs/flow-control.md), engine-free: the claim
 * walk that decides which due jobs a limited queue may hand out now. Each
 * engine implements `FlowOps` (flowOps.ts: small reads and writes on its own tables,
 * inside the claim's transaction, after it serialised the queue's limited
 * claims) and drives the walk: synchronously on SQLite's own connection
 * (sqlite/flowStorage.ts), as effects otherwise (`runEffect`).
 *
 * Fair rotation is start-time fair queueing: every job of a limited queue
 * carries a round, one more than the last live job of its group (or the
 * queue's current round, when its group had none), and the walk visits due
 * jobs in (priority desc, round, runAt, id) order from one index. Groups
 * alternate without any per-group scan; a group's backlog sits in later
 * rounds.
 */

/**
 * Candidates are read in pages from the flow index (covering: a page costs
 * no table lookups), the first as large as the claim, then growing: most
 * claims take the first candidate they see.
 */
const FIRST_PAGE_MAX = 32
const PAGE_MAX = 256
const groupScope = (group: string) => `#${group}`

/**
 * The queue's current round (where a group starts when its job's priority has no pending job) is written
 * when a claim moves it this many rounds or more, not at every claim: with few groups every claim moved it,
 * one row more written per claim (on SQLite a page of its own in each commit). It may so lag the rotation by
 * up to `ROUND_STEP - 1` rounds: a group arriving then gets at most that many turns ahead of the others'
 * next jobs (docs/flow-control.md, "Fairness").
 */
export const ROUND_STEP = 8

/** The round a claim of a job of round `round` writes as the queue's current round `current`, or `null`: unchanged. */
export const roundToWrite = (round: number, current: number) => round >= current + ROUND_STEP ? round : null

/**
 * After a claim `taken` places past a log ending at `last`, the claims up to which a window of `limit`
 * no longer decides anything (the claim `limit` places before the last one is the oldest it reads), or
 * `null`: none, while the log is shorter.
 */
export const prunableUpTo = (last: number, taken: number, limit: number) => {
  const upTo = last + taken - limit
  return upTo > 0 ? upTo : null
}

/** The size of a walk's first page of pending candidates (an engine that reads ahead asks for the same). */
export const firstPageSize = (n: number, mode: FlowMode) => Math.max(1, Math.min(n, mode === "count" ? PAGE_MAX : FIRST_PAGE_MAX))

/**
 * Lapsed claims and (for a read-only walk) due scheduled rows are read in pages of this many, in walk
 * order, and a full page is followed by the next (`extra`): rare rows, read apart from the pending pages
 * (which stay on their covering index); the walk meets them where their order puts them, however many
 * there are.
 */
export const EXTRA_PAGE = 1000

/** How many due scheduled rows a walk reads first (a read-only walk cannot promote them; a claim promotes first). */
export const dueScheduledToRead = (mode: FlowMode) => mode === "claim" ? 0 : EXTRA_PAGE

export const walkOrder = (a: Candidate, b: Candidate) =>
  b.priority - a.priority || a.round - b.round || a.runAt - b.runAt || a.id - b.id

/** Lapsed claims or due scheduled rows as the walk pages through them. */
interface ExtraRows {
  readonly kind: ExtraKind
  page: ReadonlyArray<Candidate>
  i: number
  more: boolean
}

/** The next row of `rows` (reading its next page when this one is done and was full), not taken. */
function* headOf(rows: ExtraRows): Walk<Candidate | undefined> {
  if (rows.i >= rows.page.length && rows.more) {
    rows.page = yield* call("extra", rows.kind, rows.page[rows.page.length - 1]!)
    rows.more = rows.page.length === EXTRA_PAGE
    rows.i = 0
  }
  return rows.page[rows.i]
}

interface GroupState {
  blocked: boolean
  /**
   * The serial place (round, id) of a candidate held back by the live jobs
   * ahead of it: the group's candidates from there on wait too, while one
   * ahead of it — met later, the walk going by priority first — may not.
   */
  waitsFrom: readonly [round: number, id: number] | undefined
  readonly inFlight: number
  readonly last: number
  taken: number
}

/**
 * Whether the `k`-th claim of this walk fits `limit` claims per `per` of a
 * scope whose log ends at `last`: the claim `limit` places before it must
 * have left the window `(now − per, now]`. `true`, or the instant it leaves.
 * That claim may have been pruned, when a walk under an earlier rule with a
 * smaller `limit` or a shorter `per` no longer needed it: its instant is then
 * taken as that of the oldest claim logged after it (`logAt`), which it did
 * not follow — judged no earlier than it was, so a raised `limit` with a
 * longer `per` never admits more than the rule allows over the claims made
 * (it may hold a claim back until that later claim leaves the window).
 */
function* admits(scope: string, limit: number, per: number, last: number, k: number, now: number): Walk<true | number> {
  const target = last + k - limit
  if (target <= 0) return true
  if (target > last) return now + per // one of this walk's own claims, made at `now`
  const at = yield* call("logAt", scope, target)
  return at === undefined || at <= now - per ? true : at + per
}

/** Whether `c` comes before the serial place `place` in its group (its round, then its id). */
const serialBefore = (c: Candidate, place: readonly [number, number]) =>
  c.round < place[0] || (c.round === place[0] && c.id < place[1])

/**
 * The doomed lapsed claims of `c`'s group ahead of it that are still claimed (not in `buried`): they hold
 * no place, and a claim buries them when it meets them, which may be after `c` (a lower priority).
 */
const doomedAhead = (lapsed: ReadonlyArray<Candidate>, c: Candidate, buried: ReadonlySet<number>) => {
  let n = 0
  for (const d of lapsed) if (d.doomed && !buried.has(d.id) && d.group === c.group && serialBefore(d, [c.round, c.id])) n++
  return n
}

/** The claim walk of one limited queue at `now` (see the module comment and docs/flow-control.md). */
export function* flowWalk(now: number, n: number, mode: FlowMode): Walk<FlowOutcome> {
  const dry = mode !== "claim"
  const lim = yield* call("limits", !dry)
  if (lim === undefined) return { limited: false }
  if (!dry) yield* call("promote")
  const rows: Array<JobRow> = []
  const died: Array<JobRow> = []
  let budget = n
  let taken = 0
  let takenPending = 0
  let reopenAt: number | null = null
  // The round this walk moved the queue's current round to (its claims' rounds, once each).
  let advancedTo = lim.currentRound
  const soonest = (at: number) => {
    reopenAt = reopenAt === null ? at : Math.min(reopenAt, at)
  }
  const groupLimited = lim.groupConcurrency !== null || lim.groupRateLimit !== null
  const groups = new Map<string, GroupState>()
  // The candidates this claim buried: the engines read group counts again after a burial (they exclude them).
  const buried = new Set<number>()
  const start = yield* call("start", {
    inFlight: lim.concurrency !== null,
    queueLast: lim.rateLimit !== null,
    dueScheduled: dueScheduledToRead(mode),
    pageSize: firstPageSize(n, mode)
  })
  if (lim.concurrency !== null) budget = Math.min(budget, lim.concurrency - start.inFlight)
  const queueLast = start.queueLast

  // Lapsed claims and due scheduled rows, each in walk order, met beside the pending pages.
  const lapsed: ExtraRows = { kind: "lapsed", page: start.lapsed, i: 0, more: start.lapsed.length === EXTRA_PAGE }
  const due: ExtraRows = {
    kind: "due",
    page: start.dueScheduled,
    i: 0,
    more: dry && start.dueScheduled.length === EXTRA_PAGE
  }
  // A walk passes over the doomed lapsed claims ahead of a candidate in its group (`doomedAhead`), which may
  // come anywhere in walk order (a lower priority): under a group limit it reads them all first (more than a
  // page is rare), a claim too (one met before its doomed claim ahead, on a later page, waited behind it).
  if ((dry || lim.groupConcurrency !== null) && lapsed.more) {
    const all = [...lapsed.page]
    while (lapsed.more) {
      const next: ReadonlyArray<Candidate> = yield* call("extra", "lapsed", all[all.length - 1]!)
      all.push(...next)
      lapsed.more = next.length === EXTRA_PAGE
    }
    lapsed.page = all
  }
  const extraLeft = () => lapsed.i < lapsed.page.length || lapsed.more || due.i < due.page.length || due.more
  let page: ReadonlyArray<Candidate> = budget > 0 ? start.page : []
  let size = firstPageSize(n, mode)
  let more = page.length === size
  let i = 0
  while (budget > 0) {
    if (i >= page.length && more) {
      size = Math.min(PAGE_MAX, size * 4)
      page = yield* call("pending", page[page.length - 1]!, size)
      more = page.length === size
      i = 0
    }
    const p = page[i]
    let e: Candidate | undefined
    let from: ExtraRows | undefined
    if (extraLeft()) {
      const l = yield* headOf(lapsed)
      const d = yield* headOf(due)
      from = l === undefined ? due : d === undefined || walkOrder(l, d) <= 0 ? lapsed : due
      e = from === lapsed ? l : d
    }
    if (p === undefined && e === undefined) break
    let c: Candidate
    if (p !== undefined && (e === undefined || walkOrder(p, e) <= 0)) c = page[i++]!
    else {
      c = e!
      from!.i++
    }
    // What a claim buries (a lapsed claim with its attempts spent, or expired) takes no slot, no place in its
    // group and no place in a window: a dry walk (stats, a waiter's probe) passes over it, and a claim buries
    // it whatever the limits (its claim statement judges it doomed as the read did, at `now`).
    if (dry && c.doomed) continue
    let group = groups.get(c.group)
    if (!c.doomed) {
      if (group?.blocked === true || (group?.waitsFrom !== undefined && !serialBefore(c, group.waitsFrom))) continue
      if (groupLimited) {
        // The doomed lapsed claims ahead of `c` still claimed hold no place: the count of live jobs ahead
        // passes over them (counted up to the cap plus them, then less them; every lapsed page was read).
        const skip = lim.groupConcurrency !== null ? doomedAhead(lapsed.page, c, buried) : 0
        const cap = lim.groupConcurrency === null ? null : lim.groupConcurrency + skip
        let ahead: number | undefined
        if (group === undefined) {
          const first = yield* call("groupStart", c.group, c.round, c.id, cap, lim.groupRateLimit !== null)
          group = { blocked: false, waitsFrom: undefined, inFlight: first.inFlight, last: first.last, taken: 0 }
          groups.set(c.group, group)
          ahead = first.ahead
        }
        if (lim.groupConcurrency !== null) {
          // Serial order: a group's job waits while `groupConcurrency` of its live jobs are ahead of it
          // (a retry waiting out its backoff keeps its place), and while that many are claimed.
          if (group.inFlight + group.taken >= lim.groupConcurrency) {
            group.blocked = true
            continue
          }
          if ((ahead ?? (yield* call("groupAhead", c.group, c.round, c.id, cap!))) - skip >= lim.groupConcurrency) {
            // Not the whole group: the job ahead may be a candidate the walk meets later (a lower priority, or
            // a requeued dead job keeping its place behind a later run_at).
            group.waitsFrom = [c.round, c.id]
            continue
          }
        }
        if (lim.groupRateLimit !== null) {
          const ok = yield* admits(groupScope(c.group), lim.groupRateLimit, lim.groupRatePerMillis!, group.last, group.taken + 1, now)
          if (ok !== true) {
            soonest(ok)
            group.blocked = true
            continue
          }
        }
      }
      if (lim.rateLimit !== null) {
        const ok = yield* admits("", lim.rateLimit, lim.ratePerMillis!, queueLast, taken + 1, now)
        if (ok !== true) {
          soonest(ok)
          break
        }
      }
    }
    if (!dry) {
      // The bookkeeping of this claim, written by the claim itself if it takes the job.
      const log: Array<readonly [string, number]> = []
      if (lim.rateLimit !== null) log.push(["", queueLast + taken + 1])
      if (lim.groupRateLimit !== null && group !== undefined) log.push([groupScope(c.group), group.last + group.taken + 1])
      const round = roundToWrite(c.round, advancedTo)
      const row = yield* call("claim", c.id, { log, round })
      if (row === undefined) continue // settled meanwhile by its owner
      // Met expired or with its attempts spent, the claim moved it to dead (CONTRACT §3): it takes no slot.
      if (row.state !== "claimed") {
        died.push(row)
        buried.add(c.id)
        continue
      }
      rows.push(c.state === "claimed" ? { ...row, lapsed: true } : row)
      if (round !== null) advancedTo = round
    }
    taken++
    if (c.state !== "claimed") takenPending++
    budget--
    if (group !== undefined) group.taken++
  }
  if (!dry && taken > 0) {
    if (lim.rateLimit !== null) {
      const upTo = prunableUpTo(queueLast, taken, lim.rateLimit)
      if (upTo !== null) yield* call("prune", "", upTo, now - lim.ratePerMillis!)
    }
    if (lim.groupRateLimit !== null) {
      for (const [key, group] of groups) {
        const upTo = prunableUpTo(group.last, group.taken, lim.groupRateLimit)
        if (group.taken > 0 && upTo !== null) yield* call("prune", groupScope(key), upTo, now - lim.groupRatePerMillis!)
      }
    }
  }
  return { limited: true, rows: died.length === 0 ? rows : [...rows, ...died], taken, takenPending, reopenAt }
}
