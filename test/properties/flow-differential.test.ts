/**
 * Differential property test of flow control (CONTRACT §9, docs/flow-control.md), model-free: random sequences
 * of operations over ONE limited queue — enqueues (groups "a", "b", "c" or none, priorities, delays, attempts),
 * batches, claims and batch claims, ack / fail / release / retry / heartbeat of held handles, requeues of dead
 * jobs, time (TestClock, also past the visibility timeout so leases lapse), `setLimits` (concurrency,
 * groupConcurrency, rate, groupRate, `{}`) and `clearLimits` — run on every engine of the harness, each on a
 * fresh store with its own TestClock, one after the other. Every step records what is observable: each op's
 * result (the payloads a claim returned, in order), `stats`, every job as `Admin.jobs` shows it.
 *
 * 1. Differential: the four engines share the rules (src/internal/flow.ts) but not their SQL; their traces must
 *    be identical, step by step.
 * 2. The rules of §9, on each engine's trace (engine-free checks, not a model of the walk):
 *    - a claim that took a job leaves at most `concurrency` jobs claimed with a live lease (`now < claimedUntil`),
 *      and at most `groupConcurrency` of each group it took a job of;
 *    - `rate` / `groupRate`: at most `limit` logged claims in `(now − per, now]` (claims count when made while
 *      the rule is in force; `clearLimits` forgets the log);
 *    - serial order: a job is claimed only while fewer than `groupConcurrency` live jobs of its group are ahead
 *      of it in enqueue order (a retry keeps its place, a delayed job holds its group, dead and acked jobs and a
 *      doomed lapsed claim — attempts spent — do not); a requeued dead job's place is left out of the check
 *      (flow-control.md: "one requeued later goes to the front of its group");
 *    - nothing claimable is refused: a claim that took fewer jobs than asked leaves no due job (pending and due,
 *      or a lapsed claim with attempts left) that no limit holds back.
 *
 * Seeded (ALKSTORE_FC_SEED overrides the default seed); 20 runs of 9–31 ops, ~10 s for the four engines.
 * Shrunk counterexamples become fixed examples: test/flow-doomed-ahead.test.ts (found with seeds 7 and 9 over
 * 30–60 ops).
 */
import { describe, expect, it } from "@effect/vitest"
import { fc } from "@fast-check/vitest"
import { Clock, DateTime, Duration, Effect, Option, TestClock, TestContext } from "effect"
import { Admin, Queues } from "../../src/index.js"
import type { EngineUnderTest } from "../contract/harness.js"
import { onEveryEngine } from "./differential.js"
import { fcParams } from "./settings.js"

const visibilityMs = 2_000
const backoffBaseMs = 1_000
const QUEUE = "flowdiff"

interface Spec {
  readonly group: string | null
  readonly priority: number
  readonly delayMs: number
  readonly maxAttempts: number
}

interface Rate {
  readonly limit: number
  readonly perMs: number
}

interface LimitsSpec {
  readonly concurrency?: number
  readonly groupConcurrency?: number
  readonly rate?: Rate
  readonly groupRate?: Rate
}

type Op =
  | { readonly t: "enqueue"; readonly spec: Spec }
  | { readonly t: "enqueueBatch"; readonly count: number; readonly spec: Spec }
  | { readonly t: "claim" }
  | { readonly t: "claimBatch"; readonly n: number }
  | { readonly t: "ack" | "fail" | "release" | "heartbeat"; readonly h: number }
  | { readonly t: "retry"; readonly h: number; readonly delayMs: number | null }
  | { readonly t: "requeueDead"; readonly j: number }
  | { readonly t: "advance"; readonly ms: number }
  | { readonly t: "setLimits"; readonly limits: LimitsSpec }
  | { readonly t: "clearLimits" }

// ---- generators

const spec: fc.Arbitrary<Spec> = fc.record({
  group: fc.constantFrom(null, "a", "b", "c"),
  priority: fc.integer({ min: -1, max: 1 }),
  delayMs: fc.constantFrom(0, 0, 0, 500, 3_000),
  maxAttempts: fc.integer({ min: 1, max: 3 })
})

const rate: fc.Arbitrary<Rate> = fc.record({ limit: fc.integer({ min: 1, max: 3 }), perMs: fc.constantFrom(1_000, 2_000) })

