import { Deferred, Effect, Exit, FiberId } from "effect"
import type { DatabaseReplaced } from "../StoreError.js"

/**
 * In-process wake signals, one topic per queue (plus the scheduler's). A
 * waiter registers a ticket *before* it re-reads the database and then awaits
 * it, so a signal between the read and the wait is never lost.
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
  readonly ticket: (topic: string) => Ticket
  readonly fail: (error: DatabaseReplaced) => void
  readonly onWaiting: (listener: (waiting: boolean) => void) => void
}

export interface Ticket {
  /** Completes when the ticket is signalled (or fails if the file was replaced). */
  readonly await: Effect.Effect<void, DatabaseReplaced>
  /** Gives the ticket back unused, so a signal goes to a waiter that needs it. */
  readonly cancel: () => void
}

export const makeWakeHub = (): WakeHub => {
  const topics = new Map<string, Set<Deferred.Deferred<void, DatabaseReplaced>>>()
  const listeners: Array<(waiting: boolean) => void> = []
  let failure: DatabaseReplaced | undefined
  let waiting = 0

  const track = (delta: number) => {
    const before = waiting > 0
    waiting += delta
    if (before !== waiting > 0) for (const listener of listeners) listener(waiting > 0)
  }

  const wake = (topic: string, count: number) => {
    const tickets = topics.get(topic)
    if (tickets === undefined) return
    for (const deferred of tickets) {
      if (count-- <= 0) break
      tickets.delete(deferred)
      Deferred.unsafeDone(deferred, failure === undefined ? Exit.void : Exit.fail(failure))
    }
    if (tickets.size === 0) topics.delete(topic)
  }

  return {
    signal: (topic, count = 1) => wake(topic, count),
    signalAll: () => {
      for (const topic of [...topics.keys()]) wake(topic, 1)
    },
    fail: (error) => {
      failure = error
      for (const topic of [...topics.keys()]) wake(topic, Number.MAX_SAFE_INTEGER)
    },
    ticket: (topic) => {
      if (failure !== undefined) return { await: Effect.fail(failure), cancel: () => {} }
      const deferred = Deferred.unsafeMake<void, DatabaseReplaced>(FiberId.none)
      let tickets = topics.get(topic)
      if (tickets === undefined) {
        tickets = new Set()
        topics.set(topic, tickets)
      }
      tickets.add(deferred)
      const cancel = () => {
        const current = topics.get(topic)
        if (current?.delete(deferred) === true && current.size === 0) topics.delete(topic)
      }
      return {
        await: Effect.acquireUseRelease(
          Effect.sync(() => track(1)),
          () => Deferred.await(deferred),
          () => Effect.sync(() => track(-1))
        ),
        cancel
      }
    },
    onWaiting: (listener) => {
      listeners.push(listener)
    }
  }
}
