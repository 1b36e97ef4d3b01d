/**
 * Differential property test of locks and the scheduler (CONTRACT §4–§5, docs/scheduler-and-outbox.md,
 * docs/queues-and-locks.md), model-free across engines: random sequences of
 *
 * - lock operations — `acquire` (names "a" / "b", owners "o1" / "o2" / the store's default, ttl 1–5 s), `renew`
 *   (the acquiring ttl or another), `release` of any handle taken so far, `withLock` of a body that reads the
 *   lock table (run in place, or forked and holding the lock for a while, across renewals);
 * - scheduler operations — `schedule` ("s1" / "s2", `@every 1s`–`@every 3s`, into one queue, a fresh payload each
 *   time, optional priority and group), `unschedule`, starting and stopping a `runSchedules` leader and a
 *   `runAsStandby` standby (the standby takes over at once when the leader stops), claims from the target queue;
 * - time — TestClock advances (1 ms to 5 s, and 70 s: past the catch-up cap of `@every 1s`; the leader's ttl is
 *   4 s, so a long advance spans several renewals, and stretches with no leader are caught up when one starts)
 *
 * run on every engine of the harness, each on a fresh store with its own TestClock (at 0), one after the other.
 * Every step records what is observable: the op's result (handles' tokens and lease ends, booleans, errors by tag,
 * the schedule read back, claimed payloads), every runner's and forked `withLock`'s status, `Admin.locks` (owners
 * named without the store's instance id), `Admin.schedules`, and every fired job (payload, `runAt`, `createdAt`,
 * priority, group, state) in id order.
 *
 * 1. Differential: the four engines' traces are identical, step by step.
 * 2. The rules, on each engine's trace:
 *    - locks (§4): an acquire succeeds exactly when the lock is free (no row, or lapsed) or already the asking
 *      owner's; a new tenure's token is strictly greater than every earlier one for that name, a re-entry keeps
 *      it and never moves the lease end earlier; `renew` is `true` exactly for the live tenure's handle and moves
 *      the end to `max(end, now + ttl)`; `release` is `true` only for the holder and frees the lock; a `withLock`
 *      body runs only with the lock held by its own owner under a fresh token; at most one live holder per name;
 *      tokens per name never go down;
 *    - scheduler (§5): the fired jobs are exactly what the docs define — while a leader runs, each boundary fires
 *      once, at its instant (`createdAt` = `runAt` = the boundary), with the payload and options registered then;
 *      boundaries that passed with no leader are caught up when one takes the lead (the oldest 64, then skip
 *      forward), none before; a re-registration with the same spec keeps the phase, a changed spec (or a fresh
 *      one after `unschedule`) starts from now + interval; an unscheduled schedule fires nothing more; the
 *      `nextFireAt` read back (`schedule`, `Admin.schedules`) is that boundary.
 *
 * Leadership changes here by a stop (the standby takes over at once) or by a runner starting after a stretch with
 * none; a lease that lapses under a live leader needs a stalled process (test/multiprocess-scheduler.test.ts).
 *
 * Seeded (ALKSTORE_FC_SEED overrides the default seed); 12 runs of 6–26 ops, ~20 s for the four engines. Also run
 * locally with 50–60 runs for each of seeds 1–6 (about 330 sequences): no divergence, no broken rule.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { fc } from "@fast-check/vitest"
import { Cause, Clock, DateTime, Duration, Effect, Exit, Fiber, Option, TestContext } from "effect"
import { Admin, Locks, Queues, Scheduler } from "../../src/index.js"
import type { EngineUnderTest } from "../contract/harness.js"
import { advance, settle } from "../contract/support.js"
import { onEveryEngine } from "./differential.js"
import { fcParams } from "./settings.js"

const QUEUE = "fired"
const PROBE = "zz-probe"
const leaderTtlMs = 4_000
const settings = { leaderTtl: leaderTtlMs, leaderRenewEvery: 1_000, maintenanceEvery: "1 hour" } as const

type LockName = "a" | "b"
type Owner = "o1" | "o2" | null
type ScheduleName = "s1" | "s2"

type Op =
  | { readonly t: "acquire"; readonly name: LockName; readonly owner: Owner; readonly ttlS: number }
  | { readonly t: "renew"; readonly h: number; readonly ttlS: number | null }
  | { readonly t: "release"; readonly h: number }
  | { readonly t: "withLock"; readonly name: LockName; readonly ttlS: number; readonly holdMs: number }
  | {
    readonly t: "schedule"
    readonly name: ScheduleName
    readonly everyS: number
    readonly priority: number | null
    readonly group: string | null
  }
  | { readonly t: "unschedule"; readonly name: ScheduleName }
  | { readonly t: "startLeader" | "stopLeader" | "startStandby" | "stopStandby" }
  | { readonly t: "claim"; readonly n: number }
  | { readonly t: "advance"; readonly ms: number }

// ---- generators

const lockName = fc.constantFrom<LockName>("a", "b")
const scheduleName = fc.constantFrom<ScheduleName>("s1", "s2")

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    arbitrary: fc.record({
      t: fc.constant("acquire" as const),
      name: lockName,
      owner: fc.constantFrom<Owner>("o1", "o2", null),
      ttlS: fc.integer({ min: 1, max: 5 })
    }),
    weight: 5
  },
  {
    arbitrary: fc.record({ t: fc.constant("renew" as const), h: fc.nat(9), ttlS: fc.option(fc.integer({ min: 1, max: 5 })) }),
    weight: 3
  },
  { arbitrary: fc.record({ t: fc.constant("release" as const), h: fc.nat(9) }), weight: 2 },
  {
    arbitrary: fc.record({
      t: fc.constant("withLock" as const),
      name: lockName,
      ttlS: fc.integer({ min: 1, max: 5 }),
      holdMs: fc.constantFrom(0, 0, 1_500, 7_000)
    }),
    weight: 2
  },
  {
    arbitrary: fc.record({
      t: fc.constant("schedule" as const),
      name: scheduleName,
      everyS: fc.integer({ min: 1, max: 3 }),
      priority: fc.constantFrom(null, null, -1, 2),
      group: fc.constantFrom(null, null, "g")
    }),
    weight: 4
  },
  { arbitrary: fc.record({ t: fc.constant("unschedule" as const), name: scheduleName }), weight: 1 },
  {
    arbitrary: fc.record({ t: fc.constantFrom("startLeader" as const, "stopLeader" as const, "startStandby" as const, "stopStandby" as const) }),
    weight: 4
  },
  { arbitrary: fc.record({ t: fc.constant("claim" as const), n: fc.integer({ min: 1, max: 3 }) }), weight: 1 },
  { arbitrary: fc.record({ t: fc.constant("advance" as const), ms: fc.constantFrom(1, 300, 1_000, 2_500, 5_000) }), weight: 5 },
  // long enough for more than 64 boundaries of `@every 1s` to pass unfired when no leader runs (the catch-up cap)
  { arbitrary: fc.constant({ t: "advance" as const, ms: 70_000 }), weight: 1 }
)

/** Most runs register a schedule and start a runner early; the rest of the sequence is anything. */
const sequence: fc.Arbitrary<ReadonlyArray<Op>> = fc.tuple(
  fc.boolean(),
  fc.array(op, { minLength: 6, maxLength: 24, size: "max" })
).map(([lead, rest]) =>
  lead
    ? [{ t: "schedule", name: "s1", everyS: 1, priority: null, group: null } as const, { t: "startStandby" } as const, ...rest]
    : rest
)

