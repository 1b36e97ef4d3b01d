/**
 * Edge cases of the operator tools (Admin, the CLI, the dashboard): hostile
 * names, bad input, paging, repairs racing workers, engine parity.
 */
import type { ChildProcess } from "node:child_process"
import { Effect, Layer, Option, Redacted } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Admin, PgStore, Queues, SqliteStore } from "../src/index.js"
import { pgDatabaseUrl } from "./contract/harness.js"
import { cli, dashboard, tempDir } from "./ops-support.js"

const dir = tempDir("ops-edges")
const children: Array<ChildProcess> = []
afterAll(() => {
  for (const child of children) child.kill("SIGTERM")
  fs.rmSync(dir, { recursive: true, force: true })
})
let counter = 0
const freshFile = (label: string) => path.join(dir, `${++counter}-${label}.db`)

type Services = Queues.Queues | Admin.Admin
const onSqlite = <A, E>(file: string, effect: Effect.Effect<A, E, Services>) =>
  Effect.runPromise(Effect.provide(effect, SqliteStore.layer({ filename: file })) as Effect.Effect<A, E>)

/** A queue name an application may use (the library only refuses NUL, lone surrogates, the prefix). */
const controlQueue = "evil\u001b]0;pwned\u0007\u001b[2J"
const ESC = "\u001b"

describe("CLI: names from the store are printed with control characters escaped", () => {
  let file = ""
  let deadId = 0
  let pendingId = 0
  beforeAll(async () => {
    file = freshFile("control")
    ;({ deadId, pendingId } = await onSqlite(file, Effect.gen(function*() {
      const q = yield* (yield* Queues.Queues).queue(controlQueue, { maxAttempts: 1 })
      const deadId = yield* q.enqueue({ n: 1 })
      yield* Option.getOrThrow(yield* q.claim("w")).fail("broken")
      const pendingId = yield* q.enqueue({ n: 2 })
      return { deadId, pendingId }
    })))
  })

  it("stats and jobs (tables) escape the queue name", async () => {
    const stats = await cli(["stats", "--db", file])
    expect(stats.code).toBe(0)
    expect(stats.stdout).not.toContain(ESC)
    expect(stats.stdout).toContain("evil\\u001b]0;pwned\\u0007")
  })

  it("requeue <id> prints the job's queue name escaped, not raw terminal controls", async () => {
    const ran = await cli(["requeue", String(deadId), "--db", file])
    expect(ran.code).toBe(0)
    expect(ran.stdout).toContain(`requeued job ${deadId}`)
    expect(ran.stdout).not.toContain(ESC)
    expect(ran.stdout).not.toContain("\u0007")
  })

  it("cancel <id> prints the job's queue name escaped, not raw terminal controls", async () => {
    const ran = await cli(["cancel", String(pendingId), "--db", file])
    expect(ran.code).toBe(0)
    expect(ran.stdout).toContain(`cancelled job ${pendingId}`)
    expect(ran.stdout).not.toContain(ESC)
    expect(ran.stdout).not.toContain("\u0007")
  })
})

describe("Admin: engine parity on a queue name with NUL (no queue can have one)", () => {
  const nul = "a\u0000b"
  const check = (layer: Layer.Layer<Services, unknown>) =>
    Effect.runPromise(Effect.provide(Effect.gen(function*() {
      const admin = yield* Admin.Admin
      const listed = yield* Effect.either(admin.jobs({ queue: nul, state: "dead" }))
      const purged = yield* Effect.either(admin.purgeDead(nul))
      const tag = (e: typeof listed | typeof purged) => (e._tag === "Left" ? e.left._tag : "ok")
      return { jobs: tag(listed), purge: tag(purged) }
    }), layer) as Effect.Effect<{ jobs: string; purge: string }>)

  it("SQLite: answered without a storage error", async () => {
    const result = await check(SqliteStore.layer({ filename: freshFile("nul") }))
    expect(["ok", "InvalidName"]).toContain(result.jobs)
    expect(["ok", "InvalidName"]).toContain(result.purge)
  })

  it("PostgreSQL: a typed error (InvalidName) or an empty answer, not an SqlError", async () => {
    const url = await pgDatabaseUrl()
    const result = await check(PgStore.layer({ url: Redacted.make(url), schema: "ops_edges_nul" }))
    expect(["ok", "InvalidName"], JSON.stringify(result)).toContain(result.jobs)
    expect(["ok", "InvalidName"], JSON.stringify(result)).toContain(result.purge)
  })
})