const limitsSpec: fc.Arbitrary<LimitsSpec> = fc.oneof(
  { arbitrary: fc.constant({}), weight: 1 }, // fair rotation only
  {
    arbitrary: fc.record(
      {
        concurrency: fc.integer({ min: 1, max: 3 }),
        groupConcurrency: fc.integer({ min: 1, max: 2 }),
        rate,
        groupRate: rate
      },
      { requiredKeys: [] }
    ),
    weight: 5
  }
)

const op: fc.Arbitrary<Op> = fc.oneof(
  { arbitrary: fc.record({ t: fc.constant("enqueue" as const), spec }), weight: 5 },
  { arbitrary: fc.record({ t: fc.constant("enqueueBatch" as const), count: fc.integer({ min: 2, max: 4 }), spec }), weight: 2 },
  { arbitrary: fc.constant({ t: "claim" as const }), weight: 5 },
  { arbitrary: fc.record({ t: fc.constant("claimBatch" as const), n: fc.integer({ min: 1, max: 3 }) }), weight: 4 },
  {
    arbitrary: fc.record({ t: fc.constantFrom("ack" as const, "fail" as const, "release" as const, "heartbeat" as const), h: fc.nat(9) }),
    weight: 4
  },
  { arbitrary: fc.record({ t: fc.constant("retry" as const), h: fc.nat(9), delayMs: fc.constantFrom(null, 1, 2_500) }), weight: 2 },
  { arbitrary: fc.record({ t: fc.constant("requeueDead" as const), j: fc.nat(19) }), weight: 1 },
  { arbitrary: fc.record({ t: fc.constant("advance" as const), ms: fc.constantFrom(1, 400, 1_000, visibilityMs + 1, 5_000) }), weight: 3 },
  { arbitrary: fc.record({ t: fc.constant("setLimits" as const), limits: limitsSpec }), weight: 2 },
  { arbitrary: fc.constant({ t: "clearLimits" as const }), weight: 1 }
)

/** Most runs start limited (the subject here); the first op may still be anything. */
const sequence: fc.Arbitrary<ReadonlyArray<Op>> = fc.tuple(
  fc.option(limitsSpec, { freq: 5 }),
  fc.array(op, { minLength: 8, maxLength: 30, size: "max" })
).map(([first, rest]) => (first === null ? rest : [{ t: "setLimits" as const, limits: first }, ...rest]))

// ---- one engine's run: the trace

/** A job as `Admin.jobs` shows it, named by its payload (a counter in enqueue order: ids may differ by engine). */
interface JobView {
  readonly p: number
  readonly state: string
  readonly attempts: number
  readonly maxAttempts: number
  readonly runAt: number
  readonly claimedUntil: number | null
}

interface Step {
  readonly op: Op
  readonly now: number
  /** The op's result (`Left` with the error's tag on failure). */
  readonly result: unknown
  /** The payload an op on a handle or a requeue named. */
  readonly subject?: number
  /** The payloads a claim returned, in order. */
  readonly claimed?: ReadonlyArray<number>
  /** The limits in force after the step (as this test set them). */
  readonly limits: LimitsSpec | null
  /** Limits read back after `setLimits` / `clearLimits`. */
  readonly readBack?: unknown
  readonly stats: { pending: number; scheduled: number; claimed: number; dead: number; heldBack: number; oldestPendingAgeMs: number | null }
  readonly jobs: ReadonlyArray<JobView>
}

interface Run {
  readonly steps: ReadonlyArray<Step>
  /** Each payload's group ("" for none). */
  readonly groups: ReadonlyMap<number, string>
}

const toLimits = (l: LimitsSpec): Queues.Limits => ({
  ...(l.concurrency !== undefined ? { concurrency: l.concurrency } : {}),
  ...(l.groupConcurrency !== undefined ? { groupConcurrency: l.groupConcurrency } : {}),
  ...(l.rate !== undefined ? { rate: { limit: l.rate.limit, per: Duration.millis(l.rate.perMs) } } : {}),
  ...(l.groupRate !== undefined ? { groupRate: { limit: l.groupRate.limit, per: Duration.millis(l.groupRate.perMs) } } : {})
})

const fromStored = (l: Queues.StoredLimits) => ({
  concurrency: l.concurrency ?? null,
  groupConcurrency: l.groupConcurrency ?? null,
  rate: l.rate === undefined ? null : { limit: l.rate.limit, perMs: Duration.toMillis(l.rate.per) },
  groupRate: l.groupRate === undefined ? null : { limit: l.groupRate.limit, perMs: Duration.toMillis(l.groupRate.per) }
})

const outcome = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.map(Effect.either(effect), (e) =>
    e._tag === "Right" ? e.right : { Left: (e.left as { _tag?: string })._tag ?? String(e.left) })