// ---- one engine's run: the trace

interface LockView {
  readonly name: string
  readonly owner: string
  readonly token: number
  readonly expiresAt: number
  readonly held: boolean
}

interface ScheduleView {
  readonly name: string
  readonly spec: string
  readonly nextFireAt: number
  readonly payload: unknown
  readonly priority: number
  readonly group: string | null
}

interface FiredView {
  readonly payload: { readonly s: string; readonly v: number }
  readonly runAt: number
  readonly createdAt: number
  readonly priority: number
  readonly group: string
  readonly state: string
}

interface HandleView {
  readonly h: number
  readonly name: string
  readonly owner: string
  readonly token: number
  readonly expiresAt: number
}

interface Step {
  readonly op: Op
  readonly now: number
  /** The op's result (`{ Left: tag }` on failure); for `acquire` the handle's view or null. */
  readonly result: unknown
  /** Runners and forked `withLock`s: "running", "done", "interrupted" or a failure's tag. */
  readonly fibers: ReadonlyArray<string>
  /** What each `withLock` body saw of its lock when it started, in order of the bodies' starts. */
  readonly bodies: ReadonlyArray<{ readonly call: number; readonly row: LockView | null }>
  readonly locks: ReadonlyArray<LockView>
  readonly schedules: ReadonlyArray<ScheduleView>
  readonly fired: ReadonlyArray<FiredView>
}

