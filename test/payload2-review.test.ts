/**
 * Review of payloads and Schema codecs (CONTRACT §2–§3, docs/queues-and-locks.md
 * "Payloads travel as JSON, exactly" / "Typed queues"). Each test failed on the
 * code before its fix.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Option, Schema } from "effect"
import { Queues } from "../src/index.js"
import { engines } from "./contract/harness.js"
import { jobCount, mustClaim, queueOf, type StoreServices } from "./contract/support.js"

for (const engine of engines) {
  describe(`payload review — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    it.effect("a typed payload whose encoded undefined JSON drops is refused, or claimed back as it was enqueued", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        // The encoded form is { a: undefined }: JSON stores "{}", which the schema decodes (so the
        // codec keeps it) — but to a different value than the one enqueued.
        const WithDefault = Schema.Struct({
          a: Schema.optionalWith(Schema.UndefinedOr(Schema.Number), { default: () => 7 })
        })
        const WithOption = Schema.Struct({
          a: Schema.optionalWith(Schema.UndefinedOr(Schema.String), { as: "Option" })
        })
        /** "refused" (InvalidPayload), "kept" (claimed back equal to `same`), or what came back instead. */
        const outcome = <A extends { readonly a: unknown }>(
          name: string,
          schema: Schema.Schema<A, any, never>,
          payload: A,
          same: (back: A) => boolean
        ) =>
          Effect.gen(function*() {
            const q = yield* queues.queue(name, { schema })
            const enqueued = yield* Effect.either(q.enqueue(payload))
            if (enqueued._tag === "Left") return enqueued.left._tag === "InvalidPayload" ? "refused" : enqueued.left._tag
            const back = (yield* mustClaim(q, "w")).job.payload
            return same(back) ? "kept" : `changed to ${String(back.a === undefined ? "undefined" : JSON.stringify(back.a))}`
          })
        const defaulted = yield* outcome("defaulted", WithDefault, { a: undefined }, (back) => back.a === undefined)
        const optional = yield* outcome(
          "optional",
          WithOption,
          { a: Option.some(undefined) },
          (back) => Option.isSome(back.a) && back.a.value === undefined
        )
        // Either answer keeps the contract: InvalidPayload before anything is written, or the payload itself.
        expect({ defaulted, optional }).toEqual({
          defaulted: expect.stringMatching(/^(refused|kept)$/),
          optional: expect.stringMatching(/^(refused|kept)$/)
        })
      })))

    it.effect("enqueueBatch whose payloads' iteration throws is InvalidPayload (never a defect), nothing written", () =>
      run(Effect.gen(function*() {
        const q = yield* queueOf("iterated")
        function* payloads() {
          yield { n: 1 }
          throw new Error("the payload source failed")
        }
        const exit = yield* Effect.exit(q.enqueueBatch(payloads()))
        expect(
          Exit.isFailure(exit) && exit.cause._tag === "Fail" ? exit.cause.error._tag : `${exit._tag}: ${Exit.isFailure(exit) ? exit.cause._tag : ""}`
        ).toBe("InvalidPayload")
        expect(yield* jobCount).toBe(0)
      })))
  })
}
