import { Options } from "@effect/cli"
import { Config, Console, Duration, Effect } from "effect"
import { parseTarget, storeLayer, type StoreServices } from "./database.js"
import { UsageError } from "./exit.js"

/** Options every command that opens a store takes. */
export const db = Options.text("db").pipe(
  Options.withFallbackConfig(Config.string("ALKSTORE_DB")),
  Options.withDescription("the database: a SQLite file path, or a postgres:// URL (default: $ALKSTORE_DB)")
)

export const json = Options.boolean("json").pipe(Options.withDescription("print JSON for scripts instead of a table"))

/** Runs `body` on the store at `db`; only `migrate` creates a missing SQLite file. */
export const onStore = <A, E>(
  target: string,
  body: Effect.Effect<A, E, StoreServices>,
  options: { readonly create: boolean } = { create: false }
) => Effect.provide(body, storeLayer(parseTarget(target), options))

/** Prints `value` as JSON, or the human text. */
export const output = (asJson: boolean, value: unknown, human: () => string) =>
  Console.log(asJson ? JSON.stringify(value, null, 2) : human())

/** A positive job id from the command line. */
export const jobId = (id: number) =>
  Number.isSafeInteger(id) && id >= 1
    ? Effect.succeed(id)
    : Effect.fail(new UsageError({ reason: `invalid job id ${id}: must be a whole number of at least 1` }))

const unitMillis: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 }

/** An age such as `30s`, `15m`, `7d` or `2 hours`. */
export const parseAge = (field: string, text: string): Effect.Effect<Duration.Duration, UsageError> => {
  const short = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*$/.exec(text)
  if (short !== null) return Effect.succeed(Duration.millis(Number(short[1]) * unitMillis[short[2]!]!))
  const long = /^\s*(\d+(?:\.\d+)?)\s+(millis|second|minute|hour|day|week)s?\s*$/.exec(text)
  if (long !== null) {
    const unit = long[2] === "millis" ? "ms" : long[2]![0]!
    return Effect.succeed(Duration.millis(Number(long[1]) * unitMillis[unit]!))
  }
  return Effect.fail(new UsageError({ reason: `invalid ${field} ${JSON.stringify(text)}: use e.g. 30s, 15m, 12h or 7d` }))
}

/** JSON text from the command line. */
export const parseJson = (field: string, text: string): Effect.Effect<unknown, UsageError> =>
  Effect.try({
    try: () => JSON.parse(text) as unknown,
    catch: (cause) => new UsageError({ reason: `invalid ${field}: not JSON (${cause instanceof Error ? cause.message : String(cause)})` })
  })
