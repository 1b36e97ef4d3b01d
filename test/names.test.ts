import { describe, expect, it } from "@effect/vitest"
import { isWellFormed, isWellFormedByPattern } from "../src/internal/names.js"

describe("well-formed UTF-16", () => {
  it("the fallback pattern (runtimes without String.prototype.isWellFormed) agrees with the native rule", () => {
    const units = ["a", "\uD800", "\uDBFF", "\uDC00", "\uDFFF", "\uD83D\uDCEC", "é", ""]
    const samples: Array<string> = []
    for (const a of units) for (const b of units) for (const c of units) samples.push(a + b + c)
    const native = (String.prototype as { isWellFormed?: (this: string) => boolean }).isWellFormed
    for (const text of samples) {
      const expected = native !== undefined ? native.call(text) : isWellFormed(text)
      expect(isWellFormedByPattern(text), JSON.stringify(text)).toBe(expected)
      expect(isWellFormed(text), JSON.stringify(text)).toBe(expected)
    }
    expect(isWellFormedByPattern("x\uDC00\uD800y")).toBe(false)
    expect(isWellFormedByPattern("📬")).toBe(true)
  })
})