interface Run {
  readonly steps: ReadonlyArray<Step>
  /** Each test-held handle, in order taken (with the ttl it was acquired with). */
  readonly handles: ReadonlyArray<HandleView & { readonly ttlMs: number }>
}

const tagOf = (error: unknown) => (error as { _tag?: string })._tag ?? String(error)

const outcome = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.map(Effect.either(effect), (e) => (e._tag === "Right" ? e.right : { Left: tagOf(e.left) }))

const status = <A, E>(fiber: Fiber.RuntimeFiber<A, E>) =>
  Effect.map(Fiber.poll(fiber), (polled) =>
    Option.match(polled, {
      onNone: () => "running",
      onSome: (exit) =>
        Exit.isSuccess(exit)
          ? "done"
          : Exit.isInterrupted(exit)
          ? "interrupted"
          : Option.match(Cause.failureOption(exit.cause), {
            onSome: tagOf,
            onNone: () => `defect: ${Cause.pretty(exit.cause)}`
          })
    }))

const execute = (ops: ReadonlyArray<Op>) =>
  Effect.gen(function*() {
    const locks = yield* Locks.Locks
    const scheduler = yield* Scheduler.Scheduler
    const admin = yield* Admin.Admin
    const queues = yield* Queues.Queues
    const sql = yield* SqlClient.SqlClient
    const queue = yield* queues.queue(QUEUE)

    // The store's instance id (the default owner), to name owners alike on every engine.
    const probe = Option.getOrThrow(yield* locks.acquire(PROBE, { ttl: 1 }))
    const instance = probe.owner
    yield* probe.release
    const ownerLabel = (owner: string) =>
      owner === instance ? "default" : owner.startsWith(`${instance}:`) ? owner.slice(instance.length + 1) : owner

    const lockRows = Effect.map(admin.locks, (rows) =>
      rows
        .filter((r) => r.name !== PROBE)
        .map((r): LockView => ({
          name: r.name,
          owner: ownerLabel(r.owner),
          token: r.token,
          expiresAt: DateTime.toEpochMillis(r.expiresAt),
          held: r.held
        }))
        .sort((x, y) => x.name.localeCompare(y.name)))

    const handles: Array<{ handle: Locks.LockHandle; view: HandleView & { ttlMs: number } }> = []
    const fibers: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
    const leaders: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
    const standbys: Array<Fiber.RuntimeFiber<unknown, unknown>> = []
    const bodies: Array<{ call: number; row: LockView | null }> = []
    const steps: Array<Step> = []
    let version = 0
    let calls = 0

    const withLockBody = (name: string, call: number, holdMs: number) =>
      Effect.gen(function*() {
        const row = (yield* lockRows).find((r) => r.name === name) ?? null
        bodies.push({ call, row })
        if (holdMs > 0) yield* Effect.sleep(Duration.millis(holdMs))
        return call
      })

    const live = (list: ReadonlyArray<Fiber.RuntimeFiber<unknown, unknown>>) =>
      Effect.map(Effect.forEach(list, Fiber.poll), (polls) => list.filter((_, i) => Option.isNone(polls[i]!)))

    for (const step of ops) {
      let result: unknown = null
      switch (step.t) {
        case "acquire": {
          const ttlMs = step.ttlS * 1_000
          const got = yield* outcome(locks.acquire(step.name, { ttl: ttlMs, ...(step.owner !== null ? { owner: step.owner } : {}) }))
          if (Option.isOption(got) && Option.isSome(got)) {
            const handle = got.value
            const view = {
              h: handles.length,
              name: handle.name,
              owner: ownerLabel(handle.owner),
              token: handle.token,
              expiresAt: DateTime.toEpochMillis(handle.expiresAt),
              ttlMs
            }
            handles.push({ handle, view })
            result = view
          } else result = Option.isOption(got) ? null : got
          break
        }
        case "renew": {
          const held = handles[step.h % Math.max(1, handles.length)]
          if (held === undefined) break
          result = { h: held.view.h, renewed: yield* outcome(held.handle.renew(step.ttlS === null ? undefined : step.ttlS * 1_000)) }
          break
        }
        case "release": {
          const held = handles[step.h % Math.max(1, handles.length)]
          if (held === undefined) break
          result = { h: held.view.h, released: yield* outcome(held.handle.release) }
          break
        }
        case "withLock": {
          const call = ++calls
          const run = locks.withLock(step.name, step.ttlS * 1_000, withLockBody(step.name, call, step.holdMs))
          if (step.holdMs === 0) result = { call, exit: yield* outcome(run) }
          else {
            fibers.push(yield* Effect.fork(run))
            result = { call, forked: fibers.length - 1 }
          }
          break
        }
        case "schedule": {
          const payload = { s: step.name, v: ++version }
          const opts: Scheduler.ScheduleOpts = {
            ...(step.priority !== null ? { priority: step.priority } : {}),
            ...(step.group !== null ? { group: step.group } : {})
          }
          const got = yield* outcome(scheduler.schedule(step.name, `@every ${step.everyS}s`, QUEUE, payload, opts))
          result = "Left" in (got as object) ? got : scheduleView(got as Scheduler.Schedule)
          break
        }
        case "unschedule":
          result = yield* outcome(scheduler.unschedule(step.name))
          break
        case "startLeader":
          leaders.push(yield* Effect.fork(scheduler.runSchedules))
          fibers.push(leaders[leaders.length - 1]!)
          break
        case "startStandby":
          if ((yield* live(standbys)).length > 0) break
          standbys.push(yield* Effect.fork(scheduler.runAsStandby))
          fibers.push(standbys[standbys.length - 1]!)
          break
        case "stopLeader":
        case "stopStandby": {
          const running = yield* live(step.t === "stopLeader" ? leaders : standbys)
          const last = running[running.length - 1]
          if (last !== undefined) {
            yield* Fiber.interrupt(last)
            result = fibers.indexOf(last)
          }
          break
        }
        case "claim": {
          const got = yield* queue.claimBatch("w", step.n)
          result = got.map((h) => ({ payload: h.job.payload, runAt: DateTime.toEpochMillis(h.job.runAt) }))
          break
        }
        case "advance":
          yield* advance(Duration.millis(step.ms))
          break
      }
      // forked fibers react (a standby takes over, a forked withLock takes its lock) before anything is read
      if (step.t !== "advance") yield* settle
      const now = yield* Clock.currentTimeMillis
      const fired = yield* sql<{
        payload: unknown
        run_at: number
        created_at: number
        priority: number
        group_key: string
        state: string
      }>`SELECT payload, run_at, created_at, priority, group_key, state FROM __alkstore_jobs WHERE queue = ${QUEUE} ORDER BY id`
      steps.push({
        op: step,
        now,
        result,
        fibers: yield* Effect.forEach(fibers, status),
        bodies: bodies.slice(),
        locks: yield* lockRows,
        schedules: (yield* admin.schedules).map(scheduleView).sort((x, y) => x.name.localeCompare(y.name)),
        fired: fired.map((r) => ({
          payload: (typeof r.payload === "string" ? JSON.parse(r.payload) : r.payload) as FiredView["payload"],
          runAt: Number(r.run_at),
          createdAt: Number(r.created_at),
          priority: Number(r.priority),
          group: r.group_key,
          state: r.state
        }))
      })
    }
    for (const fiber of fibers.slice().reverse()) yield* Fiber.interrupt(fiber)
    return { steps, handles: handles.map((h) => h.view) } satisfies Run
  })

