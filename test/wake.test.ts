import { describe, expect, it } from "vitest"
import { DatabaseReplaced } from "../src/StoreError.js"
import { makeWakeHub } from "../src/internal/wake.js"
import { wakeContract } from "./contract/wake.js"
import { engines } from "./contract/harness.js"

for (const engine of engines) {
  wakeContract(engine)
}

describe("wake hub generations", () => {
  it("count every signal of a topic, with or without waiters; signalAll and fail count for every topic", () => {
    const hub = makeWakeHub()
    expect(hub.generation("a")).toBe(0)
    hub.signal("a")
    hub.signal("a", 3)
    expect(hub.generation("a")).toBe(2)
    expect(hub.generation("b")).toBe(0)
    hub.signalAll()
    expect([hub.generation("a"), hub.generation("b")]).toEqual([3, 1])
    hub.fail(new DatabaseReplaced({ filename: "x.db", reason: "deleted" }))
    expect([hub.generation("a"), hub.generation("b")]).toEqual([4, 2])
  })
})
