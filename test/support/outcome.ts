import { Cause, type Duration, Effect, Exit, Option } from "effect"

/**
 * How an entry point answered: `"ok"`, `"<Tag>:<field>"` for a typed failure, `"defect: …"` for a die, or
 * `"thrown: …"` when calling it threw before any Effect was returned. Bounded by a guard (the fiber's clock).
 */
export const outcome = (call: () => Effect.Effect<unknown, unknown, any>, guard: Duration.DurationInput = "3 seconds") =>
  Effect.gen(function*() {
    let effect: Effect.Effect<unknown, unknown, never>
    try {
      effect = call() as Effect.Effect<unknown, unknown, never>
    } catch (cause) {
      return `thrown: ${String(cause)}`
    }
    const exit = yield* Effect.exit(Effect.timeout(effect, guard))
    if (Exit.isSuccess(exit)) return "ok"
    const failure = Option.getOrUndefined(Cause.failureOption(exit.cause)) as { _tag?: string; field?: string } | undefined
    if (failure !== undefined) return `${failure._tag}:${failure.field ?? ""}`
    return `defect: ${Cause.pretty(exit.cause).split("\n")[0]}`
  })
