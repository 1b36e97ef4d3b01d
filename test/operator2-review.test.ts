/**
 * Review of the operator tools after the day's changes (migrations checked recorded, options read once, the
 * PostgreSQL store's close waiting for its statements): the `alkstore` CLI and the dashboard as real child
 * processes, against real SQLite files and a real PostgreSQL server. Each test failed on the code before its
 * fix.
 */
import Database from "better-sqlite3"
import { type ChildProcess, spawn } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { pgDatabaseUrl } from "./contract/harness.js"
import { cliEntry, nodeArgv, seed, type Seeded, tempDir } from "./ops-support.js"

const dir = tempDir("operator2-review")
const children: Array<ChildProcess> = []
const servers: Array<net.Server> = []
const sockets: Array<net.Socket> = []
afterAll(() => {
  for (const child of children) child.kill("SIGKILL")
  for (const socket of sockets) socket.destroy()
  for (const server of servers) server.close()
  fs.rmSync(dir, { recursive: true, force: true })
})

let seededFile = ""
let ids: Seeded
let counter = 0
beforeAll(async () => {
  seededFile = path.join(dir, "seeded.db")
  ids = await seed(seededFile)
}, 60_000)

const freshCopy = () => {
  const file = path.join(dir, `copy-${++counter}.db`)
  fs.copyFileSync(seededFile, file)
  return file
}

/** The CLI as a child process we can signal; resolves its exit (code, signal, ms since `started`) or "running" at `guardMs`. */
const start = (args: ReadonlyArray<string>) => {
  const [cmd, ...rest] = nodeArgv(cliEntry(), args)
  const env: Record<string, string | undefined> = { ...process.env, NO_COLOR: "1" }
  delete env.ALKSTORE_DB
  const child = spawn(cmd!, rest, { env, stdio: ["ignore", "pipe", "pipe"] })
  children.push(child)
  let output = ""
  child.stdout.on("data", (d) => (output += d))
  child.stderr.on("data", (d) => (output += d))
  const closed = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on("close", (code, signal) => resolve({ code, signal }))
  )
  const exitWithin = (guardMs: number) => {
    const since = Date.now()
    return Promise.race([
      closed.then((e) => ({ ...e, ms: Date.now() - since, output })),
      new Promise<"running">((resolve) => setTimeout(() => resolve("running"), guardMs))
    ])
  }
  return { child, exitWithin }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe("alkstore CLI: exits by itself", () => {
  // docs/operations.md, `--db`: "`postgres://…` … a server that cannot be reached exits 3"; exit code 3: "a
  // PostgreSQL server that refuses or cannot be reached". A server that accepts the TCP connection and never
  // answers (a hung or stopped server, a half-open path) leaves `alkstore stats` waiting for ever, printing
  // nothing: `PgClient.make`'s 5-second connect timeout cannot interrupt its uninterruptible acquire, and the
  // CLI gives the pool no `connectTimeout` (pg's `connectionTimeoutMillis`) that would end the attempt.
  it("stats against a PostgreSQL address that accepts but never answers exits 3 within seconds", async () => {
    const server = net.createServer((socket) => void sockets.push(socket))
    servers.push(server)
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    const port = (server.address() as net.AddressInfo).port
    const run = start(["stats", "--db", `postgres://u:pw@127.0.0.1:${port}/x`])
    const exit = await run.exitWithin(8_000)
    expect(exit, "the CLI was still running after 8 s").not.toBe("running")
    if (exit !== "running") {
      expect(exit.code, exit.output).toBe(3)
      expect(exit.output).toMatch(/^alkstore: cannot open database /)
    }
  }, 9_500)

  // docs/operations.md, exit codes: "0 | done (also: `watch` or `dashboard` stopped with Ctrl-C or SIGTERM)".
  // A requeue stopped by SIGTERM (a deploy's supervisor, a job runner's timeout) did nothing — the job is still
  // dead — yet exits 0 with no output, so a script takes it as done. src/internal/cli/main.ts maps every
  // interrupt of every command to exit 0.
  it("a requeue stopped by SIGTERM before it was done does not exit 0", async () => {
    const file = freshCopy()
    const holder = new Database(file)
    try {
      holder.pragma("busy_timeout = 0")
      holder.exec("BEGIN IMMEDIATE") // the requeue waits for the write lock (busy patience: 30 s)
      const run = start(["requeue", String(ids.deadEmail), "--db", file])
      await sleep(2_500)
      run.child.kill("SIGTERM")
      const exit = await run.exitWithin(5_000)
      expect(exit).not.toBe("running")
      holder.exec("ROLLBACK")
      const row = holder.prepare("SELECT state FROM __alkstore_jobs WHERE id = ?").get(ids.deadEmail) as { state: string }
      expect(row.state).toBe("dead") // not requeued
      if (exit !== "running") expect(exit.code, `exit ${exit.code} after SIGTERM, nothing done; output ${JSON.stringify(exit.output)}`).not.toBe(0)
    } finally {
      holder.close()
    }
  }, 9_500)
})
