/**
 * The inputs users get wrong, or attackers try: quotes, LIKE wildcards, NUL,
 * SQL fragments, emoji, lone surrogates, `__alkstore` look-alikes, 1 MB
 * strings, deep nesting, and option values off every edge.
 */
import { fc } from "@fast-check/vitest"

export const reservedPrefix = "__alkstore"

export const nastyStrings = [
  "'", "\"", "`", "%", "_", "a%", "%a%", "a_b", "\\", "\\%", "\0", "a\0b", "\0\0",
  "; DROP TABLE __alkstore_jobs; --", "' OR '1'='1", "$1", "?", "?1", ":name", "@x",
  "🦀", "👨‍👩‍👧", "é", "e\u0301", "\u202e", "\uFEFF",
  "\uD800", "a\uDC00", "\uDBFF\uDFFF", "\uDC00\uD800",
  "__alkstore", "__alkstore_jobs", "__alkstorex", "__alkstore_outbox:x", "__ALKSTORE", "_alkstore", " __alkstore",
  "__alk\u200bstore", "＿＿alkstore", "", " ", "\n", "\t"
]

const nasty = fc.constantFrom(...nastyStrings)

/** Any string a caller may pass as a name, a key or a payload string. */
export const anyString: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: nasty, weight: 4 },
  { arbitrary: fc.tuple(nasty, fc.string(), nasty).map(([a, b, c]) => a + b + c), weight: 2 },
  { arbitrary: fc.string({ unit: "binary", maxLength: 20 }), weight: 2 },
  { arbitrary: fc.string16bits({ maxLength: 8 }), weight: 2 }, // lone surrogates
  { arbitrary: fc.constantFrom("x".repeat(1 << 20), "🦀".repeat(1 << 18)), weight: 1 } // 1 MB
)

/** No lone surrogate (`String.prototype.isWellFormed`, which the ES2022 typings lack). */
export const isWellFormed = (s: string): boolean => (s as unknown as { isWellFormed: () => boolean }).isWellFormed()

/** What the contract says of a name: non-empty, well-formed UTF-16, no NUL, at most 1000 UTF-8 bytes, outside the reserved prefix. */
export const expectedNameError = (name: string): ReadonlyArray<string> | undefined => {
  const errors: Array<string> = []
  if (name.length === 0 || !isWellFormed(name) || Buffer.byteLength(name, "utf8") > 1000 || name.includes("\u0000")) {
    errors.push("InvalidName")
  }
  if (name.startsWith(reservedPrefix)) errors.push("ReservedName")
  return errors.length === 0 ? undefined : errors
}

/** Nested `depth` arrays or objects around a leaf. */
export const nested = (depth: number, asObject: boolean): unknown => {
  let value: unknown = "leaf"
  for (let i = 0; i < depth; i++) value = asObject ? { d: value } : [value]
  return value
}

/**
 * A payload under test, boxed: a 50 000-deep value would overflow the stack
 * of fast-check's own printing of a counterexample, so it prints its label.
 */
export interface Sample {
  readonly value: unknown
}

const sample = (value: unknown, label?: string): Sample =>
  label === undefined ? { value } : { value, [fc.toStringMethod]: () => label } as Sample

/** Payloads: plain JSON (always storable) and the hard cases (storable or `InvalidPayload`). */
export const plainPayload: fc.Arbitrary<Sample> = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }),
  anyString,
  fc.dictionary(anyString, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
  fc.constantFrom({ __alkstore: 1 }, { "__alkstore_jobs": [] }, { "": "" }, [null, true, 1e308, -1e-308, 2 ** 53])
).map((value) => sample(value))

export const hardPayload: fc.Arbitrary<Sample> = fc.oneof(
  fc.constantFrom(5, 100, 1_000, 4_999, 5_000, 10_000, 50_000).chain((depth) =>
    fc.boolean().map((asObject) => sample(nested(depth, asObject), `${asObject ? "objects" : "arrays"} nested ${depth} deep`))
  ),
  fc.constantFrom<unknown>(undefined, NaN, Infinity, -Infinity, () => 1, Symbol("s"), 10n, new Date(0), new Map(), [1, , 3])
    .map((value) => sample(value)),
  fc.constantFrom<unknown>({ a: undefined }, [undefined], { toJSON: () => "x" }, -0, Object.assign([1], { extra: 2 }))
    .map((value) => sample(value))
)

/** Option values off every edge, and a few sane ones. */
export const optionValue: fc.Arbitrary<unknown> = fc.constantFrom<unknown>(
  undefined, 0, 1, 2, 3, -1, 1.5, NaN, Infinity, -Infinity, 2 ** 31, 2 ** 53, 2 ** 53 + 2, 8.7e15, 1e300, -0,
  "1 second", "5 seconds", "100000000 days", "-1 seconds", "garbage", "", null, true, {}, []
)
