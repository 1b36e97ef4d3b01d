import type { SqlError } from "@effect/sql/SqlError"
import { Clock, DateTime, Duration, Effect, Exit, Fiber, Option, Schedule } from "effect"
import type * as L from "../Locks.js"
import { InvalidOptions, LockLost, LockUnavailable } from "../StoreError.js"
import { durationMillis, fromChecked, instantAfter, maxRenewalMillis, optionalDurationMillis } from "./duration.js"
import { Engine, type LockRow, type LockStorage } from "./engine.js"
import { validateName } from "./names.js"
import { ownOptions, validateText } from "./options.js"
import { givingBack, patienceCapMillis, releasePatienceMillis } from "./patience.js"
import { raceFirst } from "./race.js"
import { realClock } from "./realClock.js"
import { answerWaitMillis, runApart } from "./stoppableClaim.js"
import { inTransactionOf } from "./transactionOwner.js"
import { attr, traced, wonOrLost } from "./telemetry.js"

const checkOwner = (owner: string) => validateText("owner", owner)

/** A lock ttl as given at an entry point: a duration whose lease end, from now, a `DateTime` can hold. */
const ttlFromNow = (ttl: Duration.DurationInput) =>
  Effect.flatMap(durationMillis("ttl", ttl, { positive: true }), (millis) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.as(instantAfter("ttl", now, millis), millis)))

/**
 * The lease end each handle is known to hold, in epoch millis on the store's
 * `Clock` (the one every lock statement is judged on: on PostgreSQL the
 * database-aligned clock): the acquire's stored `expires_at`, then raised by
 * each renewal that succeeded to the `at + ttl` it sent (storage keeps
 * `max(expires_at, at + ttl)`, so never past the stored end). A renewal still
 * in flight, or one whose answer was lost, counts for nothing.
 */
interface KnownLease {
  end: number
}

const knownLeases = new WeakMap<L.LockHandle, KnownLease>()

/** `handle`'s known lease (every handle here comes from `acquireLock`; any other starts at its `expiresAt`). */
const knownLease = (handle: L.LockHandle): KnownLease => {
  let lease = knownLeases.get(handle)
  if (lease === undefined) {
    lease = { end: DateTime.toEpochMillis(handle.expiresAt) }
    knownLeases.set(handle, lease)
  }
  return lease
}

/**
 * Takes `name` for `owner` at the time asked, then makes up for a wait: the
 * statement may have waited (the write lock, another session's row lock)
 * while its lease ran from the time asked. A lease with less than half its
 * ttl left is renewed from now before the handle is handed out, and one that
 * lapsed meanwhile (no renewal takes it back) is taken again, a new tenure —
 * so every handle starts with at least half its ttl, as a claim's lease does
 * (docs/queues-and-locks.md, "Locks").
 */
const acquiredRow = (
  storage: LockStorage,
  name: string,
  owner: string,
  ttlMillis: number
): Effect.Effect<Option.Option<LockRow>, SqlError> =>
  Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const taken = yield* storage.acquire(name, owner, now, now + ttlMillis)
    if (Option.isNone(taken)) return taken
    const at = yield* Clock.currentTimeMillis
    if (taken.value.expires_at - at >= ttlMillis / 2) return taken
    if (yield* storage.renew(name, owner, taken.value.token, at, at + ttlMillis)) {
      return Option.some({ ...taken.value, expires_at: Math.max(taken.value.expires_at, at + ttlMillis) })
    }
    return yield* acquiredRow(storage, name, owner, ttlMillis)
  })

