import type { SqlError } from "@effect/sql/SqlError"
import { Clock, DateTime, Duration, Effect, Exit, Option } from "effect"
import type * as S from "../Scheduler.js"
import type { LockHandle } from "../Locks.js"
import { type DatabaseReplaced, InvalidSpec, LeadershipLost } from "../StoreError.js"
import { Engine, type EngineShape, type NewJob, type ScheduleRow, signalOnCommit } from "./engine.js"
import { fromChecked, instantAfter, optionalDurationMillis } from "./duration.js"
import { acquireLock, keepRenewed, ownerGivenBack } from "./locks.js"
import { schedulerLockName, validateName } from "./names.js"
import { outsideTransactions } from "./transactionOwner.js"
import { ownOptions, queueDefaults, safeInteger, validateText } from "./options.js"
import { givingBack } from "./patience.js"
import { raceFirst } from "./race.js"
import { encodeJson } from "./payload.js"
import { runMaintenance } from "./queues.js"
import { dueBoundaries, parseEvery } from "./spec.js"
import { attr, countFires, countLeadership, traced, traceparentOf } from "./telemetry.js"
import { transientRetry as retryOnStorageFailure } from "./transient.js"

/** Wake topics: registration changes reach the leader, lease releases reach standbys. */
export const registrationsTopic = "__alkstore_scheduler_tasks"
export const leadershipTopic = "__alkstore_scheduler"

export const toSchedule = (row: ScheduleRow): S.Schedule => ({
  name: row.name,
  spec: row.spec,
  interval: Duration.millis(row.interval_ms),
  queue: row.queue,
  payload: JSON.parse(row.payload) as unknown,
  opts: {
    priority: row.priority,
    maxAttempts: row.max_attempts,
    expires: row.expires_ms === null ? Option.none() : Option.some(Duration.millis(row.expires_ms)),
    group: row.group_key === "" ? Option.none() : Option.some(row.group_key)
  },
  nextFireAt: DateTime.unsafeMake(row.next_fire_at) as DateTime.Utc
})

/**
 * Due schedules one tick handles, the soonest first; more due ones are the
 * next tick's, at once (the soonest boundary is then already past). A tick's
 * transaction and the jobs it writes stay bounded (at most 64 fires each)
 * however many schedules fall due together, as they do after an outage.
 */
export const schedulesPerTick = 1_000

/**
 * One tick, in one write transaction: re-check the lease (fencing), then for
 * each due schedule (up to `schedulesPerTick`) enqueue one job per elapsed
 * boundary (the oldest 64), stamped with the contract defaults and the
 * schedule's options, and advance it. Returns the soonest next boundary, or
 * `undefined` when the lease is gone. Past the fence it holds `fenced`, so the
 * lease's lapse waits for it (`runSchedules`).
 */
const tick = (engine: EngineShape, owner: string, token: number, fenced: Effect.Semaphore) =>
  traced("alkstore.scheduler.tick", () => ({ [attr.owner]: owner, [attr.token]: token }), engine.transaction(Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    if (!(yield* engine.locks.holds(schedulerLockName, owner, token, now))) return undefined
    return yield* fenced.withPermits(1)(fire(engine, now))
  })).pipe(Effect.tap((result) =>
    Effect.sync(() => {
      if (result !== undefined) {
        for (const [queue, count] of result.fired) countFires(queue, count)
      }
    })
  )), (result, span) => {
    if (result === undefined) span.attribute(attr.outcome, "lost")
    else {
      let fires = 0
      for (const count of result.fired.values()) fires += count
      span.attribute(attr.outcome, fires > 0 ? "fired" : "idle")
      span.attribute("alkstore.fired", fires)
    }
  })