const execute = (ops: ReadonlyArray<Op>) =>
  Effect.gen(function*() {
    const queues = yield* Queues.Queues
    const admin = yield* Admin.Admin
    const queue = yield* queues.queue(QUEUE, { visibilityTimeout: visibilityMs, backoffBase: backoffBaseMs })
    const handles: Array<Queues.JobHandle<unknown>> = []
    const idOf = new Map<number, number>() // payload → id
    const payloads: Array<number> = []
    const groups = new Map<number, string>()
    const steps: Array<Step> = []
    let limits: LimitsSpec | null = null
    let counter = 0
    const pick = <A>(items: ReadonlyArray<A>, i: number) => (items.length === 0 ? undefined : items[i % items.length])
    const enqueueOpts = (s: Spec): Queues.EnqueueOpts => ({
      priority: s.priority,
      maxAttempts: s.maxAttempts,
      ...(s.delayMs > 0 ? { delay: s.delayMs } : {}),
      ...(s.group !== null ? { group: s.group } : {})
    })
    const remember = (p: number, id: number, s: Spec) => {
      idOf.set(p, id)
      payloads.push(p)
      groups.set(p, s.group ?? "")
    }

    for (const step of ops) {
      let result: unknown = null
      let claimed: Array<number> | undefined
      let readBack: unknown
      let subject: number | undefined
      switch (step.t) {
        case "enqueue": {
          const p = ++counter
          const id = yield* queue.enqueue(p, enqueueOpts(step.spec))
          remember(p, id, step.spec)
          break
        }
        case "enqueueBatch": {
          const ps = Array.from({ length: step.count }, () => ++counter)
          const ids = yield* queue.enqueueBatch(ps, enqueueOpts(step.spec))
          ps.forEach((p, i) => remember(p, ids[i]!, step.spec))
          break
        }
        case "claim":
        case "claimBatch": {
          const got = step.t === "claim"
            ? Option.toArray(yield* queue.claim("w"))
            : yield* queue.claimBatch("w", step.n)
          handles.push(...got)
          claimed = got.map((h) => h.job.payload as number)
          break
        }
        case "ack":
        case "fail":
        case "release":
        case "heartbeat": {
          const h = pick(handles, step.h)
          if (h === undefined) break
          subject = h.job.payload as number
          result = yield* outcome(
            step.t === "ack" ? h.ack : step.t === "fail" ? h.fail("diff fail") : step.t === "release" ? h.release : h.heartbeat()
          )
          break
        }
        case "retry": {
          const h = pick(handles, step.h)
          if (h === undefined) break
          subject = h.job.payload as number
          result = yield* outcome(h.retry("diff retry", step.delayMs ?? undefined))
          break
        }
        case "requeueDead": {
          const p = pick(payloads, step.j)
          if (p === undefined) break
          subject = p
          result = yield* outcome(queue.requeueDead(idOf.get(p)!))
          break
        }
        case "advance":
          yield* TestClock.adjust(step.ms)
          break
        case "setLimits":
          result = yield* outcome(queues.setLimits(QUEUE, toLimits(step.limits)))
          limits = step.limits
          readBack = Option.getOrNull(Option.map(yield* queues.limits(QUEUE), fromStored))
          break
        case "clearLimits":
          result = yield* outcome(queues.clearLimits(QUEUE))
          limits = null
          readBack = Option.getOrNull(Option.map(yield* queues.limits(QUEUE), fromStored))
          break
      }
      const now = yield* Clock.currentTimeMillis
      const s = yield* queue.stats
      const rows = yield* admin.jobs({ queue: QUEUE, limit: 1000 })
      steps.push({
        op: step,
        now,
        result,
        ...(subject !== undefined ? { subject } : {}),
        ...(claimed !== undefined ? { claimed } : {}),
        ...(readBack !== undefined ? { readBack } : {}),
        limits,
        stats: {
          pending: s.pending,
          scheduled: s.scheduled,
          claimed: s.claimed,
          dead: s.dead,
          heldBack: s.heldBack,
          oldestPendingAgeMs: Option.getOrNull(Option.map(s.oldestPendingAge, Duration.toMillis))
        },
        jobs: rows
          .map((j) => ({
            p: j.payload as number,
            state: j.state,
            attempts: j.attempts,
            maxAttempts: j.maxAttempts,
            runAt: DateTime.toEpochMillis(j.runAt),
            claimedUntil: Option.getOrNull(Option.map(j.claimedUntil, DateTime.toEpochMillis))
          }))
          .sort((a, b) => a.p - b.p)
      })
    }
    return { steps, groups } satisfies Run
  })

