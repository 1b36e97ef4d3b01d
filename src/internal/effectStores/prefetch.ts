import { Effect } from "effect"
import type { Scope } from "effect"

/**
 * At most this many elements claimed by one fused ack + claim (one-at-a-time takes): one commit then
 * claims for this many takes, whose own acks write no claim (fewer index pages dirtied per take).
 */
export const prefetchDepthMax = 16

/**
 * One queue's prefetched elements: claimed by the transaction that acked
 * the take before (the fused ack + claim), held in memory for the next
 * take of the queue, which then needs no transaction of its own. Oldest
 * first (claim order). A handle leaves the slot synchronously, to one taker
 * only: a take, the sweep, or the store's close.
 */
export class PrefetchSlot<H> {
  readonly handles: Array<H> = []
  /** The event-loop turn each handle was held in (`Prefetch`'s sweep gives back those of a past turn). */
  readonly turns: Array<number> = []
  /** Successful takes that ack without prefetching, after prefetched elements went untaken. */
  private skip = 0
  private backoff = 0
  /** How many the next fused claim takes: doubles each time the held ones were all taken, back to 1 on a miss. */
  private depth = 1

  /** The oldest held element, handed to the caller (a prefetch that paid: backing off ends). */
  take(): H | undefined {
    if (this.handles.length === 0) return undefined
    this.turns.shift()
    this.backoff = 0
    const handle = this.handles.shift()
    if (this.handles.length === 0) this.depth = Math.min(this.depth * 2, prefetchDepthMax)
    return handle
  }

  /**
   * How many elements a successful take of this queue should claim with its
   * ack (0: a plain ack). None for a while after held elements went
   * untaken (the application's next take does not come promptly: a prefetch
   * there costs a claim and a release instead of nothing); the while doubles
   * with each such miss in a row, up to 1024 takes. Else one at first, twice
   * as many each time all that was held got taken, up to `prefetchDepthMax`.
   */
  wants(): number {
    if (this.skip === 0) return this.depth
    this.skip--
    return 0
  }

  /** Releases of this slot's evicted handles not committed yet (the sweep's; see `settledReleases`). */
  private releasing = 0
  private whenNoneReleasing: Array<() => void> = []

  /**
   * Waits until no release of this queue's evicted elements is in flight:
   * a take that claims right after the sweep took its held elements would
   * otherwise pass over them while their release has not committed (on
   * PostgreSQL it is a round trip), taking later elements first. Immediate
   * when none is (always on the store's own SQLite connection, where the
   * release runs in place).
   */
  settledReleases(): Effect.Effect<void> | undefined {
    if (this.releasing === 0) return undefined
    return Effect.async<void>((resume) => {
      const done = () => resume(Effect.void)
      this.whenNoneReleasing.push(done)
      return Effect.sync(() => {
        const i = this.whenNoneReleasing.indexOf(done)
        if (i >= 0) this.whenNoneReleasing.splice(i, 1)
      })
    })
  }

  /** A release of evicted handles began (`+1`) or ended, committed or not (`-1`). */
  releaseInFlight(delta: 1 | -1): void {
    this.releasing += delta
    if (this.releasing > 0) return
    const waiting = this.whenNoneReleasing
    this.whenNoneReleasing = []
    for (const resume of waiting) resume()
  }

  /** Moves the handles held before turn `turn` to `into` (`missed`: nobody took them, back off). */
  evict(turn: number, into: Array<H>, missed = true): boolean {
    let n = 0
    while (n < this.turns.length && this.turns[n]! < turn) n++
    if (n === 0) return false
    into.push(...this.handles.splice(0, n))
    this.turns.splice(0, n)
    if (!missed) return true
    this.depth = 1
    this.backoff = Math.min(Math.max(1, this.backoff * 2), 1024)
    this.skip = this.backoff
    return true
  }
}

export interface Prefetch<H> {
  readonly slot: () => PrefetchSlot<H>
  /**
   * Holds `handles` in `slot` for the queue's next takes. Those no take has
   * picked up by the next turn of the event loop are released (no attempt
   * spent); after the store closed they are released now.
   */
  readonly hold: (slot: PrefetchSlot<H>, handles: ReadonlyArray<H>) => Effect.Effect<void>
  /** Everything `slot` holds, handed to the caller (a take inside the application's transaction). */
  readonly takeAll: (slot: PrefetchSlot<H>) => Array<H>
  /** Releases `handles` from the store's own fiber, outside any application transaction, at its next sweep. */
  readonly releaseLater: (handles: ReadonlyArray<H>) => void
}

