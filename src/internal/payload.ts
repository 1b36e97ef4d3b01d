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
  isPlainJson(value, options.dropUndefinedProperties === true, []) ? undefined : describeProblem(value, options)

/**
 * `jsonProblem`'s answer for the common case, on every enqueue: no path
 * strings, no Set (payloads are shallow: the ancestors are a short array).
 */
const isPlainJson = (v: unknown, dropUndefined: boolean, ancestors: Array<object>): boolean => {
  switch (typeof v) {
    case "string":
    case "boolean":
      return true
    case "number":
      return Number.isFinite(v)
    case "object":
      break
    default:
      return false
  }
  if (v === null) return true
  if (ancestors.includes(v)) return false
  if (Array.isArray(v)) {
    ancestors.push(v)
    for (let i = 0; i < v.length; i++) {
      if (!(i in v) || !isPlainJson(v[i], dropUndefined, ancestors)) return false
    }
    ancestors.pop()
    return true
  }
  const proto = Object.getPrototypeOf(v)
  if ((proto !== Object.prototype && proto !== null) || Object.getOwnPropertySymbols(v).length > 0) return false
  ancestors.push(v)
  for (const key of Object.keys(v)) {
    const property = (v as Record<string, unknown>)[key]
    if (property === undefined && dropUndefined) continue
    if (!isPlainJson(property, dropUndefined, ancestors)) return false
  }
  ancestors.pop()
  return true
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
    if (Array.isArray(obj)) {
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

/** Checks and serializes a payload for storage. */
export const checkJson = (value: unknown): string | InvalidPayload => {
  const problem = jsonProblem(value)
  return problem === undefined ? JSON.stringify(value) : new InvalidPayload({ reason: problem })
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

export const schemaCodec = <A, I>(schema: Schema.Schema<A, I, never>): PayloadCodec<A> => {
  const encodeSchema = Schema.encodeEither(schema)
  const decodeSchema = Schema.decodeUnknownEither(schema)
  const schemaFailure = (error: ParseResult.ParseError) =>
    new InvalidPayload({ reason: ParseResult.TreeFormatter.formatErrorSync(error) })
  return {
    encode: (payload) => {
      const encoded = encodeSchema(payload)
      if (Either.isLeft(encoded)) return schemaFailure(encoded.left)
      const strict = checkJson(encoded.right)
      if (typeof strict === "string") return strict
      // An encoded object property that is `undefined` (say `Schema.optional`'s
      // `{ cc: undefined }`) is dropped by JSON; that is faithful when the
      // schema decodes the stored form, which is checked here so a claim never
      // meets a row its own queue wrote and cannot read.
      if (jsonProblem(encoded.right, { dropUndefinedProperties: true }) !== undefined) return strict
      const stored = JSON.stringify(encoded.right)
      const decoded = decodeSchema(JSON.parse(stored))
      return Either.isLeft(decoded)
        ? new InvalidPayload({
          reason: `${strict.reason}, and the schema cannot decode it without: ${
            ParseResult.TreeFormatter.formatErrorSync(decoded.left)
          }`
        })
        : stored
    },
    decode: (stored) => {
      const json = parseStored(stored)
      if (json instanceof InvalidPayload) return json
      const decoded = decodeSchema(json)
      return Either.isLeft(decoded) ? schemaFailure(decoded.left) : decoded.right
    }
  }
}