/** A tick's fires, past its fence: each due schedule's boundaries enqueued, the schedule advanced. */
const fire = (engine: EngineShape, now: number) =>
  Effect.gen(function*() {
    // The fired jobs link back to this tick's span (when traced), as an enqueue's do to its caller's.
    const traceContext = traceparentOf(yield* Effect.context<never>())
    const fired = new Map<string, number>()
    const jobs: Array<NewJob> = []
    const moves: Array<readonly [string, number]> = []
    for (const schedule of yield* engine.schedules.due(now, schedulesPerTick)) {
      const { boundaries, next } = dueBoundaries(schedule.next_fire_at, schedule.interval_ms, now)
      for (const boundary of boundaries) jobs.push({
        queue: schedule.queue,
        payload: schedule.payload,
        createdAt: now,
        priority: schedule.priority,
        runAt: boundary,
        maxAttempts: schedule.max_attempts,
        visibilityTimeoutMillis: queueDefaults.visibilityTimeoutMillis,
        backoffBaseMillis: queueDefaults.backoffBaseMillis,
        expiresAt: schedule.expires_ms === null ? undefined : boundary + schedule.expires_ms,
        key: undefined,
        traceContext,
        group: schedule.group_key
      })
      // The row's own name (and target queue) as read back: safe only because every name is
      // well-formed UTF-16 (checked at `schedule`), so it is the very string that was written.
      moves.push([schedule.name, next])
      fired.set(schedule.queue, (fired.get(schedule.queue) ?? 0) + boundaries.length)
    }
    // The whole page's fires in one batch and its advances in one call: a statement per schedule
    // made a tick of 10 000 due schedules one transaction of 20 000 round trips on PostgreSQL.
    if (jobs.length > 0) yield* engine.queues.insert(jobs)
    yield* engine.schedules.advance(moves)
    for (const [queue, count] of fired) yield* signalOnCommit(engine, queue, count)
    // Counted once the tick's transaction is written (a rolled-back tick fired nothing).
    return { now, next: yield* engine.schedules.nextFireAt, fired }
  })

/** Counts a leadership change of this process's runner: `acquired`, `released` or `lost`. */
const leadershipChange = (change: "acquired" | "released" | "lost") => Effect.sync(() => countLeadership(change))