/** Takes `name` for `owner` (names are validated by the caller; the ttl's lease end is in range). */
export const acquireLock = (storage: LockStorage, name: string, owner: string, ttlMillis: number) =>
  traced("alkstore.lock.acquire", () => ({ [attr.lock]: name, [attr.owner]: owner }), Effect.gen(function*() {
    const row = yield* acquiredRow(storage, name, owner, ttlMillis)
    return Option.map(row, (row): L.LockHandle => {
      const lease: KnownLease = { end: row.expires_at }
      const handle: L.LockHandle = {
        name,
        owner,
        token: row.token,
        expiresAt: DateTime.unsafeMake(row.expires_at) as DateTime.Utc,
        renew: (ttl) =>
          traced("alkstore.lock.renew", spanAttributes(name, owner, row.token), Effect.gen(function*() {
            const millis = (yield* optionalDurationMillis("ttl", ttl, { positive: true })) ?? ttlMillis
            const at = yield* Clock.currentTimeMillis
            const end = yield* instantAfter("ttl", at, millis)
            const renewed = yield* storage.renew(name, owner, row.token, at, end)
            if (renewed && end > lease.end) lease.end = end
            return renewed
          }), wonOrLost("renewed")),
        release: traced(
          "alkstore.lock.release",
          spanAttributes(name, owner, row.token),
          Effect.flatMap(Clock.currentTimeMillis, (at) => storage.release(name, owner, row.token, at)),
          wonOrLost("released")
        )
      }
      knownLeases.set(handle, lease)
      return handle
    })
  }), (lock, span) =>
    Option.match(lock, {
      onNone: () => span.attribute(attr.outcome, "unavailable"),
      onSome: (held) => {
        span.attribute(attr.outcome, "acquired")
        span.attribute(attr.token, held.token)
      }
    }))

const spanAttributes = (name: string, owner: string, token: number) => () => ({
  [attr.lock]: name,
  [attr.owner]: owner,
  [attr.token]: token
})

/**
 * How long before the known lease end `keepRenewed` stops vouching for the
 * lease: a tenth of the ttl, at most a second. It leaves room for the
 * interruption to land and for another process's clock to run a little ahead
 * (PostgreSQL's aligned clocks agree within half a measuring round trip).
 */
const marginMillis = (ttlMillis: number) => Math.min(1_000, Math.floor(ttlMillis / 10))

/** The instant past which `handle`'s lease is no longer vouched for. */
const deadlineOf = (handle: L.LockHandle, ttlMillis: number) => knownLease(handle).end - marginMillis(ttlMillis)

/**
 * Whether `handle`'s lease is still vouched for now: false once its deadline
 * passed with no successful renewal since.
 */
const stillHeld = (handle: L.LockHandle, ttlMillis: number) =>
  Effect.map(Clock.currentTimeMillis, (now) => now < deadlineOf(handle, ttlMillis))

/** The longest single wait of `lapse`: a day (a JS timer longer than ~24.8 days never fires). */
const lapseCheckMillis = maxRenewalMillis

/**
 * Fails with `LockLost` at `handle`'s deadline (the known lease end less the
 * margin) unless a renewal moved it meanwhile; waits on `Clock` in between.
 */
const lapse = (handle: L.LockHandle, ttlMillis: number) =>
  Effect.gen(function*() {
    const left = deadlineOf(handle, ttlMillis) - (yield* Clock.currentTimeMillis)
    if (left <= 0) return yield* Effect.fail(new LockLost({ name: handle.name }))
    yield* Effect.sleep(Duration.millis(Math.min(left, lapseCheckMillis)))
  }).pipe(Effect.forever)

/**
 * Renews `handle` every third of its ttl until interrupted; fails with
 * `LockLost` the first time a renewal does not succeed (a storage failure
 * included: the lease can no longer be vouched for), and at the lease's
 * deadline (the lease end known to be held, less `marginMillis`) when no
 * renewal succeeded in time — a renewal that cannot reach the database (a
 * pool exhausted by the application, a busy SQLite writer, a slow network)
 * does not hold the lease while another owner may take it. A renewal cut off
 * that way is interrupted in the background (`Effect.disconnect`), so the
 * `LockLost` does not wait for a stuck statement to give up.
 */
