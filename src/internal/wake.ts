import { Clock, Deferred, Duration, Effect, Exit, Fiber, FiberId } from "effect"
import type { WaitError } from "../Queues.js"

/**
 * In-process wake signals, one topic per queue (plus the scheduler's). A
 * waiter registers a ticket *before* it re-reads the database and then awaits
 * it, so a signal between the read and the wait is never lost. A ticket only
 * exists inside `withTicket`, which gives it back however its use ends: a
 * waiter that failed (a storage error between the read and the wait) or was
 * interrupted leaves no ticket behind to absorb a signal meant for a live one.
 *
 * `signal(topic, n)` wakes the n longest-waiting tickets of a topic: n jobs
 * committed wake at most n workers, so idle workers do not stampede the
 * writer. A woken waiter that claims work passes the baton (`signal(topic,
 * 1)`) in case there is more. The engine's cross-process watcher calls
 * `signalAll` (one waiter per topic) when another connection committed, and
 * `fail` when the database file was replaced. `onWaiting` tells the engine
 * whether anybody waits, so the watcher idles when nobody does.
 */
export interface WakeHub {
  readonly signal: (topic: string, count?: number) => void
  readonly signalAll: () => void
  /** Runs `use` with a ticket of `topic` registered, and gives it back when `use` ends, whatever ends it. */
  readonly withTicket: <A, E, R>(topic: string, use: (ticket: Ticket) => Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
  /** Fails every waiter, now and later: the file was replaced (`DatabaseReplaced`), or the store closed. */
  readonly fail: (error: WaitError) => void
  readonly onWaiting: (listener: (waiting: boolean) => void) => void
  /**
   * Hands a wake its waiter could not act on (its claim or re-read, after
   * the wait, was interrupted or failed) to the next waiter of `topic`, as a
   * round that fails with its ticket signalled does.
   */
  readonly handOn: (topic: string, reason: WakeReason) => void
  /**
   * How many signals `topic` has had (`signalAll` and `fail` count for every
   * topic), waiters or not: a reader that took this before a claim found
   * nothing knows, when it has not moved, that nothing committed since was
   * announced in this process (docs/performance-pg.md, "The idle worker").
   */
  readonly generation: (topic: string) => number
}

/**
 * Why a wait ended: `signalled` by a commit in this process that concerns
 * the topic (work is most likely there), `changed` by another connection's
 * commit (maybe), or `timeout`.
 */
export type WakeReason = "signalled" | "changed" | "timeout"

/** A claim of a queue that found nothing: the topic's `generation` just before it, and its time. */
export interface Quiet {
  readonly generation: number
  readonly at: number
}

export interface Ticket {
  /**
   * Waits until the ticket is signalled or the Effect `Clock` reaches
   * `deadline` (so `TestClock` drives deadlines); fails if the file was
   * replaced or the store closed. The ticket is given back however the wait ends.
   * An instant, not a duration: the sleep is measured when it starts — a caller's
   * reads before it (round trips on a server) are never added to it.
   */
  readonly waitUntil: (deadline: number) => Effect.Effect<WakeReason, WaitError>
  /** Gives the ticket back unused, so a signal goes to a waiter that needs it. */
  readonly cancel: () => void
}

/** A registered ticket: the deferred its wait awaits, and why a signal completed it (if one did). */
interface Pending {
  readonly deferred: Deferred.Deferred<WakeReason, WaitError>
  woken: WakeReason | undefined
}

/** A ticket as the hub hands it out: also what signal, if any, completed it. */
interface OwnTicket extends Ticket {
  readonly woken: () => WakeReason | undefined
}

export const makeWakeHub = (): WakeHub => {
  const topics = new Map<string, Set<Pending>>()
  const listeners: Array<(waiting: boolean) => void> = []
  let failure: WaitError | undefined
  let waiting = 0
  // Signals per topic, and those that concern every topic; topics are queue (and lock) names: bounded.
  const generations = new Map<string, number>()
  let everyTopic = 0

  const track = (delta: number) => {
    const before = waiting > 0
    waiting += delta
    if (before !== waiting > 0) for (const listener of listeners) listener(waiting > 0)
  }

  const wake = (topic: string, count: number, reason: WakeReason) => {
    if (reason === "signalled") generations.set(topic, (generations.get(topic) ?? 0) + 1)
    const tickets = topics.get(topic)
    if (tickets === undefined) return
    for (const pending of tickets) {
      if (count-- <= 0) break
      tickets.delete(pending)
      if (failure === undefined) pending.woken = reason
      Deferred.unsafeDone(pending.deferred, failure === undefined ? Exit.succeed(reason) : Exit.fail(failure))
    }
    if (tickets.size === 0) topics.delete(topic)
  }

  /**
   * A round that ended in failure or an interruption (a take's timeout, a
   * stop) after a signal completed its ticket never acted on it: the signal
   * goes to the next waiter of the topic, which would otherwise sleep on
   * with the work there until its deadline or fallback poll.
   */
  const handOn = (topic: string, reason: WakeReason) => {
    if (failure === undefined) wake(topic, 1, reason)
  }
  const passOn = (topic: string, taken: OwnTicket) => {
    const reason = taken.woken()
    if (reason !== undefined) handOn(topic, reason)
  }

  const ticket = (topic: string): OwnTicket => {
    if (failure !== undefined) {
      const replaced = failure
      return { waitUntil: () => Effect.fail(replaced), cancel: () => {}, woken: () => undefined }
    }
    const deferred = Deferred.unsafeMake<WakeReason, WaitError>(FiberId.none)
    const pending: Pending = { deferred, woken: undefined }
    let tickets = topics.get(topic)
    if (tickets === undefined) {
      tickets = new Set()
      topics.set(topic, tickets)
    }
    tickets.add(pending)
    const cancel = () => {
      const current = topics.get(topic)
      if (current?.delete(pending) === true && current.size === 0) topics.delete(topic)
    }
    // The deadline is a forked sleep that completes the same deferred: the
    // wake path then interrupts it without waiting (no race to tear down),
    // by message (`interruptAsFork`): `interruptFork` would fork a third
    // fiber to deliver it, on the path from a signal to the claim.
    const timer = (deadline: number) =>
      Effect.zipRight(
        Effect.flatMap(Clock.currentTimeMillis, (now) => Effect.sleep(Duration.millis(Math.max(0, deadline - now)))),
        Effect.sync(() => Deferred.unsafeDone(deferred, Exit.succeed<WakeReason>("timeout")))
      )
    return {
      waitUntil: (deadline) =>
        Effect.acquireUseRelease(
          Effect.sync(() => track(1)),
          () =>
            Effect.flatMap(
              Effect.fork(timer(deadline)),
              (sleeper) =>
                Effect.ensuring(Deferred.await(deferred), Effect.fiberIdWith((id) => Fiber.interruptAsFork(sleeper, id)))
            ),
          () =>
            Effect.sync(() => {
              track(-1)
              cancel()
            })
        ),
      cancel,
      woken: () => pending.woken
    }
  }

  return {
    signal: (topic, count = 1) => wake(topic, count, "signalled"),
    signalAll: () => {
      everyTopic++
      for (const topic of [...topics.keys()]) wake(topic, 1, "changed")
    },
    fail: (error) => {
      failure = error
      everyTopic++
      for (const topic of [...topics.keys()]) wake(topic, Number.MAX_SAFE_INTEGER, "changed")
    },
    withTicket: (topic, use) =>
      Effect.acquireUseRelease(Effect.sync(() => ticket(topic)), use, (taken, exit) =>
        Effect.sync(() => {
          taken.cancel()
          if (Exit.isFailure(exit)) passOn(topic, taken)
        })),
    onWaiting: (listener) => {
      listeners.push(listener)
    },
    handOn,
    generation: (topic) => everyTopic + (generations.get(topic) ?? 0)
  }
}