export const makeScheduler: Effect.Effect<S.SchedulerShape, never, Engine> = Effect.gen(function*() {
  const engine = yield* Engine
  const { settings } = engine
  let runners = 0

  const schedule: S.SchedulerShape["schedule"] = (name, spec, queue, payload, given) =>
    Effect.gen(function*() {
      yield* validateName(name)
      yield* validateName(queue)
      const intervalMillis = yield* parseEvery(spec)
      const opts = yield* fromChecked(ownOptions(given))
      const priority = (yield* safeInteger("priority", opts?.priority)) ?? 0
      const maxAttempts = (yield* safeInteger("maxAttempts", opts?.maxAttempts, 1)) ?? queueDefaults.maxAttempts
      const expiresMillis = yield* optionalDurationMillis("expires", opts?.expires, { positive: true })
      const group = opts?.group === undefined ? "" : yield* validateText("group", opts.group)
      const encoded = yield* encodeJson(payload)
      const now = yield* Clock.currentTimeMillis
      // The instants the registration and its first fire reach, checked before anything is written (CONTRACT §3).
      const firstBoundary = yield* Effect.mapError(
        instantAfter("spec", now, intervalMillis),
        (error) => new InvalidSpec({ spec, reason: `its first boundary ${error.reason}` })
      )
      if (expiresMillis !== undefined) yield* instantAfter("expires", firstBoundary, expiresMillis)
      const row = yield* engine.schedules.upsert(
        { name, spec, intervalMillis, queue, payload: encoded, priority, maxAttempts, expiresMillis, group },
        now
      )
      yield* signalOnCommit(engine, registrationsTopic)
      return toSchedule(row)
    }).pipe((effect) => traced("alkstore.scheduler.schedule", () => ({ [attr.schedule]: name }), effect))

  const unschedule: S.SchedulerShape["unschedule"] = (name) =>
    Effect.gen(function*() {
      yield* validateName(name)
      const removed = yield* engine.schedules.remove(name)
      if (removed) yield* signalOnCommit(engine, registrationsTopic)
      return removed
    }).pipe((effect) => traced("alkstore.scheduler.unschedule", () => ({ [attr.schedule]: name }), effect))

  /**
   * The soonest boundary, read without the write lock: a wake with nothing
   * due (another process's commit, this runner's own renewal, the fallback
   * poll) then costs one read instead of a `BEGIN IMMEDIATE` that contends
   * with every writer. Losing the lease meanwhile is the renewal's to notice,
   * and no tick ever fires without its own fenced re-check.
   */
  const peek = Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const next = yield* engine.schedules.nextFireAt
    return { now, next, due: Option.exists(next, (at) => at <= now) }
  })

  /**
   * Ticks until the lease is found gone; each wait ends at the next boundary
   * or a change. Each round holds its registrations ticket only while it
   * runs, so a failed tick leaves none behind.
   */
  const ticking = (owner: string, token: number, inTick: Effect.Semaphore) =>
    Effect.gen(function*() {
      let first = true
      const round = engine.wake.withTicket(registrationsTopic, (ticket) =>
        Effect.gen(function*() {
          const peeked = first ? undefined : yield* peek
          first = false
          const result = peeked !== undefined && !peeked.due ? peeked : yield* tick(engine, owner, token, inTick)
          if (result === undefined) return yield* new LeadershipLost({ owner })
          const wakeAt = Math.min(
            Option.getOrElse(result.next, () => Infinity),
            result.now + settings.fallbackPollMillis
          )
          yield* ticket.waitUntil(wakeAt)
        }))
      return yield* Effect.forever(round)
    })

  /**
   * Queue maintenance, at once and then `maintenanceEvery` after each run
   * ends, beside the ticks rather than between them: a backlog's rounds (a
   * million dead jobs purged a week after an outage: ~20 s of rounds on
   * SQLite) held every boundary due meanwhile until the last round ended.
   * Its failure ends the leadership as a tick's does.
   */
  const maintaining = runMaintenance(engine).pipe(
    Effect.zipRight(Effect.sleep(Duration.millis(settings.maintenanceEveryMillis))),
    Effect.forever
  )

  /** Leads until the lease is found gone or a tick or maintenance fails. */
  const lead = (owner: string, token: number, inTick: Effect.Semaphore) =>
    raceFirst(ticking(owner, token, inTick), maintaining)

  /**
   * Gives the lease up when a tenure ends (stopped, or its leadership ended),
   * best effort: it lapses with its ttl anyway, so a busy SQLite file is
   * waited out only briefly here, not for the store's whole patience (a stop
   * must not wait on it). The cap is real time, so it ends under `TestClock`.
   */
  /** Standbys in this process (other processes: the engine's commit signal) try for the lease at once. */
  const wakeStandbys = signalOnCommit(engine, leadershipTopic, Number.MAX_SAFE_INTEGER)
  const letGo = (lease: LockHandle) =>
    givingBack(
      lease.release.pipe(
        Effect.tap((done) => (done ? Effect.zipRight(leadershipChange("released"), wakeStandbys) : Effect.void)),
        Effect.catchAll((error) =>
          Effect.logWarning("alkstore: releasing the scheduler lease failed; it lapses with its ttl", error)
        ),
        Effect.asVoid
      ),
      undefined,
      "the scheduler lease"
    )

  /**
   * Takes the lease, then leads while keeping it renewed. Stopping is
   * interrupting, at any point: the acquire (which may be waiting out a busy
   * file or a connection) is interruptible, and the release is in place before
   * it starts, so a lease once taken is always given up — one whose handle an
   * interruption cut off (on the wire, or in the steps between its write and
   * its handle) by the runner's own owner (`ownerGivenBack`).
   */
  const runSchedules: S.SchedulerShape["runSchedules"] = Effect.suspend(() => {
    const owner = `${engine.instanceId}:scheduler:${++runners}`
    let taken: LockHandle | undefined
    return Effect.flatMap(
      acquireLock(engine.locks, schedulerLockName, owner, settings.leaderTtlMillis),
      Option.match({
        onNone: () => Effect.fail(new LeadershipLost({ owner })),
        onSome: (lease) => Effect.gen(function*() {
          taken = lease
          // Held by each tick from its fence on. A tick past its fence cannot be overtaken: its transaction
          // holds the lease row (PostgreSQL's FOR SHARE) or the file's write lock (SQLite) until it ends,
          // so no other runner takes the lease meanwhile, and its fires are this tenure's. The lease's
          // lapse therefore ends the tenure once such a tick has fired, not under it: a tick that outlasts
          // the lease (a slow database) would otherwise roll back at every tenure, for ever — and on
          // PostgreSQL the renewal itself waits behind that tick's fence.
          const inTick = yield* Effect.makeSemaphore(1)
          return yield* leadershipChange("acquired").pipe(
            Effect.zipRight(raceFirst(
              lead(owner, lease.token, inTick),
              // `keepRenewed` renews every third of what it is given; never less often than
              // three times per lease, so a short `leaderTtl` alone cannot lapse the lease.
              keepRenewed(lease, Math.min(settings.leaderRenewMillis * 3, settings.leaderTtlMillis)).pipe(
                Effect.catchTag("LockLost", () => inTick.withPermits(1)(Effect.fail(new LeadershipLost({ owner }))))
              )
            )),
            Effect.tapErrorTag("LeadershipLost", () => leadershipChange("lost"))
          )
        })
      })
    ).pipe(Effect.onExit((exit) =>
      taken !== undefined
        ? letGo(taken)
        // Stopped before the lease's handle came (its answer cut off on the wire, or in the steps between
        // the write and the handle): the runner's own owner gives back what it may hold, as `withLock` does.
        : Exit.isInterrupted(exit)
        ? ownerGivenBack(engine.locks, schedulerLockName, owner, wakeStandbys)
        : Effect.void
    ))
  }).pipe((effect) => traced("alkstore.scheduler.lead", () => ({}), effect)) as S.SchedulerShape["runSchedules"]

  const halfTtl = Math.max(1, Math.floor(settings.leaderTtlMillis / 2))

  /**
   * Until it is this standby's turn to try again: half a lease TTL after its
   * last try, or at once when a leader releases. A release in this process
   * signals; another process's commit only wakes it to read the lease (a
   * read, never a write), so a busy fleet costs a standby no writes.
   */
  const awaitTurn = (deadline: number): Effect.Effect<void, DatabaseReplaced | SqlError> =>
    Effect.flatMap(
      engine.wake.withTicket(leadershipTopic, (ticket) =>
        Effect.gen(function*() {
          const now = yield* Clock.currentTimeMillis
          if (now >= deadline || !(yield* engine.locks.held(schedulerLockName, now))) return "now" as const
          return yield* ticket.waitUntil(deadline)
        })),
      (woken) => (woken === "changed" ? awaitTurn(deadline) : Effect.void)
    )

  /**
   * Transient storage errors (busy past its patience, a dropped connection)
   * are retried on this schedule: quickly at first, never less often than a
   * standby tries anyway.
   */
  const transientRetry = retryOnStorageFailure({
    firstMillis: Math.min(100, halfTtl),
    capMillis: halfTtl,
    resetAfterMillis: settings.leaderTtlMillis
  })

  /**
   * Try to lead, lead until the lease is lost, wait for the next turn;
   * forever. Only a storage failure that cannot heal (`DatabaseReplaced`)
   * ends it; a `SqlError` is logged and the try repeated on `transientRetry`.
   */
  const runAsStandby: S.SchedulerShape["runAsStandby"] = Effect.catchTag(runSchedules, "LeadershipLost", () => Effect.void).pipe(
    Effect.zipRight(Effect.flatMap(Clock.currentTimeMillis, (now) => awaitTurn(now + halfTtl))),
    Effect.tapErrorTag("SqlError", (error) =>
      Effect.logWarning("alkstore: the scheduler standby met a storage error; it tries again", error)),
    Effect.retry({ schedule: transientRetry, while: (error) => error._tag === "SqlError" }),
    Effect.forever,
    (effect) => traced("alkstore.scheduler.standby", () => ({}), effect)
  )

  // Stopped by the store's close, which releases the lease while the connection still works (lifetime.ts).
  return {
    schedule,
    unschedule,
    runSchedules: engine.lifetime.supervise(outsideTransactions(runSchedules)),
    runAsStandby: engine.lifetime.supervise(outsideTransactions(runAsStandby))
  }
})