/**
 * The prefetch of a store: its slots, and one fiber (in the layer's scope)
 * that gives back what was held and not taken. "Promptly" is one event-loop
 * turn (`setImmediate`), not a duration: the next take of a loop that takes
 * one element after another comes in the same turn (on PostgreSQL, in the
 * microtasks that follow the fused statement's reply), whatever the clock
 * (a `TestClock` included), while an application that does I/O between its
 * takes lets the turn pass and gets its element back in the database,
 * claimable by every process. The store's close releases what is held.
 */
export const makePrefetch = <H>(
  release: (handles: ReadonlyArray<H>) => Effect.Effect<void>,
  /** The store's close: it gives back what is held too, while its connection works (the store may close first). */
  onStoreClose: (cleanup: Effect.Effect<void>) => Effect.Effect<void, never, Scope.Scope>
): Effect.Effect<Prefetch<H>, never, Scope.Scope> =>
  Effect.gen(function*() {
    const occupied = new Set<PrefetchSlot<H>>()
    let later: Array<H> = []
    let turn = 0
    let armed = false
    let closed = false
    let ring: (() => void) | undefined

    // Waits until something is held (armed), then for the event loop's next turn.
    const doorbell = Effect.async<void>((resume) => {
      if (armed) return resume(Effect.void)
      ring = () => resume(Effect.void)
      return Effect.sync(() => {
        ring = undefined
      })
    })
    const nextTurn = Effect.async<void>((resume) => {
      const timer = setImmediate(() => {
        turn++
        resume(Effect.void)
      })
      return Effect.sync(() => clearImmediate(timer))
    })
    const sweep = Effect.suspend(() => {
      const stale: Array<H> = later
      later = []
      const releasing: Array<PrefetchSlot<H>> = []
      for (const slot of occupied) {
        if (slot.evict(turn, stale)) releasing.push(slot)
        if (slot.handles.length === 0) occupied.delete(slot)
      }
      // What was held since the turn passed stays for the next one.
      if (occupied.size === 0 && later.length === 0) armed = false
      if (stale.length === 0) return Effect.void
      for (const slot of releasing) slot.releaseInFlight(1)
      return Effect.ensuring(release(stale), Effect.sync(() => {
        for (const slot of releasing) slot.releaseInFlight(-1)
      }))
    })
    yield* Effect.forkScoped(Effect.interruptible(Effect.forever(
      Effect.zipRight(Effect.zipRight(doorbell, nextTurn), Effect.uninterruptible(sweep))
    )))
    // Whichever closes first — this layer or the store under it — gives back everything held, once.
    const giveBackAll = Effect.suspend(() => {
      closed = true
      const all: Array<H> = later
      later = []
      for (const slot of occupied) slot.evict(Number.POSITIVE_INFINITY, all)
      occupied.clear()
      return all.length === 0 ? Effect.void : release(all)
    })
    yield* Effect.addFinalizer(() => giveBackAll)
    yield* onStoreClose(giveBackAll)

    const hold = (slot: PrefetchSlot<H>, handles: ReadonlyArray<H>): Effect.Effect<void> => {
      if (handles.length === 0) return Effect.void
      if (closed) return release(handles)
      for (const handle of handles) {
        slot.handles.push(handle)
        slot.turns.push(turn)
      }
      occupied.add(slot)
      arm()
      return Effect.void
    }
    const arm = () => {
      if (armed) return
      armed = true
      const doorbellRing = ring
      ring = undefined
      doorbellRing?.()
    }
    const takeAll = (slot: PrefetchSlot<H>): Array<H> => {
      const all: Array<H> = []
      slot.evict(Number.POSITIVE_INFINITY, all, false)
      occupied.delete(slot)
      return all
    }
    const releaseLater = (handles: ReadonlyArray<H>) => {
      // After the close nobody sweeps: the release the caller makes in its transaction is then the only one.
      if (handles.length === 0 || closed) return
      later.push(...handles)
      arm()
    }
    return { slot: () => new PrefetchSlot<H>(), hold, takeAll, releaseLater }
  })
