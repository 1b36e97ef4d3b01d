import { Clock, DateTime, Duration, Effect, Option, Schedule } from "effect"
import type * as L from "../Locks.js"
import { LockLost, LockUnavailable } from "../StoreError.js"
import { durationMillis, instantAfter, optionalDurationMillis } from "./duration.js"
import { Engine, type LockStorage } from "./engine.js"
import { validateName } from "./names.js"
import { validateText } from "./options.js"
import { attr, traced, wonOrLost } from "./telemetry.js"

const checkOwner = (owner: string) => validateText("owner", owner)

/** A lock ttl as given at an entry point: a duration whose lease end, from now, a `DateTime` can hold. */
const ttlFromNow = (ttl: Duration.DurationInput) =>
  Effect.flatMap(durationMillis("ttl", ttl, { positive: true }), (millis) =>
    Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.as(instantAfter("ttl", now, millis), millis)))

/** Takes `name` for `owner` (names are validated by the caller; the ttl's lease end is in range). */
export const acquireLock = (storage: LockStorage, name: string, owner: string, ttlMillis: number) =>
  traced("alkstore.lock.acquire", () => ({ [attr.lock]: name, [attr.owner]: owner }), Effect.gen(function*() {
    const now = yield* Clock.currentTimeMillis
    const row = yield* storage.acquire(name, owner, now, now + ttlMillis)
    return Option.map(row, (row): L.LockHandle => ({
      name,
      owner,
      token: row.token,
      expiresAt: DateTime.unsafeMake(row.expires_at) as DateTime.Utc,
      renew: (ttl) =>
        traced("alkstore.lock.renew", spanAttributes(name, owner, row.token), Effect.gen(function*() {
          const millis = (yield* optionalDurationMillis("ttl", ttl, { positive: true })) ?? ttlMillis
          const at = yield* Clock.currentTimeMillis
          return yield* storage.renew(name, owner, row.token, at, yield* instantAfter("ttl", at, millis))
        }), wonOrLost("renewed")),
      release: traced(
        "alkstore.lock.release",
        spanAttributes(name, owner, row.token),
        Effect.flatMap(Clock.currentTimeMillis, (at) => storage.release(name, owner, row.token, at)),
        wonOrLost("released")
      )
    }))
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
 * Renews `handle` every third of its ttl until interrupted; fails with
 * `LockLost` the first time a renewal does not succeed (a storage failure
 * included: the lease can no longer be vouched for).
 */
export const keepRenewed = (handle: L.LockHandle, ttlMillis: number) =>
  handle.renew().pipe(
    Effect.catchAll(() => Effect.succeed(false)),
    Effect.flatMap((renewed) => (renewed ? Effect.void : Effect.fail(new LockLost({ name: handle.name })))),
    Effect.repeat(Schedule.spaced(Duration.millis(Math.max(1, Math.floor(ttlMillis / 3))))),
    Effect.delay(Duration.millis(Math.max(1, Math.floor(ttlMillis / 3)))),
    Effect.zipRight(Effect.never)
  )

export const makeLocks: Effect.Effect<L.LocksShape, never, Engine> = Effect.gen(function*() {
  const engine = yield* Engine
  const storage = engine.locks
  const defaultOwner = engine.instanceId
  let calls = 0

  const acquire: L.LocksShape["acquire"] = (name, opts) =>
    Effect.gen(function*() {
      yield* validateName(name)
      const ttl = yield* ttlFromNow(opts.ttl)
      const owner = yield* checkOwner(opts.owner ?? defaultOwner)
      return yield* acquireLock(storage, name, owner, ttl)
    })

  const withLock: L.LocksShape["withLock"] = (name, ttl, effect) =>
    Effect.gen(function*() {
      yield* validateName(name)
      const ttlMillis = yield* ttlFromNow(ttl)
      const owner = `${defaultOwner}:withLock:${++calls}`
      return yield* Effect.acquireUseRelease(
        Effect.flatMap(
          acquireLock(storage, name, owner, ttlMillis),
          Option.match({
            onNone: () => Effect.fail(new LockUnavailable({ name })),
            onSome: Effect.succeed
          })
        ),
        (handle) => Effect.raceFirst(effect, keepRenewed(handle, ttlMillis)),
        (handle) =>
          handle.release.pipe(
            Effect.catchAll((error) =>
              Effect.logWarning(`alkstore: releasing lock ${name} failed; it lapses with its lease`, error)
            )
          )
      )
    }).pipe(Effect.withSpan("alkstore.lock.with_lock", { attributes: { [attr.lock]: name } }))

  return { acquire, withLock }
})