/** One engine's run of `ops`: a fresh store and a fresh TestClock (at 0), closed after. */
const runOn = (engine: EngineUnderTest, ops: ReadonlyArray<Op>): Promise<Run> =>
  Effect.runPromise(
    execute(ops).pipe(Effect.provide(engine.store()), Effect.provide(TestContext.TestContext)) as Effect.Effect<Run, unknown>
  )

// ---- the checks

const describeOps = (ops: ReadonlyArray<Op>, upTo: number) =>
  ops.slice(0, upTo + 1).map((o, i) => `${i}: ${JSON.stringify(o)}`).join("\n")

/** 1. Every engine's trace equals the first one's, step by step. */
const assertSameTraces = (ops: ReadonlyArray<Op>, runs: ReadonlyArray<readonly [string, Run]>) => {
  const [firstName, first] = runs[0]!
  for (const [name, run] of runs.slice(1)) {
    for (let i = 0; i < ops.length; i++) {
      const a = JSON.stringify(first.steps[i])
      const b = JSON.stringify(run.steps[i])
      if (a !== b) {
        expect(run.steps[i], `step ${i} differs: ${name} vs ${firstName}, after\n${describeOps(ops, i)}`).toEqual(first.steps[i])
      }
    }
  }
}

const live = (j: JobView, now: number) => j.state === "claimed" && j.claimedUntil !== null && now < j.claimedUntil
/** A lapsed claim that a claim would bury, not hand out: its attempts spent (no job here expires). */
const doomed = (j: JobView, now: number) => j.state === "claimed" && !live(j, now) && j.attempts >= j.maxAttempts
/** Holds its group's place: pending (due or not) or claimed, but not doomed. */
const holdsPlace = (j: JobView, now: number) => (j.state === "pending" || j.state === "scheduled" || j.state === "claimed") && !doomed(j, now)
/** What a claim could hand out now, limits aside. */
const claimable = (j: JobView, now: number) =>
  ((j.state === "pending" || j.state === "scheduled") && j.runAt <= now) || (j.state === "claimed" && !live(j, now) && !doomed(j, now))

interface LoggedClaim {
  readonly at: number
  readonly group: string
}

