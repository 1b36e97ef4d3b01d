/**
 * The prefetch slot behind EffectStores' PersistedQueue store, engine-free:
 * how many elements a successful take's fused ack + claim takes for the
 * queue's next takes. One at first; twice as many each time every held one
 * was taken, up to `prefetchDepthMax` (the store acks plainly while elements
 * are still held); after a miss (held elements went
 * untaken) back to one, behind the backoff of plain acks.
 */
import { describe, expect, it } from "@effect/vitest"
import { PrefetchSlot, prefetchDepthMax } from "../src/internal/effectStores/prefetch.js"

/** Holds `n` handles in `slot` at turn `turn` (what `Prefetch.hold` does). */
const hold = (slot: PrefetchSlot<number>, n: number, turn = 0) => {
  for (let i = 0; i < n; i++) {
    slot.handles.push(i)
    slot.turns.push(turn)
  }
}

/** Takes every held handle, then reads how many the next fused claim would take. */
const drainAndAsk = (slot: PrefetchSlot<number>) => {
  while (slot.take() !== undefined) continue
  return slot.wants()
}

describe("prefetch slot (EffectStores' PersistedQueue, one take after another)", () => {
  it("claims one at first, then twice as many each time all that was held got taken, up to the maximum", () => {
    const slot = new PrefetchSlot<number>()
    expect(slot.wants()).toBe(1)
    const depths: Array<number> = []
    let wanted = 1
    for (let round = 0; round < 7; round++) {
      hold(slot, wanted)
      wanted = drainAndAsk(slot)
      depths.push(wanted)
    }
    expect(depths).toEqual([2, 4, 8, 16, 16, 16, 16])
    expect(prefetchDepthMax).toBe(16)
  })

  it("grows only once every held element was taken", () => {
    const slot = new PrefetchSlot<number>()
    hold(slot, 3)
    expect(slot.take()).toBe(0)
    expect(slot.wants()).toBe(1)
    expect(slot.take()).toBe(1)
    expect(slot.wants()).toBe(1)
    expect(slot.take()).toBe(2)
    expect(slot.wants()).toBe(2)
  })

  it("a claim that found fewer than asked still counts as all taken when its handles are", () => {
    const slot = new PrefetchSlot<number>()
    hold(slot, 1)
    slot.take()
    expect(slot.wants()).toBe(2)
    hold(slot, 1) // the queue had one left
    slot.take()
    expect(slot.wants()).toBe(4)
  })

  it("a miss (held elements given back untaken) goes back to one, after the backoff of plain acks", () => {
    const slot = new PrefetchSlot<number>()
    for (const n of [1, 2, 4, 8]) {
      hold(slot, n)
      drainAndAsk(slot)
    }
    expect(slot.wants()).toBe(16)
    hold(slot, 16, 0)
    slot.take()
    const given: Array<number> = []
    slot.evict(1, given)
    expect(given).toHaveLength(15)
    expect(slot.handles).toEqual([])
    // the backoff: the next successful take acks without prefetching, then one at a time again
    expect(slot.wants()).toBe(0)
    expect(slot.wants()).toBe(1)
  })

  it("elements handed over without a miss (a take inside the application's transaction) keep the depth", () => {
    const slot = new PrefetchSlot<number>()
    hold(slot, 1)
    slot.take()
    expect(slot.wants()).toBe(2)
    hold(slot, 2, 0)
    const all: Array<number> = []
    slot.evict(Number.POSITIVE_INFINITY, all, false)
    expect(all).toEqual([0, 1])
    expect(slot.wants()).toBe(2)
  })
})
