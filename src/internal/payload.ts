import { Effect, Either, ParseResult, Schema } from "effect"
import { InvalidPayload } from "../StoreError.js"

/**
 * Why `value` cannot travel as JSON faithfully, or `undefined` when it can.
 * Only plain data passes: a `Date` or `Map` would come back as something else,
 * so those belong on a Schema-typed queue.
 */
export const jsonProblem = (
  value: unknown,
  options: {
    /** Object properties whose value is `undefined` pass (JSON drops them). */
    readonly dropUndefinedProperties?: boolean
  } = {}
): string | undefined =>
  isPlainJson(value, options.dropUndefinedProperties === true, undefined) ? undefined : describeProblem(value, options)

/**
 * How deep containers may nest in a payload. The checks here, the engines'
 * JSON serialization and a Schema's own walk all recurse, and a payload deep
 * enough to exhaust the stack would escape as a `RangeError`: past this
 * depth it is `InvalidPayload` instead, well inside any stack. Real payloads
 * are a few levels deep.
 */
export const maxPayloadDepth = 1000

/** `-0` is the one finite number JSON changes (it comes back as `0`). */
const isJsonNumber = (n: number) => n !== 0 ? Number.isFinite(n) : 1 / n > 0

/**
 * An array JSON carries exactly: a plain `Array` (not a subclass) whose own
 * keys are its indices alone — JSON drops any other property, and symbols.
 * (Holes are found by the element walk.)
 */
const isPlainArray = (a: Array<unknown>) =>
  Object.getPrototypeOf(a) === Array.prototype && Object.keys(a).length === a.length &&
  Object.getOwnPropertySymbols(a).length === 0

/**
 * `jsonProblem`'s answer for the common case, on every enqueue: no path
 * strings, no Set (payloads are shallow: the ancestors are a short array,
 * whose length is the nesting depth), and no allocation for a payload whose
 * object has no nested containers (`ancestors` is made on the first one).
 * A plain object's keys are walked with `for…in`, which allocates nothing:
 * its prototype is `Object.prototype` or null, so every key is its own
 * unless someone made a property of `Object.prototype` enumerable, which
 * `Object.hasOwn` skips, as JSON does.
 */
const isPlainJson = (v: unknown, dropUndefined: boolean, ancestors: Array<object> | undefined): boolean => {
  switch (typeof v) {
    case "string":
    case "boolean":
      return true
    case "number":
      return isJsonNumber(v)
    case "object":
      break
    default:
      return false
  }
  if (v === null) return true
  let chain = ancestors
  if (chain !== undefined && (chain.length >= maxPayloadDepth || chain.includes(v))) return false
  if (Array.isArray(v)) {
    if (!isPlainArray(v)) return false
    for (let i = 0; i < v.length; i++) {
      if (!(i in v)) return false
      const element: unknown = v[i]
      if (typeof element === "object" && element !== null) {
        chain ??= []
        chain.push(v)
        const plain = isPlainJson(element, dropUndefined, chain)
        chain.pop()
        if (!plain) return false
      } else if (!isPlainJson(element, dropUndefined, undefined)) return false
    }
    return true
  }
  const proto = Object.getPrototypeOf(v)
  if ((proto !== Object.prototype && proto !== null) || Object.getOwnPropertySymbols(v).length > 0) return false
  for (const key in v) {
    if (!Object.hasOwn(v, key)) continue
    const property = (v as Record<string, unknown>)[key]
    if (property === undefined && dropUndefined) continue
    if (typeof property === "object" && property !== null) {
      chain ??= []
      chain.push(v)
      const plain = isPlainJson(property, dropUndefined, chain)
      chain.pop()
      if (!plain) return false
    } else if (!isPlainJson(property, dropUndefined, undefined)) return false
  }
  return true
}

const arrayProblem = (a: Array<unknown>, path: string): string | undefined => {
  if (Object.getPrototypeOf(a) !== Array.prototype) {
    const name = (Object.getPrototypeOf(a) as { constructor?: { name?: string } } | null)?.constructor?.name ?? "unknown"
    return `${path} is an instance of ${name} (use a plain array, or a Schema-typed queue)`
  }
  if (Object.getOwnPropertySymbols(a).length > 0) return `${path} has symbol keys`
  const extra = Object.keys(a).find((key) => !(/^(0|[1-9][0-9]*)$/.test(key) && Number(key) < a.length))
  return extra === undefined ? undefined : `${path} carries the property ${JSON.stringify(extra)} (JSON drops it)`
}

