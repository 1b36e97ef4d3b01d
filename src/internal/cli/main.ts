import { CliConfig, Command, ValidationError } from "@effect/cli"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Console, Effect, Exit, Layer, Option } from "effect"
import * as fs from "node:fs"
import { classify, exitCodes } from "./exit.js"
import { dead, job, jobs, locks, schedules, stats } from "./inspect.js"
import { cancel, migrate, purge, requeue, schedule } from "./repair.js"
import { watch } from "./watch.js"
import { dashboard } from "../dashboard/command.js"

const root = Command.make("alkstore").pipe(
  Command.withDescription("inspect and repair an alkstore database (SQLite file or postgres:// URL)"),
  Command.withSubcommands([stats, jobs, job, dead, requeue, cancel, purge, schedules, schedule, locks, migrate, watch, dashboard])
)

// eslint-disable-next-line no-control-regex
const sgr = /\x1b\[[0-9;]*m/g

/**
 * @effect/cli colours its help and errors whatever the output: colours only
 * on a terminal, and never under NO_COLOR (https://no-color.org).
 */
const withPlainText = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> => {
  const colour = process.stdout.isTTY === true && (process.env.NO_COLOR ?? "") === ""
  if (colour) return effect
  const strip = (args: ReadonlyArray<unknown>) => args.map((a) => (typeof a === "string" ? a.replace(sgr, "") : a))
  return Console.consoleWith((base) =>
    Effect.withConsole(effect, {
      ...base,
      log: (...args: ReadonlyArray<unknown>) => base.log(...strip(args)),
      error: (...args: ReadonlyArray<unknown>) => base.error(...strip(args))
    }))
}

/** The package's version: src/internal/cli and dist/internal/cli both sit three levels below package.json. */
const version = (() => {
  try {
    return (JSON.parse(fs.readFileSync(new URL("../../../package.json", import.meta.url), "utf8")) as { version?: string }).version ?? "unknown"
  } catch {
    return "unknown"
  }
})()

const cli = Command.run(root, { name: "alkstore", version })

/**
 * Runs the CLI on `argv` (without node and the script) and resolves to the
 * exit code: failures are printed as one line on stderr. A command stopped
 * by an interrupt (Ctrl-C, SIGTERM) ends normally: `watch` and `dashboard`
 * run until then.
 */
export const program = (argv: ReadonlyArray<string>): Effect.Effect<number> =>
  withPlainText(cli(["node", "alkstore", ...argv])).pipe(
    Effect.provide(Layer.merge(NodeContext.layer, CliConfig.layer({ showBuiltIns: false }))),
    Effect.as(exitCodes.ok as number),
    Effect.catchAllCause((cause) => {
      if (Cause.isInterruptedOnly(cause)) return Effect.succeed(exitCodes.ok as number)
      const failure = Cause.failureOption(cause)
      if (Option.isSome(failure)) {
        const error = failure.value
        // @effect/cli has printed its own help text for a bad command line.
        if (ValidationError.isValidationError(error)) {
          return Effect.succeed(exitCodes.usage as number)
        }
        const { code, message } = classify(error)
        return Effect.as(Console.error(`alkstore: ${message}`), code)
      }
      return Effect.as(Console.error(`alkstore: unexpected failure: ${Cause.pretty(cause)}`), exitCodes.storage as number)
    })
  )

export const main = (argv: ReadonlyArray<string>) =>
  NodeRuntime.runMain(program(argv), {
    disableErrorReporting: true,
    // An interrupt from outside (Ctrl-C, SIGTERM) is how `watch` and `dashboard` stop.
    teardown: (exit, onExit) =>
      onExit(
        Exit.isSuccess(exit)
          ? (exit.value as number)
          : Cause.isInterruptedOnly(exit.cause)
          ? exitCodes.ok
          : exitCodes.storage
      )
  })