const scheduleView = (s: Scheduler.Schedule): ScheduleView => ({
  name: s.name,
  spec: s.spec,
  nextFireAt: DateTime.toEpochMillis(s.nextFireAt),
  payload: s.payload,
  priority: s.opts.priority,
  group: Option.getOrNull(s.opts.group)
})

/** One engine's run of `ops`: a fresh store and a fresh TestClock (at 0), closed after. */
const runOn = (engine: EngineUnderTest, ops: ReadonlyArray<Op>): Promise<Run> =>
  Effect.runPromise(
    execute(ops).pipe(Effect.provide(engine.store(settings)), Effect.provide(TestContext.TestContext)) as Effect.Effect<Run, unknown>
  )

// ---- the checks

const describeOps = (ops: ReadonlyArray<Op>, upTo: number) =>
  ops.slice(0, upTo + 1).map((o, i) => `${i}: ${JSON.stringify(o)}`).join("\n")

/** 1. Every engine's trace equals the first one's, step by step. */
const assertSameTraces = (ops: ReadonlyArray<Op>, runs: ReadonlyArray<readonly [string, Run]>) => {
  const [firstName, first] = runs[0]!
  for (const [name, run] of runs.slice(1)) {
    for (let i = 0; i < ops.length; i++) {
      if (JSON.stringify(first.steps[i]) !== JSON.stringify(run.steps[i])) {
        expect(run.steps[i], `step ${i} differs: ${name} vs ${firstName}, after\n${describeOps(ops, i)}`).toEqual(first.steps[i])
      }
    }
  }
}