/** Where and why `value` is not plain JSON, with its path (only once the quick check said no). */
const describeProblem = (
  value: unknown,
  options: { readonly dropUndefinedProperties?: boolean }
): string | undefined => {
  const seen = new Set<object>()
  const visit = (v: unknown, path: string): string | undefined => {
    switch (typeof v) {
      case "string":
      case "boolean":
        return undefined
      case "number":
        if (Object.is(v, -0)) return `${path} is -0 (JSON would read it back as 0)`
        return Number.isFinite(v) ? undefined : `${path} is ${v} (not representable in JSON)`
      case "undefined":
        return `${path} is undefined`
      case "bigint":
        return `${path} is a BigInt`
      case "function":
        return `${path} is a function`
      case "symbol":
        return `${path} is a symbol`
    }
    if (v === null) return undefined
    const obj = v as object
    if (seen.has(obj)) return `${path} is a cycle`
    // No path here: it would be a thousand steps long.
    if (seen.size >= maxPayloadDepth) return `payload nests arrays and objects deeper than ${maxPayloadDepth} levels`
    if (Array.isArray(obj)) {
      const problem = arrayProblem(obj, path)
      if (problem !== undefined) return problem
      seen.add(obj)
      for (let i = 0; i < obj.length; i++) {
        if (!(i in obj)) return `${path}[${i}] is a hole (undefined)`
        const problem = visit(obj[i], `${path}[${i}]`)
        if (problem !== undefined) return problem
      }
      seen.delete(obj)
      return undefined
    }
    const proto = Object.getPrototypeOf(obj)
    if (proto !== Object.prototype && proto !== null) {
      const name = (proto as { constructor?: { name?: string } }).constructor?.name ?? "unknown"
      return `${path} is an instance of ${name} (use a Schema-typed queue)`
    }
    if (Object.getOwnPropertySymbols(obj).length > 0) return `${path} has symbol keys`
    seen.add(obj)
    for (const key of Object.keys(obj)) {
      const property = (obj as Record<string, unknown>)[key]
      if (property === undefined && options.dropUndefinedProperties === true) continue
      const problem = visit(property, `${path}.${key}`)
      if (problem !== undefined) return problem
    }
    seen.delete(obj)
    return undefined
  }
  return visit(value, "payload")
}

/**
 * What a walk over a payload threw, as the payload's problem: a stack
 * exhausted by depth (`RangeError`; the depth limit keeps the checks clear
 * of it, but a Schema's own walk, or an enqueue from a deep stack, may still
 * meet it), or a throwing getter. Never a defect: the payload is the caller's.
 */
export const thrownProblem = (cause: unknown, doing: string) =>
  new InvalidPayload({
    reason: cause instanceof RangeError
      ? `payload is nested too deeply to ${doing} (${cause.message})`
      : `could not ${doing} the payload: ${String(cause)}`
  })

/** Checks and serializes a payload for storage. */
export const checkJson = (value: unknown): string | InvalidPayload => {
  try {
    // The quick check first (no options object per call); the problem's text only when it says no.
    if (isPlainJson(value, false, undefined)) return JSON.stringify(value)
    const problem = describeProblem(value, {})
    return problem === undefined ? JSON.stringify(value) : new InvalidPayload({ reason: problem })
  } catch (cause) {
    return thrownProblem(cause, "serialize")
  }
}

export const encodeJson = (value: unknown): Effect.Effect<string, InvalidPayload> =>
  Effect.suspend(() => {
    const encoded = checkJson(value)
    return typeof encoded === "string" ? Effect.succeed(encoded) : Effect.fail(encoded)
  })

/**
 * A payload codec: plain JSON, or a Schema's encoded form. Synchronous, so
 * an enqueue builds no effects to encode (a Schema with asynchronous
 * transformations is reported as an invalid payload).
 */
export interface PayloadCodec<A> {
  readonly encode: (payload: A) => string | InvalidPayload
  readonly decode: (stored: string) => A | InvalidPayload
}

