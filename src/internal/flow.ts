import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import type { JobRow } from "./engine.js"
import type { ResolvedLimits } from "./options.js"

/**
 * Flow control (CONTRACT §9, docs/flow-control.md), engine-free: the claim
 * walk that decides which due jobs a limited queue may hand out now. Each
 * engine implements `FlowOps` (small reads and writes on its own tables,
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

export interface LimitsRow extends ResolvedLimits {
  /** The round of the latest claim: where a group without live jobs starts. */
  readonly currentRound: number
}

/** A due job as the walk sees it. */
export interface Candidate {
  readonly id: number
  readonly priority: number
  readonly round: number
  readonly runAt: number
  readonly group: string
  readonly state: "pending" | "scheduled" | "claimed"
  /**
   * A lapsed claim that a claim would move to dead, not hand out (its attempts
   * spent, or expired): read with the lapsed claims only (rare rows; the
   * pending pages stay on their covering indexes). SQLite answers 0 or 1.
   */
  readonly doomed?: boolean | number
}

/** What the walk needs before its first candidate (`FlowOps.start`). */
export interface StartRequest {
  /** Count the queue's live claims (it has a `concurrency`). */
  readonly inFlight: boolean
  /** Read the last sequence number of the queue's claim log (it has a `rate`). */
  readonly queueLast: boolean
  /** Due scheduled jobs to read, up to this many (a read-only walk cannot promote them); 0: none. */
  readonly dueScheduled: number
  /** The first page of pending candidates, this many. */
  readonly pageSize: number
}

export interface Start {
  readonly inFlight: number
  readonly queueLast: number
  /** Claimed jobs whose lease lapsed, the first `EXTRA_PAGE` in walk order. */
  readonly lapsed: ReadonlyArray<Candidate>
  /** Due scheduled rows (as asked), the first ones in walk order. */
  readonly dueScheduled: ReadonlyArray<Candidate>
  /** Due pending jobs in walk order, the first `pageSize`. */
  readonly page: ReadonlyArray<Candidate>
}

/** A group as the walk first meets it. */
export interface GroupStart {
  /** Its jobs claimed with a live lease. */
  readonly inFlight: number
  /** Its live jobs ahead of the candidate met, counted up to the cap asked for (0 without one). */
  readonly ahead: number
  /** The last sequence number of its claim log (0 when not asked for). */
  readonly last: number
}

/** What a claim writes when it takes its job (and only then): the rules' bookkeeping, decided by the walk. */
export interface ClaimWrites {
  /** Claim-log entries (scope, sequence number), at the claim's instant. */
  readonly log: ReadonlyArray<readonly [scope: string, seq: number]>
  /** The queue's current round moves up to this (never down), or stays. */
  readonly round: number | null
}

/**
 * What the walk asks of storage, bound to one queue, one instant and one
 * worker. Reads are grouped by when the walk needs them (`start`,
 * `groupStart`), so an engine that pays a round trip per statement can
 * answer each group in one.
 */
export interface FlowOps {
  /**
   * The queue's limits. Claiming (`lock`), limited claims serialise here
   * (on PostgreSQL the row is taken `FOR UPDATE`; that engine also promotes
   * due scheduled rows in the same statement and makes `promote` a no-op).
   */
  readonly limits: (lock: boolean) => LimitsRow | undefined
  /** Due scheduled rows into the claim index. */
  readonly promote: () => void
  readonly start: (request: StartRequest) => Start
  /** Due pending jobs in walk order, after `after` (exclusive). */
  readonly pending: (after: Candidate, size: number) => ReadonlyArray<Candidate>
  /**
   * The next page, in walk order after `after` (exclusive), of the queue's lapsed claims or (a read-only
   * walk) its due scheduled rows: what `start` read first, `EXTRA_PAGE` rows at a time.
   */
  readonly extra: (kind: ExtraKind, after: Candidate) => ReadonlyArray<Candidate>
  /** `ahead` counts live jobs of `group` ahead of (round, id) up to `cap` (null: not asked); `last` when `log`. */
  readonly groupStart: (group: string, round: number, id: number, cap: number | null, log: boolean) => GroupStart
  /** Live jobs of `group` ahead of (round, id), counted up to `cap`. */
  readonly groupAhead: (group: string, round: number, id: number, cap: number) => number
  /**
   * The instant of claim `seq` of `scope`; when it was pruned, that of the
   * oldest claim still logged after it (it was made no later: an upper
   * bound, see `admits`); `undefined` when nothing from `seq` on is logged.
   */
  readonly logAt: (scope: string, seq: number) => number | undefined
  /**
   * Claims the job if it is still claimable (or moves it to dead when it
   * expired or spent its attempts); when it claimed it, also makes `writes`.
   */
  readonly claim: (id: number, writes: ClaimWrites) => JobRow | undefined
  /** Forgets claims of `scope` up to `seq` that left the window (claimed at or before `before`). */
  readonly prune: (scope: string, seq: number, before: number) => void
}