/** 2. The rules of §9 on one engine's trace. */
const assertRules = (name: string, ops: ReadonlyArray<Op>, run: Run) => {
  const { groups, steps } = run
  // Claim logs, as the docs describe them: a claim is logged while its rule is in force; `clearLimits` forgets.
  let queueLog: Array<LoggedClaim> = []
  let groupLog: Array<LoggedClaim> = []
  // A raised `limit` may be judged by a later claim than the one `limit` places back (pruned): stricter only.
  let rateRaised = false
  let groupRateRaised = false
  let lastRate: Rate | undefined
  let lastGroupRate: Rate | undefined
  const requeued = new Set<number>()
  let before: ReadonlyArray<JobView> = []
  for (let i = 0; i < steps.length; i++) {
    const step = steps[i]!
    const where = `${name}, step ${i}, after\n${describeOps(ops, i)}`
    const now = step.now
    const L = step.limits
    const o = step.op
    if (o.t === "clearLimits") {
      queueLog = []
      groupLog = []
      rateRaised = groupRateRaised = false
      lastRate = lastGroupRate = undefined
    }
    if (o.t === "setLimits") {
      if (o.limits.rate !== undefined) {
        if (lastRate !== undefined && o.limits.rate.limit > lastRate.limit) rateRaised = true
        lastRate = o.limits.rate
      }
      if (o.limits.groupRate !== undefined) {
        if (lastGroupRate !== undefined && o.limits.groupRate.limit > lastGroupRate.limit) groupRateRaised = true
        lastGroupRate = o.limits.groupRate
      }
    }
    if (o.t === "requeueDead" && step.result === true) requeued.add(step.subject!)
    const claimed = step.claimed ?? []
    const jobs = step.jobs
    const after = new Map(jobs.map((j) => [j.p, j]))
    // every job claimed is claimed with a live lease
    for (const p of claimed) expect(live(after.get(p)!, now), `claimed ${p} live, ${where}`).toBe(true)
    if (claimed.length > 0 && L !== null) {
      // concurrency
      if (L.concurrency !== undefined) {
        const n = jobs.filter((j) => live(j, now)).length
        expect(n, `live claims ≤ concurrency ${L.concurrency}, ${where}`).toBeLessThanOrEqual(L.concurrency)
      }
      // groupConcurrency
      if (L.groupConcurrency !== undefined) {
        for (const g of new Set(claimed.map((p) => groups.get(p)!))) {
          const n = jobs.filter((j) => groups.get(j.p) === g && live(j, now)).length
          expect(n, `live claims of group "${g}" ≤ groupConcurrency ${L.groupConcurrency}, ${where}`)
            .toBeLessThanOrEqual(L.groupConcurrency)
        }
        // serial order: fewer than groupConcurrency live jobs of its group ahead of it (before the claim)
        for (const p of claimed) {
          if (requeued.has(p)) continue
          const g = groups.get(p)!
          const ahead = before.filter((j) => j.p < p && groups.get(j.p) === g && !requeued.has(j.p) && holdsPlace(j, now))
          expect(ahead.length, `job ${p} of group "${g}" claimed with live jobs ${ahead.map((j) => j.p)} ahead, ${where}`)
            .toBeLessThan(L.groupConcurrency)
        }
      }
    }
    // rates: logged claims only (made while the rule was in force)
    if (claimed.length > 0) {
      const made = claimed.map((p) => ({ at: now, group: groups.get(p)! }))
      if (L?.rate !== undefined) queueLog.push(...made)
      if (L?.groupRate !== undefined) groupLog.push(...made)
      if (L?.rate !== undefined) {
        const n = queueLog.filter((c) => c.at > now - L.rate!.perMs).length
        expect(n, `claims in (now − ${L.rate.perMs}, now] ≤ rate.limit ${L.rate.limit}, ${where}`).toBeLessThanOrEqual(L.rate.limit)
      }
      if (L?.groupRate !== undefined) {
        for (const g of new Set(made.map((c) => c.group))) {
          const n = groupLog.filter((c) => c.group === g && c.at > now - L.groupRate!.perMs).length
          expect(n, `claims of group "${g}" in the window ≤ groupRate.limit ${L.groupRate.limit}, ${where}`)
            .toBeLessThanOrEqual(L.groupRate.limit)
        }
      }
    }
    // heldBack: due pending jobs held back by the limits (0 without limits)
    expect(step.stats.heldBack, `heldBack ≤ pending, ${where}`).toBeLessThanOrEqual(step.stats.pending)
    if (L === null) expect(step.stats.heldBack, `heldBack 0 without limits, ${where}`).toBe(0)
    // nothing claimable refused: a claim that took fewer than asked leaves nothing a limit does not hold back
    if (o.t === "claim" || o.t === "claimBatch") {
      const asked = o.t === "claim" ? 1 : o.n
      if (claimed.length < asked) {
        const rateBinds = (log: ReadonlyArray<LoggedClaim>, r: Rate, raised: boolean) => {
          const n = log.filter((c) => c.at > now - r.perMs).length
          return n >= r.limit || (raised && n > 0)
        }
        const queueHeld = L !== null && (
          (L.concurrency !== undefined && jobs.filter((j) => live(j, now)).length >= L.concurrency) ||
          (L.rate !== undefined && rateBinds(queueLog, L.rate, rateRaised))
        )
        for (const j of jobs) {
          if (!claimable(j, now) || queueHeld) continue
          const g = groups.get(j.p)!
          const held = L !== null && (
            (L.groupConcurrency !== undefined && (
              jobs.filter((k) => groups.get(k.p) === g && live(k, now)).length >= L.groupConcurrency ||
              jobs.filter((k) => k.p !== j.p && groups.get(k.p) === g && holdsPlace(k, now) && (k.p < j.p || requeued.has(k.p)))
                  .length >= L.groupConcurrency
            )) ||
            (L.groupRate !== undefined && rateBinds(groupLog.filter((c) => c.group === g), L.groupRate, groupRateRaised))
          )
          expect(held, `job ${show(j)} was claimable and no limit held it back, ${where}`).toBe(true)
        }
        // and then, at the same instant, every due pending job is held back
        if (L !== null) expect(step.stats.heldBack, `heldBack after a claim that took less than asked, ${where}`).toBe(step.stats.pending)
      }
    }
    before = jobs
  }
}
const show = (j: JobView) => `${j.p} (${JSON.stringify(j)})`

const check = onEveryEngine({ runOn, assertRules, assertSameTraces })

const seed = 20261202

describe("flow control: the same random operations on every engine", () => {
  it.effect("agree step by step, and keep §9's rules", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(sequence, check),
        { seed, ...fcParams(20) }
      )
    ), 120_000)
})
