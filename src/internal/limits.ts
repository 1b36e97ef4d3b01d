import { Clock, Duration, Effect, Option } from "effect"
import type * as Q from "../Queues.js"
import { fromChecked } from "./duration.js"
import { type EngineShape, signalOnCommit } from "./engine.js"
import { validateName } from "./names.js"
import { tellingIfCut } from "./patience.js"
import { checkLimits, ownOptions, readingOptions, type ResolvedLimits } from "./options.js"
import { attr, traced } from "./telemetry.js"

/** Stored limits as the public shape (only the limits that are set). */
const toLimits = (l: ResolvedLimits): Q.StoredLimits => ({
  ...(l.concurrency !== null ? { concurrency: l.concurrency } : {}),
  ...(l.rateLimit !== null ? { rate: { limit: l.rateLimit, per: Duration.millis(l.ratePerMillis!) } } : {}),
  ...(l.groupConcurrency !== null ? { groupConcurrency: l.groupConcurrency } : {}),
  ...(l.groupRateLimit !== null
    ? { groupRate: { limit: l.groupRateLimit, per: Duration.millis(l.groupRatePerMillis!) } }
    : {})
})

/** A limit change's wake of this process's waiters of `name` (on commit). */
const wakeHere = (engine: EngineShape, name: string) => signalOnCommit(engine, name, Number.MAX_SAFE_INTEGER)
/**
 * And of other processes' (PostgreSQL's NOTIFY; SQLite's commits tell by themselves). A change cut off by an
 * interruption wakes only this process's: a statement in a stop could wait on a pool held by the application.
 */
const wakeAll = (engine: EngineShape, name: string) => Effect.zipRight(wakeHere(engine, name), engine.flow.freed(name))

/**
 * `Queues.setLimits` / `limits` / `clearLimits` (CONTRACT §9). A change
 * wakes the queue's waiters on commit (a raised or removed limit may admit
 * work at once) — also when an interruption cut it off after its write
 * (`tellingIfCut`); the claims in flight keep their slots. Their spans go
 * through `traced` (telemetry.ts), as every queue operation's.
 */
export const makeLimits = (engine: EngineShape): Pick<Q.QueuesShape, "setLimits" | "limits" | "clearLimits"> => ({
  setLimits: (name, limits) =>
    traced("alkstore.queue.set_limits", () => ({ [attr.queue]: name }), Effect.gen(function*() {
      yield* validateName(name)
      const read = yield* fromChecked(ownOptions(limits)) // read once: a throwing getter is InvalidOptions
      const resolved = yield* fromChecked(readingOptions(() => checkLimits(read as Parameters<typeof checkLimits>[0])))
      const now = yield* Clock.currentTimeMillis
      yield* tellingIfCut(
        Effect.gen(function*() {
          yield* engine.flow.set(name, resolved, now)
          engine.flow.memory.saw(name, true)
          yield* wakeAll(engine, name)
        }),
        wakeHere(engine, name)
      )
    })),
  limits: (name) =>
    traced(
      "alkstore.queue.limits",
      () => ({ [attr.queue]: name }),
      Effect.zipRight(validateName(name), Effect.map(engine.flow.get(name), Option.map(toLimits))),
      (stored, span) => span.attribute(attr.outcome, Option.isSome(stored) ? "found" : "absent")
    ),
  clearLimits: (name) =>
    traced("alkstore.queue.clear_limits", () => ({ [attr.queue]: name }), Effect.gen(function*() {
      yield* validateName(name)
      // The memory of limits is not cleared here: a clear rolled back with the application's transaction
      // would leave the queue limited and its acks waking nobody held back. The next claim learns they are gone.
      return yield* tellingIfCut(
        Effect.tap(engine.flow.clear(name), (cleared) => (cleared ? wakeAll(engine, name) : Effect.void)),
        wakeHere(engine, name)
      )
    }), (cleared, span) => span.attribute(attr.outcome, cleared ? "cleared" : "absent"))
})