export const keepRenewed = (handle: L.LockHandle, ttlMillis: number) => {
  // A third of the ttl, but never longer than `lapse`'s longest wait: Effect's clock never fires a
  // single sleep past ~24.8 days, so a ttl over ~74.6 days renewed nothing and the lease lapsed
  // (renewing more often is harmless: a renewal only moves the lease's end later).
  const every = Duration.millis(Math.min(Math.max(1, Math.floor(ttlMillis / 3)), lapseCheckMillis))
  return raceFirst(
    handle.renew().pipe(
      Effect.catchAll(() => Effect.succeed(false)),
      Effect.disconnect,
      Effect.flatMap((renewed) => (renewed ? Effect.void : Effect.fail(new LockLost({ name: handle.name })))),
      Effect.repeat(Schedule.spaced(every)),
      Effect.delay(every),
      Effect.zipRight(Effect.never)
    ),
    lapse(handle, ttlMillis)
  )
}

/**
 * Gives a `withLock`'s lock back as it ends: best effort (a failure leaves it
 * to lapse with its lease). After a body that ended by itself the release
 * takes as long as it takes (a busy SQLite file waited out for at most
 * `releasePatienceMillis`); a stop — the store's close included — waits for
 * it only so long (`givingBack`).
 */
const letGo = (name: string, handle: L.LockHandle, stopped: boolean) => {
  const release = handle.release.pipe(
    Effect.catchAll((error) => Effect.logWarning(`alkstore: releasing lock ${name} failed; it lapses with its lease`, error)),
    Effect.asVoid
  )
  return stopped ? givingBack(release, undefined, `lock ${name}`) : Effect.locally(release, patienceCapMillis, releasePatienceMillis)
}

/**
 * Gives back whatever `owner` — used by one `withLock`'s acquire alone — may
 * hold by now, after an interruption ended that `withLock` before its handle
 * was taken: the acquire's answer can be cut off after its statement
 * committed (on the wire on PostgreSQL; in the steps between a synchronous
 * statement and its handle on SQLite). So a `withLock` stopped during its
 * acquire leaves no lock behind, and one stopped while its acquire waits on a
 * row another transaction holds stops at once (on PostgreSQL the statement is
 * cancelled in the background, `stoppableAcquire`, and this runs again there).
 * The scheduler's runner gives its lease back the same way.
 */
export const ownerGivenBack = (
  storage: LockStorage,
  name: string,
  owner: string,
  /** Run after a tenure of `owner`'s was given back (the scheduler wakes its standbys). */
  onReleased: Effect.Effect<void, SqlError> = Effect.void
) =>
  givingBack(
    // A read first: an acquire stopped while it waited out a busy SQLite file wrote nothing, and a write
    // there would wait out the same busy file (a read in WAL mode does not).
    Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Effect.flatMap(storage.held(name, now), (held) => (held ? storage.releaseOwner(name, owner, now) : Effect.succeed(false)))).pipe(
      Effect.tap((released) => (released ? onReleased : Effect.void)),
      Effect.catchAll((error) => Effect.logWarning(`alkstore: giving back lock ${name} after an interrupted acquire failed; it lapses with its lease`, error)),
      Effect.asVoid
    ),
    undefined,
    `lock ${name}`
  )

/**
 * `withLock`'s acquire on an engine whose statements travel to a server
 * (PostgreSQL), made stoppable without losing what it took. An interruption
 * that cut the statement off could leave it on its way: it committed after
 * the give-back's read found the lock free, and the lock stayed with the
 * call's private owner for its whole TTL. Here the statement runs in a fiber
 * of its own (started at once: `runApart`, stoppableClaim.ts); the
 * caller waits for it interruptibly and stops at once; in the background the
 * statement gets `answerWaitMillis` of real time to answer, is then cancelled
 * if still running (one waiting on a row another transaction holds writes
 * nothing), and its owner's tenure is given back either way.
 * Inside a transaction it runs as it is: its statement is that transaction's.
 */
