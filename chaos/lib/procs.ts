/**
 * Child processes for the chaos checks. Workers are bundled once per run
 * with esbuild (a bundled worker starts in a fraction of tsx's time, which
 * matters when a driver replaces killed workers every few hundred ms), and
 * spawned as plain `node` processes that the driver kills, freezes
 * (SIGSTOP) and thaws (SIGCONT).
 */
import { build } from "esbuild"
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import * as readline from "node:readline"
import * as fs from "node:fs"

const root = path.resolve(import.meta.dirname, "..", "..")
// inside the project so the bundles' bare imports resolve from its node_modules
const outDir = path.join(root, "node_modules", ".cache", `alkstore-chaos-${process.pid}`)
process.on("exit", () => fs.rmSync(outDir, { recursive: true, force: true }))
const bundles = new Map<string, Promise<string>>()

const bundle = (worker: string): Promise<string> => {
  let done = bundles.get(worker)
  if (done === undefined) {
    const outfile = path.join(outDir, `${worker}.mjs`)
    done = build({
      entryPoints: [path.join(root, "chaos", "workers", `${worker}.ts`)],
      outfile,
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      logLevel: "error",
      // native and CommonJS-only packages load from the project's node_modules
      packages: "external"
    }).then(() => outfile)
    bundles.set(worker, done)
  }
  return done
}

export interface Child {
  readonly pid: number
  readonly process: ChildProcess
  exited: boolean
  frozen: boolean
  /** Killed by the driver (so its exit is no finding). */
  killed: boolean
  /** Lines of stdout, parsed as JSON where they are. */
  readonly lines: Array<unknown>
  readonly stderr: Array<string>
  readonly exit: Promise<number | null>
}

export const spawnWorker = async (worker: string, args: ReadonlyArray<string>): Promise<Child> => {
  const file = await bundle(worker)
  const proc = spawn(process.execPath, [file, ...args], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"]
  })
  const lines: Array<unknown> = []
  const stderr: Array<string> = []
  readline.createInterface({ input: proc.stdout! }).on("line", (line) => {
    try {
      lines.push(JSON.parse(line))
    } catch {
      lines.push(line)
    }
  })
  proc.stderr!.on("data", (chunk: Buffer) => stderr.push(chunk.toString()))
  const child: Child = {
    pid: proc.pid!,
    process: proc,
    exited: false,
    frozen: false,
    killed: false,
    lines,
    stderr,
    exit: new Promise((resolve) =>
      proc.on("exit", (code) => {
        child.exited = true
        resolve(code)
      })
    )
  }
  return child
}

export const kill = (child: Child) => {
  child.killed = true
  if (child.exited) return
  child.frozen = false // a stopped process dies on SIGKILL too
  child.process.kill("SIGKILL")
}

export const freeze = (child: Child) => {
  if (child.exited || child.frozen) return
  child.frozen = true
  child.process.kill("SIGSTOP")
}

export const thaw = (child: Child) => {
  if (!child.frozen) return
  child.frozen = false
  if (!child.exited) child.process.kill("SIGCONT")
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

export const waitUntil = async (what: string, probe: () => boolean | Promise<boolean>, timeoutMs: number) => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await probe()) return
    await sleep(50)
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
}

/** A child that wrote something to stderr and exited unasked is a finding, not noise. */
export const describeExit = (child: Child) => `pid ${child.pid}: ${child.stderr.join("").trim().slice(0, 2000)}`
