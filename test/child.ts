/**
 * Runs a fixture in a child Node process (through tsx) and reports how it
 * ended, whatever the exit code: tests of "the host process survives" need
 * the code and the output, not a failure.
 */
import { Effect } from "effect"
import { spawn } from "node:child_process"

export interface ChildOutcome {
  /** The exit code, or `null` when a signal ended it. */
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

export const runChild = (script: string, args: ReadonlyArray<string>) =>
  Effect.async<ChildOutcome>((resume) => {
    const child = spawn(process.execPath, ["--import", "tsx", script, ...args], { stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (chunk) => (stdout += chunk))
    child.stderr.on("data", (chunk) => (stderr += chunk))
    child.on("exit", (code) => resume(Effect.succeed({ code, stdout, stderr })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

/** The last line of `stdout` that parses as JSON (the fixture's report). */
export const lastJson = <A>(stdout: string): A | undefined => {
  const lines = stdout.trim().split("\n").reverse()
  for (const line of lines) {
    try {
      return JSON.parse(line) as A
    } catch {
      // not the report
    }
  }
  return undefined
}