describe("CLI reads beside a writer (docs: the tools' reads take no write lock)", () => {
  it("stats answers while another connection holds the SQLite write lock", async () => {
    const file = freshFile("locked")
    await onSqlite(file, Effect.flatMap(Effect.flatMap(Queues.Queues, (q) => q.queue("emails")), (q) => q.enqueue(1)))
    const { default: Database } = await import("better-sqlite3")
    const writer = new Database(file)
    try {
      writer.exec("BEGIN IMMEDIATE")
      writer.exec("UPDATE __alkstore_jobs SET priority = priority")
      const started = Date.now()
      const ran = await Promise.race([
        cli(["stats", "--db", file, "--json"]),
        new Promise<"still waiting">((resolve) => setTimeout(() => resolve("still waiting"), 3000))
      ])
      expect(ran, "stats waited for the write lock another connection holds").not.toBe("still waiting")
      expect(Date.now() - started).toBeLessThan(3000)
    } finally {
      writer.exec("COMMIT")
      writer.close()
    }
  })
})

describe("dashboard on PostgreSQL: a queue name with NUL in the query is a 400 page, not a 500", () => {
  it("/dead?queue=%00 and /queues/%00", async () => {
    const base = await dashboard(await pgDatabaseUrl(), [], children)
    for (const url of [`${base}/dead?queue=a%00b`, `${base}/queues/a%00b`]) {
      const response = await fetch(url)
      const body = await response.text()
      expect(response.status, `${url}: ${body.slice(body.indexOf("<main>"), body.indexOf("</main>"))}`).toBe(400)
    }
  })

  it("the same URLs on SQLite answer without a server error (the engines disagree)", async () => {
    const file = freshFile("dash-nul")
    await onSqlite(file, Effect.flatMap(Admin.Admin, (a) => a.queues))
    const base = await dashboard(file, [], children)
    for (const url of [`${base}/dead?queue=a%00b`, `${base}/queues/a%00b`]) {
      expect((await fetch(url)).status).toBeLessThan(500)
    }
  })
})

describe("Admin.jobs paging with beforeId (holds)", () => {
  it("pages of every filter, joined, are the whole listing: no job skipped or repeated", async () => {
    const file = freshFile("paging")
    const result = await onSqlite(file, Effect.gen(function*() {
      const queues = yield* Queues.Queues
      const a = yield* queues.queue("a", { maxAttempts: 1 })
      const b = yield* queues.queue("b", { maxAttempts: 1 })
      for (let i = 0; i < 30; i++) {
        const q = i % 3 === 0 ? b : a
        yield* q.enqueue(i, i % 4 === 0 ? { delay: "1 hour" } : {})
      }
      for (let i = 0; i < 6; i++) yield* Option.getOrThrow(yield* a.claim("w")).fail("x")
      for (let i = 0; i < 3; i++) Option.getOrThrow(yield* b.claim("w"))
      const admin = yield* Admin.Admin
      const mismatches: Array<string> = []
      for (const queue of [undefined, "a", "b"]) {
        for (const state of [undefined, ...Admin.jobStates]) {
          const filter = { ...(queue === undefined ? {} : { queue }), ...(state === undefined ? {} : { state }) }
          const all = (yield* admin.jobs({ ...filter, limit: 1000 })).map((j) => j.id)
          const paged: Array<number> = []
          let before: number | undefined
          for (;;) {
            const page = yield* admin.jobs({ ...filter, limit: 4, ...(before === undefined ? {} : { beforeId: before }) })
            paged.push(...page.map((j) => j.id))
            if (page.length < 4) break
            before = page[page.length - 1]!.id
          }
          if (JSON.stringify(all) !== JSON.stringify(paged)) mismatches.push(`${JSON.stringify(filter)}: ${all} vs ${paged}`)
        }
      }
      const totals = yield* admin.totals
      const depths = (yield* admin.queues).reduce((n, q) => n + q.pending + q.scheduled + q.claimed + q.dead, 0)
      return { mismatches, totals, depths }
    }))
    expect(result.mismatches).toEqual([])
    expect(result.totals).toEqual({ lastJobId: 30, live: 30 })
    expect(result.depths).toBe(30)
  })
})
