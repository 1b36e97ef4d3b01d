/**
 * Running the `alkstore` CLI (bundled as shipped) and the seed script
 * (compiled from the sources) as real child processes, for the CLI, watch and
 * dashboard tests.
 */
import * as esbuild from "esbuild"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { bundleCli } from "../scripts/bundle-cli.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

/**
 * The sources compiled once per test file with esbuild (no bundling, no type
 * check: milliseconds), under node_modules so packages resolve as from the
 * repository. A child then starts in plain node, without a loader hook on
 * every module it imports (half the start-up time on a busy machine).
 * Removed after the file (`endTestFileBuilds`, test/support/per-file.ts).
 */
let outdir: string | undefined
const compiled = () => {
  if (outdir !== undefined) return outdir
  const target = path.join(root, "node_modules", ".cache", `alkstore-ops-${process.pid}`)
  const entries = [...listTs(path.join(root, "src")), path.join(root, "test", "fixtures", "seed-ops.ts"), path.join(root, "test", "fixtures", "hostile.ts")]
  esbuild.buildSync({ entryPoints: entries, outdir: target, outbase: root, format: "esm", platform: "node", target: "node20", logLevel: "error" })
  fs.writeFileSync(path.join(target, "package.json"), JSON.stringify({ type: "module" }))
  return (outdir = target)
}

const listTs = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory() ? listTs(path.join(dir, entry.name)) : entry.name.endsWith(".ts") ? [path.join(dir, entry.name)] : []
  )

/**
 * The CLI as shipped: bundled by the package build's own function (scripts/bundle-cli.ts), once per test
 * file, beside the compiled sources (under node_modules, so better-sqlite3 resolves).
 */
let cliBundle: string | undefined
export const cliEntry = () => (cliBundle ??= bundleCli(path.join(compiled(), "bundle")))

/** Removes the test file's compiled sources and CLI bundle, where it made them (test/support/per-file.ts). */
export const endTestFileBuilds = () => {
  if (outdir !== undefined) fs.rmSync(outdir, { recursive: true, force: true })
  outdir = undefined
  cliBundle = undefined
}
const seedScript = () => path.join(compiled(), "test", "fixtures", "seed-ops.js")

/** `node <script> …args` as argv, for spawning or a terminal command line. */
export const nodeArgv = (script: string, args: ReadonlyArray<string>) => [process.execPath, script, ...args]

export interface Ran {
  readonly code: number | null
  readonly stdout: string
  readonly stderr: string
}

export const runNode = (
  script: string,
  args: ReadonlyArray<string>,
  options: { readonly env?: Record<string, string>; readonly cwd?: string } = {}
): Promise<Ran> =>
  new Promise((resolve, reject) => {
    const [cmd, ...rest] = nodeArgv(script, args)
    const env: Record<string, string | undefined> = { ...process.env, NO_COLOR: "1", ...options.env }
    if (options.env?.ALKSTORE_DB === undefined) delete env.ALKSTORE_DB
    const child = spawn(cmd!, rest, { cwd: options.cwd ?? root, env, stdio: ["ignore", "pipe", "pipe"] })
    let stdout = ""
    let stderr = ""
    child.stdout.on("data", (d) => (stdout += d))
    child.stderr.on("data", (d) => (stderr += d))
    child.on("error", reject)
    child.on("close", (code) => resolve({ code, stdout, stderr }))
  })

export const cli = (args: ReadonlyArray<string>, options?: { readonly env?: Record<string, string> }) =>
  runNode(cliEntry(), args, options)

export interface Seeded {
  readonly deadEmail: number
  /** The span `deadEmail` was enqueued in. */
  readonly deadEmailTrace: { readonly traceId: string; readonly spanId: string }
  readonly claimed: number
  readonly pending: ReadonlyArray<number>
  readonly scheduled: number
  readonly deadReport: number
}

export const tempDir = (label: string) => fs.mkdtempSync(path.join(os.tmpdir(), `alkstore-${label}-`))

/**
 * Starts `alkstore dashboard` over `db` (a file or a `postgres://` URL) on a
 * free port, and resolves to its base URL; the child goes in `children`, for
 * the test file to stop.
 */
export const dashboard = (db: string, extra: ReadonlyArray<string>, children: Array<ChildProcess>) =>
  new Promise<string>((resolve, reject) => {
    const [cmd, ...args] = nodeArgv(cliEntry(), ["dashboard", "--db", db, "--port", "0", "--sample-every", "1s", ...extra])
    const child = spawn(cmd!, args, { stdio: ["ignore", "pipe", "pipe"] })
    children.push(child)
    let out = ""
    let err = ""
    child.stdout!.on("data", (d) => {
      out += d
      const match = /dashboard on (http:\/\/127\.0\.0\.1:\d+)/.exec(out)
      if (match) resolve(match[1]!)
    })
    child.stderr!.on("data", (d) => (err += d))
    child.on("close", (code) => reject(new Error(`dashboard exited with ${code}: ${err}`)))
  })

/** A seeded store at `file`, or in the database of a `postgres://` URL (see test/fixtures/seed-ops.ts). */
export const seed = async (file: string): Promise<Seeded> => {
  const ran = await runNode(seedScript(), [file])
  if (ran.code !== 0) throw new Error(`seeding failed: ${ran.stderr}`)
  return JSON.parse(ran.stdout) as Seeded
}

/**
 * `alkstore watch --json` on `db` until it printed two readings, then SIGINT:
 * its exit code and the readings, parsed. `children` gets the process (to be
 * killed if the test fails first).
 */
export const watchJsonReadings = async (db: string, children: Array<ChildProcess>) => {
  const [cmd, ...args] = nodeArgv(cliEntry(), ["watch", "--db", db, "--interval", "200ms", "--json"])
  const child = spawn(cmd!, args, { stdio: ["ignore", "pipe", "pipe"] })
  children.push(child)
  let out = ""
  const lines = await new Promise<Array<string>>((resolve) =>
    child.stdout.on("data", (d) => {
      out += d
      const complete = out.split("\n").filter((l) => l.trim() !== "")
      if (complete.length >= 2 && out.endsWith("\n")) resolve(complete)
    }))
  const code = new Promise<number | null>((resolve) => child.on("close", resolve))
  child.kill("SIGINT")
  return { code: await code, readings: lines.map((l) => JSON.parse(l)) }
}

export { hostile } from "./fixtures/hostile.js"
