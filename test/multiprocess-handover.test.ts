/**
 * A graceful handover across OS processes: the leader process shuts down
 * (SIGTERM: its standby is interrupted and releases the lease), and a
 * standby in another process takes over at once — woken by the release's
 * commit (SQLite: its data_version watcher; PostgreSQL: the release's
 * NOTIFY), long before it would have tried again on its own (half the
 * 20 s lease) or the lease would have lapsed (20 s).
 */
import { SqlClient } from "@effect/sql"
import { Effect, ManagedRuntime } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import * as readline from "node:readline"
import { afterAll, describe, expect, it } from "vitest"
import { type EngineUnderTest, freshFile, pgChildDatabase, pgOwned, sqliteOwned } from "./contract/harness.js"

const root = path.resolve(import.meta.dirname, "..")
const leaseMs = 20_000

interface Member {
  readonly child: ChildProcess
  instance: string | undefined
  exit: Promise<number | null>
}

const spawned: Array<Member> = []
afterAll(() => {
  for (const m of spawned) m.child.kill("SIGKILL")
})

const spawnMember = (database: string): Member => {
  const child = spawn(process.execPath, ["--import", "tsx", "test/fixtures/standby.ts", database, String(leaseMs)], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"]
  })
  const member: Member = {
    child,
    instance: undefined,
    exit: new Promise((resolve) => child.on("exit", (code) => resolve(code)))
  }
  readline.createInterface({ input: child.stdout! }).on("line", (line) => {
    try {
        const parsed = JSON.parse(line) as { instance?: string }
        if (typeof parsed.instance === "string") member.instance = parsed.instance
      } catch {
        // not ours
      }
    })
    child.stderr!.on("data", (chunk: Buffer) => process.stderr.write(`[${child.pid}] ${chunk.toString()}`))
    spawned.push(member)
    return member
  }

  const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

  const waitFor = async (what: string, probe: () => boolean | Promise<boolean>, timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs
    while (Date.now() < deadline) {
      if (await probe()) return
      await sleep(10)
    }
    throw new Error(`timed out waiting for ${what}`)
  }

  const variants: ReadonlyArray<{
    readonly title: string
    readonly engine: EngineUnderTest
    readonly database: (file: string) => Promise<string>
  }> = [
    { title: "SQLite", engine: sqliteOwned, database: async (file) => file },
    { title: "PostgreSQL", engine: pgOwned, database: pgChildDatabase }
  ]

  for (const variant of variants) describe(`scheduler handover across processes (${variant.title})`, () => {
    it("a leader that shuts down releases; a standby in another process leads at once (within 3 s), not after the lease", async () => {
      const filename = freshFile("handover")
      const database = await variant.database(filename)
      const reader = Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql<{ owner: string; expires_at: number | string }>`
          SELECT owner, expires_at FROM __alkstore_locks WHERE name = '__alkstore_scheduler'`)
      // the test reads the lease row through a store of its own on the same database
      const runtime = ManagedRuntime.make(variant.engine.store({ filename }))
      const read = () =>
        runtime.runPromise(
          reader.pipe(
            Effect.map((rows) => (rows.length === 1 && Number(rows[0]!.expires_at) > Date.now() ? rows[0]!.owner : undefined)),
            Effect.orDie
          )
        )
    try {
      const leader = spawnMember(database)
      await waitFor("the first process to lead", async () =>
        leader.instance !== undefined && (await read())?.startsWith(`${leader.instance}:`) === true, 60_000)
      const standby = spawnMember(database)
      await waitFor("the second process to start", () => standby.instance !== undefined, 60_000)
      await sleep(1_000) // its first try failed; it waits for its turn (10 s away) or a release

      const stoppedAt = performance.now()
      leader.child.kill("SIGTERM")
      await waitFor("the standby to lead", async () => (await read())?.startsWith(`${standby.instance}:`) === true, 15_000)
      const handoverMs = performance.now() - stoppedAt
      console.log(`${variant.title}: handover in ${handoverMs.toFixed(0)} ms (lease ${leaseMs} ms)`)
      expect(await leader.exit).toBe(0) // a graceful shutdown
      expect(handoverMs).toBeLessThan(3_000)
      standby.child.kill("SIGKILL")
    } finally {
      await runtime.dispose()
    }
  }, 120_000)
})
