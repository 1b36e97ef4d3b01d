/**
 * The `@every` parser against an independent model of the v1 grammar
 * (`@every <n><s|m|h|d>`: one ASCII space, a lowercase unit, no sign, no
 * leading zeros, at most 3650 days), written as a hand scanner with exact
 * (BigInt) arithmetic: the parser itself, and `schedule` through the public
 * API on every engine (the interval stored, or `InvalidSpec` with nothing
 * written).
 */
import { SqlClient } from "@effect/sql"
import { fc, test } from "@fast-check/vitest"
import { Duration, Effect, Either, ManagedRuntime } from "effect"
import { afterAll, beforeAll, describe, expect } from "vitest"
import { Scheduler } from "../../src/index.js"
import { parseEvery } from "../../src/internal/spec.js"
import { engines } from "../contract/harness.js"
import { fcParams } from "./settings.js"

const unitMillis: Record<string, bigint> = { s: 1_000n, m: 60_000n, h: 3_600_000n, d: 86_400_000n }
const maxMillis = 3650n * 86_400_000n

/** The model: the interval in ms, or `undefined` for a spec outside the grammar. */
const model = (spec: string): number | undefined => {
  const prefix = "@every "
  if (!spec.startsWith(prefix)) return undefined
  const body = spec.slice(prefix.length)
  if (body.length < 2) return undefined
  const unit = unitMillis[body[body.length - 1]!]
  const digits = body.slice(0, -1)
  if (unit === undefined || digits[0] === "0") return undefined
  for (const ch of digits) if (ch < "0" || ch > "9") return undefined
  const millis = BigInt(digits) * unit
  return millis <= maxMillis ? Number(millis) : undefined
}

const digitsArb = fc.oneof(
  fc.integer({ min: 0, max: 100 }).map(String),
  fc.bigInt({ min: 0n, max: 10n ** 25n }).map(String),
  fc.constantFrom("3650", "3651", "87600", "87601", "5256000", "5256001", "315360000", "315360001", "01", "007", "1e3",
    "1.5", "-1", "+1", " 1", "1 ", "١", "１", "", "0x10", "9007199254740993")
)
const unitArb = fc.constantFrom("s", "m", "h", "d", "S", "M", "ms", "w", "y", "", " s", "s ", "sec", "\n", "ｓ")
const prefixArb = fc.constantFrom("@every ", "@every  ", "@every\t", "@EVERY ", "every ", "@every", " @every ", "@every\u00a0")

const specArb: fc.Arbitrary<string> = fc.oneof(
  { arbitrary: fc.tuple(prefixArb, digitsArb, unitArb).map(([p, d, u]) => p + d + u), weight: 6 },
  { arbitrary: fc.tuple(fc.constant("@every "), digitsArb, unitArb).map(([p, d, u]) => p + d + u), weight: 6 },
  { arbitrary: fc.string({ unit: "binary", maxLength: 16 }), weight: 1 },
  { arbitrary: fc.constantFrom("@daily", "* * * * *", "@every 1s\n", "@every 1s ", "@every 1s\0", ""), weight: 1 }
)

describe("the @every parser agrees with an independent model", () => {
  test.prop([specArb], fcParams(3_000))("parseEvery(spec) is the model's interval, or InvalidSpec", (spec) => {
    const parsed = Effect.runSync(Effect.either(parseEvery(spec)))
    const expected = model(spec)
    if (expected === undefined) expect(Either.isLeft(parsed) && parsed.left._tag === "InvalidSpec").toBe(true)
    else expect(parsed).toEqual(Either.right(expected))
  })
})

for (const engine of engines) {
  describe(`schedule specs through the public API — ${engine.name}`, () => {
    let runtime: ManagedRuntime.ManagedRuntime<Scheduler.Scheduler | SqlClient.SqlClient, unknown>
    beforeAll(() => {
      runtime = ManagedRuntime.make(engine.store())
    })
    afterAll(() => runtime.dispose())
    const tasks = Effect.flatMap(SqlClient.SqlClient, (sql) => sql<{ n: number }>`SELECT count(*) AS n FROM __alkstore_scheduler_tasks`)

    test.prop([specArb], fcParams(150))("schedule stores the model's interval, or InvalidSpec and nothing written", async (spec) => {
      const before = await runtime.runPromise(tasks)
      const result = await runtime.runPromise(Effect.either(
        Effect.flatMap(Scheduler.Scheduler, (s) => s.schedule("spec-under-test", spec, "q", null))
      ))
      const expected = model(spec)
      if (expected === undefined) {
        expect(Either.isLeft(result) && result.left._tag === "InvalidSpec").toBe(true)
        expect(await runtime.runPromise(tasks)).toEqual(before)
      } else {
        expect(Either.isRight(result)).toBe(true)
        if (Either.isRight(result)) {
          expect(Duration.toMillis(result.right.interval)).toBe(expected)
          expect(result.right.spec).toBe(spec)
        }
        await runtime.runPromise(Effect.flatMap(Scheduler.Scheduler, (s) => s.unschedule("spec-under-test")))
      }
    })
  })
}
