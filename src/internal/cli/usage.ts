import { Command, type Usage } from "@effect/cli"
import { Option } from "effect"
import { UsageError } from "./exit.js"
import { sanitize } from "./table.js"

/**
 * The command line checked before @effect/cli parses it, for what its parser
 * reports badly: an option the command does not take makes it give up on the
 * options after it, so `stats --limit 5 --db f` was reported as a missing
 * `--db`. Each command's options are read from its own usage, so the check
 * cannot drift from the definitions.
 */

/** A command of the tree: its name, the options it takes (name → whether a value follows), its subcommands. */
export interface CommandNode {
  readonly name: string
  readonly options: ReadonlyMap<string, boolean>
  readonly children: ReadonlyMap<string, CommandNode>
}

/** The options every command accepts from @effect/cli itself (name → whether a value follows). */
const builtIns: ReadonlyArray<readonly [string, boolean]> = [
  ["--help", false],
  ["--version", false],
  ["--wizard", false],
  ["--completions", true],
  ["--log-level", true]
]

const optionsOf = (usage: Usage.Usage, into: Map<string, boolean>): Map<string, boolean> => {
  switch (usage._tag) {
    case "Named":
      for (const name of usage.names) {
        // Arguments are named too (`<id>`); a boolean option has no accepted values.
        if (name.startsWith("-")) into.set(name, Option.isSome(usage.acceptedValues))
      }
      return into
    case "Optional":
    case "Repeated":
      return optionsOf(usage.usage, into)
    case "Alternation":
    case "Concat":
      return optionsOf(usage.right, optionsOf(usage.left, into))
    case "Empty":
    case "Mixed":
      return into
  }
}

/** A command's node; its subcommands, if any, are given as `children`. */
export const commandNode = <Name extends string, R, E, A>(
  command: Command.Command<Name, R, E, A>,
  children: ReadonlyArray<CommandNode> = []
): CommandNode => ({
  name: [...Command.getNames(command)][0] ?? "",
  options: optionsOf(Command.getUsage(command), new Map(builtIns)),
  children: new Map(children.map((child) => [child.name, child]))
})

/** The subcommand path at the head of `argv` (`["schedule", "add"]`), and its node. */
export const resolve = (root: CommandNode, argv: ReadonlyArray<string>) => {
  const path: Array<string> = []
  let node = root
  for (const token of argv) {
    const child = node.children.get(token)
    if (child === undefined) break
    path.push(token)
    node = child
  }
  return { path, node }
}

/**
 * The first `--option` the command at the head of `argv` does not take, as
 * a usage error naming it. Only long options are checked, and a value is
 * skipped after an option that takes one (a queue may be named `--x`);
 * everything else is left to @effect/cli.
 */
export const unknownOption = (root: CommandNode, argv: ReadonlyArray<string>): Option.Option<UsageError> => {
  const { node, path } = resolve(root, argv)
  // Only a command that runs: a command of subcommands (and the root) is left to @effect/cli.
  if (path.length === 0 || node.children.size > 0) return Option.none()
  for (let i = path.length; i < argv.length; i++) {
    const token = argv[i]!
    if (token === "--") break
    if (!/^--[^-]/.test(token)) continue
    const equals = token.indexOf("=")
    const name = equals === -1 ? token : token.slice(0, equals)
    const takesValue = node.options.get(name)
    if (takesValue === undefined) {
      const own = [...node.options.keys()].filter((option) => !builtIns.some(([builtIn]) => builtIn === option))
      return Option.some(
        new UsageError({
          reason: `unknown option ${sanitize(name)} for alkstore ${path.join(" ")} (it takes ${own.length === 0 ? "no options" : own.join(", ")})`
        })
      )
    }
    if (takesValue && equals === -1) i++
  }
  return Option.none()
}
