/**
 * docs/recipes.md "Graceful shutdown on SIGTERM", run as the process it is:
 * the block (taken from the markdown, so the doc and this test cannot drift)
 * runs under tsx in a scratch directory on a file holding one job; once the
 * job is in flight the test sends SIGTERM, and checks what the recipe
 * promises: exit code 0, the job pending again with its attempt given back
 * (released, not lost and not finished), and the scheduler's lease released.
 */
import { spawn } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { Effect, Option, Schedule } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { Admin, Queues, SqliteStore } from "../src/index.js"
import { extractBlocks, runnableSource } from "./support/docExamples.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const heading = "## Graceful shutdown on SIGTERM"

/** The first ts block after the recipe's heading. */
const recipeBlock = () => {
  const text = fs.readFileSync(path.join(root, "docs", "recipes.md"), "utf8")
  const start = text.indexOf(`\n${heading}\n`)
  if (start < 0) throw new Error(`docs/recipes.md has no "${heading}" section`)
  const line = text.slice(0, start).split("\n").length + 1
  const block = extractBlocks("docs/recipes.md", text).blocks.find((b) => b.line > line)
  if (block === undefined) throw new Error(`no ts block after "${heading}"`)
  return block
}

fs.mkdirSync(path.join(root, ".docs-examples"), { recursive: true })
const scratch = fs.mkdtempSync(path.join(root, ".docs-examples", "shutdown-"))
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }))

const withStore = <A, E>(filename: string, effect: Effect.Effect<A, E, Queues.Queues | Admin.Admin>) =>
  Effect.runPromise(effect.pipe(Effect.provide(SqliteStore.layer({ filename }))))

describe("docs/recipes.md: graceful shutdown on SIGTERM", () => {
  it("stops on SIGTERM with exit code 0, releasing the claim in flight and the scheduler's lease", async () => {
    const block = recipeBlock()
    const main = path.join(scratch, "main.ts")
    fs.writeFileSync(main, runnableSource(root, block.code))
    const db = path.join(scratch, "app.db")
    const id = await withStore(db, Effect.gen(function*() {
      const emails = yield* (yield* Queues.Queues).queue("emails")
      return yield* emails.enqueue({ to: "ada@example.com" })
    }))

    const child = spawn(process.execPath, ["--import", "tsx", main], {
      cwd: scratch,
      env: { ...process.env, DB_FILE: db, NO_COLOR: "1" },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)))
    const inFlight = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the job was never in flight:\n${output}`)), 40_000)
      const onData = (chunk: Buffer) => {
        output += chunk.toString()
        if (output.includes("sending")) {
          clearTimeout(timer)
          resolve()
        }
      }
      child.stdout.on("data", onData)
      child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
      child.on("exit", () => reject(new Error(`${where(block.line)}: exited before the job was in flight:\n${output}`)))
    })
    try {
      await inFlight
      // and the process leads the scheduler (its standby took the lease), so that the stop has a lease to release
      await withStore(db, Effect.gen(function*() {
        const admin = yield* Admin.Admin
        yield* admin.locks.pipe(
          Effect.repeat({ schedule: Schedule.spaced("50 millis"), until: (locks) => locks.some(isLeader) }),
          Effect.timeoutFail({ duration: "20 seconds", onTimeout: () => new Error(`no scheduler leader:\n${output}`) })
        )
      }))
      // The handler is in its 5-second sleep now: the stop must not wait for it, and must not lose the job.
      child.kill("SIGTERM")
      expect(await exited, output).toBe(0)
    } finally {
      child.kill("SIGKILL")
    }

    const after = await withStore(db, Effect.gen(function*() {
      const admin = yield* Admin.Admin
      return { job: yield* admin.job(id), locks: yield* admin.locks }
    }))
    const job = Option.getOrThrow(after.job)
    expect({ state: job.state, attempts: job.attempts }).toEqual({ state: "pending", attempts: 0 })
    expect(after.locks.filter((lock) => lock.name === leadership).map((lock) => lock.held)).toEqual([false])
    expect(after.locks.filter((lock) => lock.held)).toEqual([])
  }, 60_000)
})

const where = (line: number) => `docs/recipes.md:${line}`
const leadership = "__alkstore_scheduler"
const isLeader = (lock: Admin.LockInfo) => lock.name === leadership && lock.held