export type Call = { readonly [K in keyof FlowOps]: { readonly op: K; readonly args: Parameters<FlowOps[K]> } }[keyof FlowOps]
type Walk<A> = Generator<Call, A, any>

function* call<K extends keyof FlowOps>(op: K, ...args: Parameters<FlowOps[K]>): Walk<ReturnType<FlowOps[K]>> {
  return yield { op, args } as Call
}

export type FlowOutcome =
  | { readonly limited: false }
  | {
    readonly limited: true
    /**
     * Claimed rows in walk order (mode `claim`), those taken from a lapsed
     * lease marked `lapsed`, then the candidates the claim met expired or
     * with their attempts spent and moved to dead — exactly as the unlimited
     * claim answers (for the metrics: they are no claims).
     */
    readonly rows: ReadonlyArray<JobRow>
    /** How many jobs the walk took (or, read-only, could take). */
    readonly taken: number
    /** How many of those were pending (not a lapsed lease). */
    readonly takenPending: number
    /** The soonest instant a rate window admits a job it held back, if one did. */
    readonly reopenAt: number | null
  }

/**
 * `claim` claims up to `n`; `probe` and `count` only read: whether one job
 * could be claimed now, and how many pending ones could (for `stats`).
 */
export type FlowMode = "claim" | "probe" | "count"

/**
 * Candidates are read in pages from the flow index (covering: a page costs
 * no table lookups), the first as large as the claim, then growing: most
 * claims take the first candidate they see.
 */
const FIRST_PAGE_MAX = 32
const PAGE_MAX = 256
const groupScope = (group: string) => `#${group}`

/** The size of a walk's first page of pending candidates (an engine that reads ahead asks for the same). */
export const firstPageSize = (n: number, mode: FlowMode) => Math.max(1, Math.min(n, mode === "count" ? PAGE_MAX : FIRST_PAGE_MAX))

/**
 * Lapsed claims and (for a read-only walk) due scheduled rows are read in pages of this many, in walk
 * order, and a full page is followed by the next (`extra`): rare rows, read apart from the pending pages
 * (which stay on their covering index); the walk meets them where their order puts them, however many
 * there are.
 */
export const EXTRA_PAGE = 1000

export type ExtraKind = "lapsed" | "due"

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
      const round = c.round > advancedTo ? c.round : null
      const row = yield* call("claim", c.id, { log, round })
      if (row === undefined) continue // settled meanwhile by its owner
      // Met expired or with its attempts spent, the claim moved it to dead (CONTRACT §3): it takes no slot.
      if (row.state !== "claimed") {
        died.push(row)
        buried.add(c.id)
        continue
      }
      rows.push(c.state === "claimed" ? { ...row, lapsed: true } : row)
    }
    taken++
    if (c.state !== "claimed") takenPending++
    budget--
    if (group !== undefined) group.taken++
    if (!dry && c.round > advancedTo) advancedTo = c.round
  }
  if (!dry && taken > 0) {
    // Claims `limit` places before the last one no longer decide anything (none while the log is shorter).
    if (lim.rateLimit !== null) {
      const upTo = queueLast + taken - lim.rateLimit
      if (upTo > 0) yield* call("prune", "", upTo, now - lim.ratePerMillis!)
    }
    if (lim.groupRateLimit !== null) {
      for (const [key, group] of groups) {
        const upTo = group.last + group.taken - lim.groupRateLimit
        if (group.taken > 0 && upTo > 0) yield* call("prune", groupScope(key), upTo, now - lim.groupRatePerMillis!)
      }
    }
  }
  return { limited: true, rows: died.length === 0 ? rows : [...rows, ...died], taken, takenPending, reopenAt }
}

/** `FlowOps` as effects (an application's client, PostgreSQL); an operation may fail with `E` to abandon the walk. */
export type FlowEffectOps<E = SqlError> = {
  readonly [K in keyof FlowOps]: (...args: Parameters<FlowOps[K]>) => Effect.Effect<ReturnType<FlowOps[K]>, E>
}

/** Runs a walk on effectful operations. */
export const runEffect = <A, E = SqlError>(makeWalk: () => Walk<A>, ops: FlowEffectOps<E>): Effect.Effect<A, E> =>
  Effect.suspend(() => {
    const walk = makeWalk()
    const loop = (input: unknown): Effect.Effect<A, E> => {
      const step = walk.next(input)
      if (step.done) return Effect.succeed(step.value)
      const { args, op } = step.value
      return Effect.flatMap((ops[op] as (...a: ReadonlyArray<unknown>) => Effect.Effect<unknown, E>)(...args), loop)
    }
    return loop(undefined)
  })