const catchUpCap = 64

interface ScheduleModel {
  readonly spec: string
  readonly intervalMs: number
  next: number
  readonly payload: { s: string; v: number }
  readonly priority: number
  readonly group: string
}

const fireKey = (f: { payload: { s: string; v: number }; runAt: number }) => `${f.payload.s}#${f.payload.v}@${f.runAt}`

/** 2. The rules of §4 and §5 on one engine's trace. */
const assertRules = (name: string, ops: ReadonlyArray<Op>, run: Run) => {
  const { steps } = run
  const handleViews = run.handles
  let prevLocks: ReadonlyArray<LockView> = []
  const maxToken = new Map<string, number>()
  const schedules = new Map<string, ScheduleModel>()
  const expectedFires: Array<Omit<FiredView, "state">> = []
  let leading = false
  let version = 0
  let bodiesSeen = 0
  for (let i = 0; i < steps.length; i++) {
    const step = steps[i]!
    const where = `${name}, step ${i}, after\n${describeOps(ops, i)}`
    const o = step.op
    const now = step.now
    const rowOf = (rows: ReadonlyArray<LockView>, n: string) => rows.find((r) => r.name === n)
    const isHeld = (r: LockView | undefined) => r !== undefined && r.expiresAt > now
    const before = (n: string) => rowOf(prevLocks, n)
    const after = (n: string) => rowOf(step.locks, n)

    // ---- locks
    if (o.t === "acquire") {
      const r = before(o.name)
      const owner = o.owner ?? "default"
      const reentrant = isHeld(r) && r!.owner === owner
      const free = !isHeld(r)
      const got = step.result as HandleView | null
      expect(got !== null, `acquire succeeds exactly when free or re-entrant (row before: ${JSON.stringify(r)}), ${where}`)
        .toBe(free || reentrant)
      if (got !== null) {
        if (reentrant) {
          expect(got.token, `re-entry keeps the token, ${where}`).toBe(r!.token)
          expect(got.expiresAt, `re-entry never moves the lease end earlier, ${where}`).toBe(Math.max(r!.expiresAt, now + o.ttlS * 1_000))
        } else {
          expect(got.token, `a new tenure's token is greater than every earlier one, ${where}`).toBeGreaterThan(maxToken.get(o.name) ?? 0)
          expect(got.expiresAt, `a new tenure's lease end, ${where}`).toBe(now + o.ttlS * 1_000)
        }
        expect(after(o.name), `the row after the acquire, ${where}`).toMatchObject({ owner, token: got.token, expiresAt: got.expiresAt })
      } else expect(after(o.name), `a refused acquire changes nothing, ${where}`).toEqual(r)
    }
    if (o.t === "renew" || o.t === "release") {
      const res = step.result as { h: number; renewed?: unknown; released?: unknown } | null
      if (res !== null) {
        const h = handleViews[res.h]!
        const r = before(h.name)
        const holder = isHeld(r) && r!.owner === h.owner && r!.token === h.token
        if (o.t === "renew") {
          expect(res.renewed, `renew is true exactly for the live tenure (row before: ${JSON.stringify(r)}), ${where}`).toBe(holder)
          if (holder) {
            const ttlMs = o.ttlS === null ? h.ttlMs : o.ttlS * 1_000
            expect(after(h.name)?.expiresAt, `renew extends to max(end, now + ttl), ${where}`).toBe(Math.max(r!.expiresAt, now + ttlMs))
          }
        } else {
          expect(res.released, `release is true only for the holder (row before: ${JSON.stringify(r)}), ${where}`).toBe(holder)
          if (holder) expect(isHeld(after(h.name)), `released: free, ${where}`).toBe(false)
        }
        if (!holder) expect(after(h.name), `a refused ${o.t} changes nothing, ${where}`).toEqual(r)
      }
    }
    if (o.t === "withLock") {
      const r = before(o.name)
      const res = step.result as { call: number; exit?: unknown; forked?: number }
      const started = step.bodies.slice(bodiesSeen).filter((b) => b.call === res.call)
      if (isHeld(r)) {
        expect(started, `no withLock body runs while another owner holds the lock, ${where}`).toEqual([])
        if (res.exit !== undefined) expect(res.exit, where).toEqual({ Left: "LockUnavailable" })
        else expect(step.fibers[res.forked!], where).toBe("LockUnavailable")
      } else {
        expect(started.length, `withLock of a free lock runs its body, ${where}`).toBe(1)
        const seen = started[0]!.row
        expect(seen?.owner, `the body runs with the lock held by its own owner, ${where}`).toBe(`withLock:${res.call}`)
        expect(seen!.held, `the body runs with the lock held, ${where}`).toBe(true)
        expect(seen!.token, `withLock's tenure has a fresh token, ${where}`).toBeGreaterThan(maxToken.get(o.name) ?? 0)
        if (res.exit !== undefined) {
          expect(res.exit, where).toBe(res.call)
          expect(isHeld(after(o.name)), `withLock released its lock, ${where}`).toBe(false)
        }
      }
    }
    // no body beside another live tenure: every body saw its own tenure
    for (const b of step.bodies.slice(bodiesSeen)) {
      expect(b.row?.owner, `a body saw its own tenure, ${where}`).toBe(`withLock:${b.call}`)
    }
    bodiesSeen = step.bodies.length
    // a forked withLock ends by its body (done), never by losing its lock
    for (const f of step.fibers) expect(f, `no runner or withLock lost its lease, ${where}`).not.toMatch(/LockLost|SqlError/)
    // tokens never go down; one row per name (so at most one live holder); held is the lease judged at now
    for (const r of step.locks) {
      const prev = before(r.name)
      if (prev !== undefined) expect(r.token, `token of ${r.name} never goes down, ${where}`).toBeGreaterThanOrEqual(prev.token)
      if (prev !== undefined && (prev.owner !== r.owner || prev.token !== r.token)) {
        expect(r.token, `a change of tenure raises the token, ${where}`).toBeGreaterThan(prev.token)
      }
      expect(r.held, `Admin.locks' held is expiresAt > now, ${where}`).toBe(r.expiresAt > now)
      maxToken.set(r.name, Math.max(maxToken.get(r.name) ?? 0, r.token))
    }
    expect(new Set(step.locks.map((r) => r.name)).size, where).toBe(step.locks.length)

    // ---- scheduler: registrations
    if (o.t === "schedule") {
      const payload = { s: o.name, v: ++version }
      const spec = `@every ${o.everyS}s`
      const old = schedules.get(o.name)
      const next = old !== undefined && old.spec === spec ? old.next : now + o.everyS * 1_000
      schedules.set(o.name, { spec, intervalMs: o.everyS * 1_000, next, payload, priority: o.priority ?? 0, group: o.group ?? "" })
      expect(step.result, `schedule reads back the registration, ${where}`).toEqual({
        name: o.name,
        spec,
        nextFireAt: next,
        payload,
        priority: o.priority ?? 0,
        group: o.group
      })
    }
    if (o.t === "unschedule") {
      expect(step.result, `unschedule reports whether there was one, ${where}`).toBe(schedules.has(o.name))
      schedules.delete(o.name)
    }
    // ---- scheduler: what fires. A leader that led through an advance fired each boundary at its instant; one
    // that took the lead at this step caught up at `now` (the oldest 64 per schedule, then skip forward).
    const lease = rowOf(step.locks, "__alkstore_scheduler")
    const leadsNow = isHeld(lease)
    if (leadsNow) {
      const onTime = leading && o.t === "advance"
      for (const s of schedules.values()) {
        let n = 0
        while (s.next <= now && (onTime || n < catchUpCap)) {
          expectedFires.push({ payload: s.payload, runAt: s.next, createdAt: onTime ? s.next : now, priority: s.priority, group: s.group })
          s.next += s.intervalMs
          n++
        }
        if (s.next <= now) s.next = s.next + (Math.floor((now - s.next) / s.intervalMs) + 1) * s.intervalMs
      }
    }
    leading = leadsNow
    const actual = step.fired.map(({ state: _s, ...f }) => f)
    const order = (fs: ReadonlyArray<Omit<FiredView, "state">>) => fs.map((f) => JSON.stringify([fireKey(f), f])).sort()
    expect(order(actual), `the fires are the boundaries the docs define (leader now: ${leadsNow}), ${where}`)
      .toEqual(order(expectedFires))
    expect(new Set(actual.map((f) => `${f.payload.s}@${f.runAt}`)).size, `each boundary fires at most once, ${where}`).toBe(actual.length)
    expect(
      step.schedules.map((s) => [s.name, s.nextFireAt, s.payload]),
      `Admin.schedules: the registrations and their next boundaries, ${where}`
    ).toEqual([...schedules.entries()].sort(([x], [y]) => x.localeCompare(y)).map(([n, s]) => [n, s.next, s.payload]))
    prevLocks = step.locks
  }
}

const check = onEveryEngine({ runOn, assertRules, assertSameTraces })

const seed = 20261203

describe("locks and the scheduler: the same random operations on every engine", () => {
  it.effect("agree step by step, and keep §4's and §5's rules", () =>
    Effect.promise(() =>
      fc.assert(
        fc.asyncProperty(sequence, check),
        { seed, ...fcParams(12) }
      )
    ), 120_000)
})