const parseStored = (stored: string): unknown | InvalidPayload => {
  try {
    return JSON.parse(stored) as unknown
  } catch (cause) {
    return new InvalidPayload({ reason: `stored payload is not JSON: ${String(cause)}` })
  }
}

export const jsonCodec: PayloadCodec<unknown> = { encode: checkJson, decode: parseStored }

/**
 * `value` without the object properties that are `undefined` (plain objects
 * and arrays walked; anything else, an `Option` or a `Date`, kept as it is):
 * what JSON keeps of a typed payload's optional properties.
 */
const withoutUndefinedProperties = (value: unknown): unknown => {
  if (Array.isArray(value)) return value.map(withoutUndefinedProperties)
  if (typeof value !== "object" || value === null) return value
  const proto = Object.getPrototypeOf(value)
  if (proto !== Object.prototype && proto !== null) return value
  const kept: Record<string, unknown> = {}
  for (const [key, property] of Object.entries(value)) {
    if (property !== undefined) kept[key] = withoutUndefinedProperties(property)
  }
  return kept
}

export const schemaCodec = <A, I>(schema: Schema.Schema<A, I, never>): PayloadCodec<A> => {
  const encodeSchema = Schema.encodeEither(schema)
  const decodeSchema = Schema.decodeUnknownEither(schema)
  // Built on first use (the rare path below), inside its try: a Schema may have no equivalence to build.
  let equivalent: ((a: A, b: A) => boolean) | undefined
  // Whether a claim decoding the stored form gets the payload back: a property that was `undefined` may be
  // absent (`Schema.optional`), but not turned into a default (the decoded payload encodes to more than was
  // stored) nor an `Option.some(undefined)` read back as none (equal JSON, unequal values; a Struct's
  // equivalence alone passes over a property one side lacks).
  const readsBack = (payload: A, decoded: A, stored: string) => {
    try {
      const again = encodeSchema(decoded)
      if (Either.isLeft(again) || JSON.stringify(again.right) !== stored) return false
      equivalent ??= Schema.equivalence(schema)
      return equivalent(withoutUndefinedProperties(payload) as A, withoutUndefinedProperties(decoded) as A)
    } catch {
      return false
    }
  }
  const schemaFailure = (error: ParseResult.ParseError) =>
    new InvalidPayload({ reason: ParseResult.TreeFormatter.formatErrorSync(error) })
  const encode = (payload: A): string | InvalidPayload => {
    const encoded = encodeSchema(payload)
    if (Either.isLeft(encoded)) return schemaFailure(encoded.left)
    const strict = checkJson(encoded.right)
    if (typeof strict === "string") return strict
    // An encoded object property that is `undefined` (say `Schema.optional`'s
    // `{ cc: undefined }`) is dropped by JSON; that is faithful when the
    // schema decodes the stored form to the payload enqueued (no default put
    // in, no `Option.some(undefined)` read back as none), which is checked
    // here so a claim never meets a row its own queue wrote and cannot read,
    // nor one that reads as another payload.
    if (jsonProblem(encoded.right, { dropUndefinedProperties: true }) !== undefined) return strict
    const stored = JSON.stringify(encoded.right)
    const decoded = decodeSchema(JSON.parse(stored))
    if (Either.isLeft(decoded)) {
      return new InvalidPayload({
        reason: `${strict.reason}, and the schema cannot decode it without: ${
          ParseResult.TreeFormatter.formatErrorSync(decoded.left)
        }`
      })
    }
    return readsBack(payload, decoded.right, stored)
      ? stored
      : new InvalidPayload({ reason: `${strict.reason}, and without it the schema decodes another payload` })
  }
  const decode = (stored: string): A | InvalidPayload => {
    const json = parseStored(stored)
    if (json instanceof InvalidPayload) return json
    const decoded = decodeSchema(json)
    return Either.isLeft(decoded) ? schemaFailure(decoded.left) : decoded.right
  }
  // The Schema walks the payload recursively: what it throws is the payload's problem, not a defect.
  return {
    encode: (payload) => {
      try {
        return encode(payload)
      } catch (cause) {
        return thrownProblem(cause, "encode")
      }
    },
    decode: (stored) => {
      try {
        return decode(stored)
      } catch (cause) {
        return thrownProblem(cause, "decode")
      }
    }
  }
}
