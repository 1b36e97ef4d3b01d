/**
 * Plain-JSON checks for the payload properties, written iteratively (the
 * payloads nest 50 000 deep, past any recursive walk's stack), and
 * independently of the library's own check.
 */

/** Is `value` data JSON carries faithfully: null, booleans, finite numbers, strings, dense arrays, plain objects? */
export const isPlainJson = (value: unknown): boolean => {
  const stack: Array<unknown> = [value]
  const seen = new Set<object>()
  while (stack.length > 0) {
    const v = stack.pop()
    if (v === null || typeof v === "string" || typeof v === "boolean") continue
    if (typeof v === "number") {
      if (!Number.isFinite(v) || Object.is(v, -0)) return false
      continue
    }
    if (typeof v !== "object") return false
    if (seen.has(v)) return false
    seen.add(v)
    if (Array.isArray(v)) {
      if (Object.keys(v).length !== v.length) return false // holes or extra properties
      for (let i = 0; i < v.length; i++) stack.push(v[i])
      continue
    }
    const proto = Object.getPrototypeOf(v)
    if ((proto !== Object.prototype && proto !== null) || Object.getOwnPropertySymbols(v).length > 0) return false
    for (const key of Object.keys(v)) stack.push((v as Record<string, unknown>)[key])
  }
  return true
}

/** Exactly the same JSON data (key order aside), compared without recursion. */
export const sameJson = (a: unknown, b: unknown): boolean => {
  const stack: Array<[unknown, unknown]> = [[a, b]]
  while (stack.length > 0) {
    const [x, y] = stack.pop()!
    if (typeof x !== "object" || x === null || typeof y !== "object" || y === null) {
      if (!Object.is(x, y)) return false
      continue
    }
    if (Array.isArray(x) !== Array.isArray(y)) return false
    const kx = Object.keys(x)
    const ky = Object.keys(y)
    if (kx.length !== ky.length) return false
    for (const k of kx) {
      if (!Object.prototype.hasOwnProperty.call(y, k)) return false
      stack.push([(x as Record<string, unknown>)[k], (y as Record<string, unknown>)[k]])
    }
  }
  return true
}
