import { CliConfig, Command, ValidationError } from "@effect/cli"
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Console, Effect, Exit, Layer, Option } from "effect"
import * as fs from "node:fs"
import { classify, exitCodes } from "./exit.js"
import { dead, job, jobs, locks, schedules, stats } from "./inspect.js"
import { cancel, migrate, purge, requeue, schedule, scheduleAdd, scheduleRemove } from "./repair.js"
import { commandNode, resolve, unknownOption } from "./usage.js"
import { watch } from "./watch.js"
import { dashboard } from "../dashboard/command.js"

const root = Command.make("alkstore").pipe(
  Command.withDescription("inspect and repair an alkstore database (SQLite file or postgres:// URL)"),
  Command.withSubcommands([stats, jobs, job, dead, requeue, cancel, purge, schedules, schedule, locks, migrate, watch, dashboard])
)

/** The same tree, for checking a command line's options and finding the command a usage error is about. */
const tree = commandNode(root, [
  commandNode(stats),
  commandNode(jobs),
  commandNode(job),
  commandNode(dead),
  commandNode(requeue),
  commandNode(cancel),
  commandNode(purge),
  commandNode(schedules),
  commandNode(schedule, [commandNode(scheduleAdd), commandNode(scheduleRemove)]),
  commandNode(locks),
  commandNode(migrate),
  commandNode(watch),
  commandNode(dashboard)
])

// eslint-disable-next-line no-control-regex
const sgr = /\x1b\[[0-9;]*m/g

/**
 * @effect/cli colours its help and errors whatever the output: colours only
 * on a terminal, and never under NO_COLOR (https://no-color.org). With
 * `toStderr`, what it prints as output goes to stderr (help after an error).
 * What goes to stderr starts with `alkstore:` (docs/operations.md): the
 * store's own lines do, and @effect/cli's messages for a bad command line
 * (its only other stderr lines) are given it.
 */
const withPlainText = <A, E, R>(effect: Effect.Effect<A, E, R>, options: { readonly toStderr?: boolean } = {}): Effect.Effect<A, E, R> => {
  const terminal = options.toStderr === true ? process.stderr : process.stdout
  const colour = terminal.isTTY === true && (process.env.NO_COLOR ?? "") === ""
  const strip = (args: ReadonlyArray<unknown>) => (colour ? args : args.map((a) => (typeof a === "string" ? a.replace(sgr, "") : a)))
  const prefixed = (args: ReadonlyArray<unknown>) =>
    typeof args[0] === "string" && !args[0].replace(sgr, "").startsWith("alkstore:") ? [`alkstore: ${args[0]}`, ...args.slice(1)] : args
  return Console.consoleWith((base) =>
    Effect.withConsole(effect, {
      ...base,
      log: (...args: ReadonlyArray<unknown>) => (options.toStderr === true ? base.error(...strip(args)) : base.log(...strip(args))),
      error: (...args: ReadonlyArray<unknown>) => base.error(...strip(options.toStderr === true ? args : prefixed(args)))
    }))
}

/**
 * The package's version, from the nearest package.json named `alkstore` above this module: it sits three
 * levels below it as a source (src/internal/cli) and two or three as the shipped bundle (dist/bin and its
 * chunks, scripts/bundle-cli.ts).
 */
const version = (() => {
  for (let dir = new URL(".", import.meta.url), up = 0; up < 6; dir = new URL("..", dir), up++) {
    try {
      const manifest = JSON.parse(fs.readFileSync(new URL("package.json", dir), "utf8")) as { name?: string; version?: string }
      if (manifest.name === "alkstore") return manifest.version ?? "unknown"
    } catch {
      // no package.json here, or not JSON: look further up
    }
  }
  return "unknown"
})()

const cli = Command.run(root, { name: "alkstore", version })

/**
 * The help of the command at the head of `argv` (`alkstore jobs --help`'s
 * text, the top level's for no known command), on stderr: what a usage
 * error prints after its message.
 */
const helpFor = (argv: ReadonlyArray<string>) =>
  withPlainText(cli(["node", "alkstore", ...resolve(tree, argv).path, "--help"]), { toStderr: true }).pipe(Effect.ignore)

/**
 * The exit code of a command an interrupt (Ctrl-C, SIGTERM) ended: how `watch` and `dashboard` stop (0); any
 * other command was stopped before it was done, which a script must not read as success.
 */
const interruptedExit = (argv: ReadonlyArray<string>): number => {
  const command = argv.find((arg) => !arg.startsWith("-"))
  return command === "watch" || command === "dashboard" ? exitCodes.ok : exitCodes.interrupted
}

/**
 * Runs the CLI on `argv` (without node and the script) and resolves to the
 * exit code: failures are printed as one line on stderr, usage errors
 * followed by the command's help. A command stopped by an interrupt
 * (Ctrl-C, SIGTERM) exits 130 (`alkstore: interrupted`), except `watch` and
 * `dashboard`, which run until then and end normally (`interruptedExit`).
 */
export const program = (argv: ReadonlyArray<string>): Effect.Effect<number> =>
  Option.match(unknownOption(tree, argv), {
    onNone: () => withPlainText(cli(["node", "alkstore", ...argv])),
    onSome: (error) => Effect.fail(error)
  }).pipe(
    Effect.as(exitCodes.ok as number),
    Effect.catchAllCause((cause) => {
      if (Cause.isInterruptedOnly(cause)) {
        const code = interruptedExit(argv)
        return code === exitCodes.ok ? Effect.succeed(code) : Effect.as(Console.error("alkstore: interrupted"), code)
      }
      const failure = Cause.failureOption(cause)
      if (Option.isSome(failure)) {
        const error = failure.value
        // @effect/cli has printed its own message for a bad command line.
        if (ValidationError.isValidationError(error)) {
          return Effect.as(helpFor(argv), exitCodes.usage as number)
        }
        const { code, message } = classify(error)
        return Effect.as(
          code === exitCodes.usage
            ? Effect.zipRight(Console.error(`alkstore: ${message}\n`), helpFor(argv))
            : Console.error(`alkstore: ${message}`),
          code
        )
      }
      return Effect.as(Console.error(`alkstore: unexpected failure: ${Cause.pretty(cause)}`), exitCodes.storage as number)
    }),
    Effect.provide(Layer.merge(NodeContext.layer, CliConfig.layer({ showBuiltIns: false })))
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
          ? interruptedExit(argv)
          : exitCodes.storage
      )
  })
