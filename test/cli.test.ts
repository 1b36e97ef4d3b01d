/**
 * The `alkstore` CLI as a real child process against a temp SQLite file:
 * every command, human and JSON output, and the exit codes (0 ok, 1 refused
 * or not found, 2 bad arguments, 3 database unavailable).
 */
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest"
import * as fs from "node:fs"
import * as path from "node:path"
import { cli, cliEntry, hostile, runNode, seed, type Seeded, tempDir } from "./ops-support.js"

const dir = tempDir("cli")
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))
let counter = 0
let seededFile = ""
let ids: Seeded

/** A copy of the seeded store, for a test that changes it. */
const freshCopy = () => {
  const file = path.join(dir, `copy-${++counter}.db`)
  fs.copyFileSync(seededFile, file)
  return file
}

const json = async (args: ReadonlyArray<string>) => {
  const ran = await cli([...args, "--json"])
  expect(ran.stderr).toBe("")
  expect(ran.code).toBe(0)
  return JSON.parse(ran.stdout)
}

beforeAll(async () => {
  seededFile = path.join(dir, "seeded.db")
  ids = await seed(seededFile)
})

describe("alkstore CLI", () => {
  it("--help lists every command, and each command has its own help", async () => {
    const top = await cli(["--help"])
    expect(top.code).toBe(0)
    for (const command of ["stats", "jobs", "job", "dead", "requeue", "purge", "cancel", "schedules", "schedule add", "schedule remove", "locks", "migrate", "watch", "dashboard"]) {
      expect(top.stdout).toContain(`- ${command} `)
    }
    const jobs = await cli(["jobs", "--help"])
    expect(jobs.code).toBe(0)
    expect(jobs.stdout).toContain("--state")
    expect(jobs.stdout).toContain("--limit")
  })

  it("stats shows every queue's depths as a table, and as JSON", async () => {
    const ran = await cli(["stats", "--db", seededFile])
    expect(ran.code).toBe(0)
    expect(ran.stdout).toMatch(/QUEUE\s+PENDING\s+SCHEDULED\s+CLAIMED\s+DEAD/)
    expect(ran.stdout).toMatch(/emails\s+2\s+1\s+1\s+1/)
    expect(ran.stdout).toMatch(/reports\s+0\s+0\s+0\s+1/)
    const data = await json(["stats", "--db", seededFile])
    expect(data.queues.map((q: { name: string }) => q.name)).toEqual(["emails", "reports"])
    expect(data.queues[0]).toMatchObject({ pending: 2, scheduled: 1, claimed: 1, dead: 1 })
    expect(data.totals).toEqual({ lastJobId: 6, live: 6 })
  })

  it("jobs filters by queue, state and limit, newest first", async () => {
    const pending = await json(["jobs", "--db", seededFile, "--queue", "emails", "--state", "pending"])
    expect(pending.map((j: { id: number }) => j.id)).toEqual([...ids.pending].reverse())
    const limited = await json(["jobs", "--db", seededFile, "--limit", "2"])
    expect(limited.map((j: { id: number }) => j.id)).toEqual([ids.deadReport, ids.scheduled])
    const table = await cli(["jobs", "--db", seededFile, "--state", "scheduled"])
    expect(table.stdout).toMatch(new RegExp(`${ids.scheduled}\\s+emails\\s+scheduled`))
  })

  it("job <id> shows the row's history fields; dead lists errors", async () => {
    const job = await json(["job", String(ids.deadEmail), "--db", seededFile])
    expect(job).toMatchObject({ id: ids.deadEmail, queue: "emails", state: "dead", attempts: 1, lastError: `SMTP said ${hostile}` })
    expect(job.payload.to).toBe(hostile)
    const human = await cli(["job", String(ids.deadEmail), "--db", seededFile])
    expect(human.stdout).toMatch(/last error\s+SMTP said/)
    expect(human.stdout).toMatch(/died\s+\d{4}-/)
    const dead = await json(["dead", "--db", seededFile, "--queue", "reports"])
    expect(dead.map((j: { id: number; lastError: string }) => [j.id, j.lastError])).toEqual([[ids.deadReport, "report generator crashed"]])
  })

  it("job <id> shows the trace context the job was enqueued in (trace id and span id), and none for one enqueued outside a span", async () => {
    const { spanId, traceId } = ids.deadEmailTrace
    expect(traceId).toMatch(/^[0-9a-f]{32}$/)
    const traced = await json(["job", String(ids.deadEmail), "--db", seededFile])
    expect(traced.traceContext).toEqual({ traceparent: `00-${traceId}-${spanId}-01`, traceId, spanId, sampled: true })
    const human = await cli(["job", String(ids.deadEmail), "--db", seededFile])
    expect(human.stdout).toMatch(new RegExp(`trace id\\s+${traceId}\n`))
    expect(human.stdout).toMatch(new RegExp(`span id\\s+${spanId}\n`))
    const untraced = await json(["job", String(ids.deadReport), "--db", seededFile])
    expect(untraced.traceContext).toBeNull()
    expect((await cli(["job", String(ids.deadReport), "--db", seededFile])).stdout).toMatch(/trace id\s+-\n/)
    // the listings carry it too
    const listed = await json(["jobs", "--db", seededFile, "--queue", "emails", "--state", "dead"])
    expect(listed.map((j: { traceContext: { traceId: string } | null }) => j.traceContext?.traceId)).toEqual([traceId])
  })

  it("requeue by id puts a dead job back pending; a second requeue is refused (exit 1)", async () => {
    const db = freshCopy()
    const ran = await cli(["requeue", String(ids.deadEmail), "--db", db])
    expect(ran.code).toBe(0)
    expect(ran.stdout).toContain(`requeued job ${ids.deadEmail} (queue emails): pending`)
    const job = await json(["job", String(ids.deadEmail), "--db", db])
    expect(job).toMatchObject({ state: "pending", attempts: 0 })
    const again = await cli(["requeue", String(ids.deadEmail), "--db", db])
    expect(again.code).toBe(1)
    expect(again.stderr).toContain("is pending: only dead jobs are requeued")
    const missing = await cli(["requeue", "999", "--db", db])
    expect([missing.code, missing.stderr.trim()]).toEqual([1, "alkstore: no job 999"])
  })

  it("cancel deletes a pending job; purge deletes a queue's dead jobs by age", async () => {
    const db = freshCopy()
    expect((await cli(["cancel", String(ids.pending[0]), "--db", db])).code).toBe(0)
    expect((await cli(["job", String(ids.pending[0]), "--db", db])).code).toBe(1)
    expect((await cli(["cancel", String(ids.deadReport), "--db", db])).code).toBe(1)
    expect(await json(["purge", "--db", db, "--queue", "reports", "--older-than", "1h"])).toEqual({ queue: "reports", purged: 0 })
    const purged = await cli(["purge", "--db", db, "--queue", "reports"])
    expect([purged.code, purged.stdout.trim()]).toEqual([0, "purged 1 dead job from reports"])
  })

  it("schedules, schedule add and remove, and locks", async () => {
    const db = freshCopy()
    const [nightly] = await json(["schedules", "--db", db])
    expect(nightly).toMatchObject({ name: "nightly-digest", spec: "@every 1d", queue: "emails", payload: { digest: true } })
    const added = await json(["schedule", "add", "hourly", "--every", "1h", "--queue", "reports", "--payload", "{\"n\":1}", "--priority", "3", "--db", db])
    expect(added).toMatchObject({ name: "hourly", spec: "@every 1h", queue: "reports", payload: { n: 1 }, priority: 3 })
    expect((await json(["schedules", "--db", db])).map((s: { name: string }) => s.name)).toEqual(["hourly", "nightly-digest"])
    expect((await cli(["schedule", "remove", "hourly", "--db", db])).code).toBe(0)
    expect((await cli(["schedule", "remove", "hourly", "--db", db])).code).toBe(1)
    const locks = await json(["locks", "--db", db])
    expect(locks.map((l: { name: string; owner: string; held: boolean; token: number }) => [l.name, l.owner, l.held, l.token])).toEqual([
      [`lock ${hostile}`, `owner ${hostile}`, true, 1],
      ["reindex", "host-a:1234", true, 1]
    ])
  })

  it("bad arguments exit 2 with a message and change nothing", async () => {
    const db = freshCopy()
    const cases: ReadonlyArray<[ReadonlyArray<string>, string]> = [
      [["jobs", "--db", db, "--state", "done"], "pending, scheduled, claimed, dead"],
      [["jobs", "--db", db, "--limit", "0"], "limit"],
      [["job", "abc", "--db", db], "integer"],
      [["job", "0", "--db", db], "invalid job id 0"],
      [["purge", "--db", db, "--queue", "reports", "--older-than", "soon"], "invalid --older-than"],
      [["schedule", "add", "x", "--every", "1 hour", "--queue", "q", "--db", db], "invalid --every"],
      [["schedule", "add", "x", "--every", "1h", "--queue", "q", "--payload", "{oops", "--db", db], "not JSON"],
      [["schedule", "add", "__alkstore_x", "--every", "1h", "--queue", "q", "--db", db], "reserved prefix"],
      [["watch", "--db", db, "--interval", "10ms"], "--interval must be at least 100ms"],
      [["dashboard", "--db", db, "--port", "70000"], "invalid --port 70000"],
      [["dashboard", "--db", db, "--sample-every", "1ms"], "--sample-every must be at least 200ms"],
      [["frobnicate"], "Invalid subcommand"],
      [["stats"], "--db"]
    ]
    for (const [args, message] of cases) {
      const ran = await cli(args)
      expect(ran.code, args.join(" ")).toBe(2)
      expect(ran.stdout + ran.stderr, args.join(" ")).toContain(message)
    }
    expect((await json(["schedules", "--db", db])).length).toBe(1)
  })

  it("a missing, unreadable or unsupported database exits 3; migrate creates one; ALKSTORE_DB names it", async () => {
    const missing = path.join(dir, "missing.db")
    const ran = await cli(["stats", "--db", missing])
    expect(ran.code).toBe(3)
    expect(ran.stderr).toContain("no such file (run `alkstore migrate` to create one)")
    expect(fs.existsSync(missing)).toBe(false)
    const garbage = path.join(dir, "garbage.db")
    fs.writeFileSync(garbage, "this is not a database, just text that is long enough to have a header ".repeat(20))
    const unreadable = await cli(["stats", "--db", garbage])
    expect(unreadable.code).toBe(3)
    expect(unreadable.stderr).toMatch(/cannot open database .*garbage\.db: .*not a database/)
    expect((await cli(["stats", "--db", dir])).code).toBe(3)
    const pg = await cli(["stats", "--db", "postgres://user:secret@127.0.0.1:1/alk"])
    expect(pg.code).toBe(3)
    expect(pg.stderr).not.toContain("secret")
    expect(pg.stderr).toContain("cannot open database postgres://user:***@127.0.0.1:1/alk")
    const created = path.join(dir, "created.db")
    const migrated = await cli(["migrate", "--db", created])
    expect([migrated.code, migrated.stdout.trim()]).toEqual([0, "schema up to date: 1_queues_and_locks, 2_scheduler, 3_flow_control, 4_trace_context, 5_effect_stores, 6_job_ids_without_autoincrement, 8_dead_job_indexes, 9_flow_group_by_state"])
    const viaEnv = await cli(["stats"], { env: { ALKSTORE_DB: created } })
    expect([viaEnv.code, viaEnv.stdout.trim()]).toEqual([0, "no queues yet"])
  })

  it("a postgres:// URL opens the PostgreSQL engine: migrate, then the same commands", async () => {
    const url = inject("pgUrl")
    const migrated = await cli(["migrate", "--db", url])
    expect(migrated.code).toBe(0)
    const added = await cli(["schedule", "add", "cli-pg-sweep", "--every", "5m", "--queue", "sweeps", "--payload", '{"kind":"sweep"}', "--db", url])
    expect(added.code).toBe(0)
    const listed = await cli(["schedules", "--json", "--db", url])
    expect(listed.code).toBe(0)
    expect(JSON.stringify(JSON.parse(listed.stdout))).toContain("cli-pg-sweep")
    expect((await cli(["schedule", "remove", "cli-pg-sweep", "--db", url])).code).toBe(0)
    expect((await cli(["stats", "--db", url])).code).toBe(0)
  })

  it("a command on a SQLite file never loads the PostgreSQL engine or its driver", async () => {
    // A resolve hook that names every module the command imports, on stderr.
    const hook = path.join(dir, "resolve-hook.mjs")
    fs.writeFileSync(hook, [
      "export async function resolve(specifier, context, next) {",
      "  const resolved = await next(specifier, context)",
      "  process.stderr.write(`resolved ${resolved.url}\\n`)",
      "  return resolved",
      "}"
    ].join("\n"))
    const register = path.join(dir, "register-hook.mjs")
    fs.writeFileSync(register, `import { register } from "node:module"\nregister(${JSON.stringify(`file://${hook}`)})\n`)
    const resolved = (ran: { readonly stderr: string }) =>
      ran.stderr.split("\n").filter((line) => line.startsWith("resolved ")).map((line) => line.slice("resolved ".length))
    const withHook = { env: { NODE_OPTIONS: `--import ${register}` } }
    const sqlite = await runNode(cliEntry(), ["stats", "--db", seededFile], withHook)
    expect(sqlite.code).toBe(0)
    // The shipped CLI is a bundle (scripts/bundle-cli.ts): the engine and its driver are the chunk `PgStore-…`.
    const engineChunk = /\/chunks\/PgStore-[^/]*\.js$/
    const loaded = resolved(sqlite)
    const chunks = loaded.filter((url) => url.includes("/chunks/"))
    expect(chunks.length).toBeGreaterThan(0) // the hook saw the command's imports
    expect(loaded.filter((url) => engineChunk.test(url) || /\/node_modules\/(pg|@effect\/sql-pg)\//.test(url))).toEqual([])
    // nor does any chunk it loaded carry the driver's code (its SCRAM authentication, say)
    for (const url of chunks) expect(fs.readFileSync(new URL(url), "utf8")).not.toContain("SCRAM-SHA-256")
    // and a postgres:// target still loads it, on demand
    const pg = await runNode(cliEntry(), ["stats", "--db", "postgres://u@127.0.0.1:1/x"], withHook)
    expect(pg.code).toBe(3)
    expect(resolved(pg).some((url) => engineChunk.test(url))).toBe(true)
  })

  it("a password given as ?password= or ?sslpassword= never appears in messages either", async () => {
    const pg = await cli(["stats", "--db", "postgres://u@127.0.0.1:1/x?password=hunter2&sslmode=disable&sslpassword=keypass"])
    expect(pg.code).toBe(3)
    expect(pg.stdout + pg.stderr).not.toContain("hunter2")
    expect(pg.stdout + pg.stderr).not.toContain("keypass")
    expect(pg.stderr).toContain("cannot open database postgres://u@127.0.0.1:1/x?password=***&sslmode=disable&sslpassword=***")
    const upper = await cli(["stats", "--db", "postgresql://u:secret@127.0.0.1:1/x?PASSWORD=hunter2"])
    expect(upper.code).toBe(3)
    expect(upper.stdout + upper.stderr).not.toMatch(/hunter2|secret/)
  })
})