const stoppableAcquire = <A, E>(
  acquire: Effect.Effect<A, E>,
  givenBack: Effect.Effect<void>,
  inBackground: (effect: Effect.Effect<void>) => Effect.Effect<unknown>
): Effect.Effect<A, E> =>
  Effect.withFiberRuntime((caller) => {
    if (inTransactionOf(caller)) return acquire
    // The fiber and the handler that answers for it are put in place in one uninterruptible step (an
    // interruption between the two left the statement to commit unwatched); only the wait is interruptible.
    // The statement itself stays interruptible, for its cancel.
    return Effect.uninterruptibleMask((restore) =>
      runApart(Effect.interruptible(acquire), restore, (statement) =>
        Effect.asVoid(inBackground(
          raceFirst(Effect.asVoid(Fiber.await(statement)), Effect.sleep(Duration.millis(answerWaitMillis))).pipe(
            Effect.withClock(realClock),
            Effect.zipRight(Fiber.interrupt(statement)),
            Effect.zipRight(givenBack)
          )
        )))
    )
  })

export const makeLocks: Effect.Effect<L.LocksShape, never, Engine> = Effect.gen(function*() {
  const engine = yield* Engine
  const storage = engine.locks
  const defaultOwner = engine.instanceId
  let calls = 0

  const acquire: L.LocksShape["acquire"] = (name, opts) =>
    Effect.gen(function*() {
      yield* validateName(name)
      const read = yield* fromChecked(ownOptions(opts))
      const ttl = yield* ttlFromNow(read?.ttl as L.AcquireOpts["ttl"])
      const owner = yield* checkOwner(read?.owner ?? defaultOwner)
      return yield* acquireLock(storage, name, owner, ttl)
    })

  const withLock: L.LocksShape["withLock"] = (name, ttl, effect) =>
    Effect.gen(function*() {
      yield* validateName(name)
      const ttlMillis = yield* ttlFromNow(ttl)
      // Before the acquire: a body that is not an effect (a thunk) would take the lock, then die.
      if (!Effect.isEffect(effect)) return yield* new InvalidOptions({ field: "effect", reason: "must be an Effect" })
      const owner = `${defaultOwner}:withLock:${++calls}`
      // The acquire stays interruptible (as `acquire`'s, and the scheduler's lease): one waiting on a
      // busy file or on a row another transaction holds has written nothing, and a stop must not wait
      // for that transaction. The release is in place before the acquire starts, so a lock once handed
      // over is always given back, and one whose answer an interruption cut off (on the wire, or in the
      // steps between its write and its handle) is given back by its owner (`ownerGivenBack`).
      let taken: L.LockHandle | undefined
      const acquire = acquireLock(storage, name, owner, ttlMillis)
      const acquired = Effect.flatMap(
        engine.queues.claimsWaitOnServer
          ? stoppableAcquire(acquire, ownerGivenBack(storage, name, owner), engine.lifetime.background)
          : acquire,
        Option.match({ onNone: () => Effect.fail(new LockUnavailable({ name })), onSome: Effect.succeed })
      )
      return yield* Effect.flatMap(acquired, (handle) => {
        taken = handle
        return raceFirst(
          // An effect that ends past the lease's deadline before `lapse` ran (a late timer, a busy event
          // loop) did not hold the lock throughout: LockLost, never a Success. (Its own failure stands.)
          Effect.tap(effect, () =>
            Effect.flatMap(stillHeld(handle, ttlMillis), (held) => held ? Effect.void : Effect.fail(new LockLost({ name })))),
          keepRenewed(handle, ttlMillis)
        )
      }).pipe(Effect.onExit((exit) =>
        taken !== undefined
          ? letGo(name, taken, Exit.isInterrupted(exit))
          : Exit.isInterrupted(exit)
          ? ownerGivenBack(storage, name, owner)
          : Effect.void
      ))
    }).pipe((effect) => traced("alkstore.lock.with_lock", () => ({ [attr.lock]: name }), effect))

  // A body still running when the store closes is stopped then, and its lock released (lifetime.ts).
  return { acquire, withLock: (name, ttl, effect) => engine.lifetime.supervise(withLock(name, ttl, effect)) }
})
