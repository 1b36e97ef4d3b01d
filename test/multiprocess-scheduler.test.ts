/**
 * The scheduler across OS processes, in real time: three processes run
 * `runAsStandby` on one SQLite file (then on one PostgreSQL database) while the test SIGKILLs whoever leads,
 * three times, and starts a replacement each time so three stay alive.
 * Afterwards every elapsed boundary of an `@every 1s` schedule was fired
 * exactly once: no duplicate `runAt`, no gap (a new leader's catch-up refills
 * the boundaries that elapsed while nobody could lead).
 */
import Sqlite from "better-sqlite3"
import Pg from "pg"
import { type ChildProcess, spawn } from "node:child_process"
import * as path from "node:path"
import * as readline from "node:readline"
import { DateTime, Effect } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { Scheduler } from "../src/index.js"
import { type EngineUnderTest, freshFile, pgChildDatabase, pgOwned, sqliteOwned } from "./contract/harness.js"

/** What the test reads from the store while the fleet runs (it must not disturb the fleet). */
interface Reader {
  readonly lease: () => Promise<{ owner: string; expires_at: number } | undefined>
  readonly fired: () => Promise<Array<{ run_at: number; created_at: number }>>
  readonly nextFireAt: () => Promise<number>
  readonly close: () => Promise<void>
}

const leaseSql = `SELECT owner, expires_at FROM __alkstore_locks WHERE name = '__alkstore_scheduler'`
const firedSql = `SELECT run_at, created_at FROM __alkstore_jobs WHERE queue = 'ticks' ORDER BY run_at, id`
const nextSql = `SELECT next_fire_at FROM __alkstore_scheduler_tasks WHERE name = 'tick'`

const sqliteReader = async (file: string): Promise<Reader> => {
  const db = new Sqlite(file, { readonly: true, timeout: 1_000 })
  return {
    lease: async () => db.prepare(leaseSql).get() as { owner: string; expires_at: number } | undefined,
    fired: async () => db.prepare(firedSql).all() as Array<{ run_at: number; created_at: number }>,
    nextFireAt: async () => (db.prepare(nextSql).get() as { next_fire_at: number }).next_fire_at,
    close: async () => {
      db.close()
    }
  }
}

const pgReader = async (database: string): Promise<Reader> => {
  const url = database.slice(database.indexOf(":", 3) + 1)
  const client = new Pg.Client({ connectionString: url })
  await client.connect()
  const rows = async (text: string) => (await client.query(text)).rows.map((row: Record<string, string>) =>
    Object.fromEntries(Object.entries(row).map(([k, v]) => [k, /^\d+$/.test(String(v)) ? Number(v) : v]))
  )
  return {
    lease: async () => (await rows(leaseSql))[0] as { owner: string; expires_at: number } | undefined,
    fired: async () => (await rows(firedSql)) as Array<{ run_at: number; created_at: number }>,
    nextFireAt: async () => ((await rows(nextSql))[0] as { next_fire_at: number }).next_fire_at,
    close: () => client.end()
  }
}

const variants: ReadonlyArray<{
  readonly title: string
  readonly engine: EngineUnderTest
  readonly database: (file: string) => Promise<string>
  readonly reader: (database: string) => Promise<Reader>
}> = [
  { title: "one SQLite file", engine: sqliteOwned, database: async (file) => file, reader: sqliteReader },
  { title: "one PostgreSQL database", engine: pgOwned, database: pgChildDatabase, reader: pgReader }
]

const root = path.resolve(import.meta.dirname, "..")
const interval = 1_000
const kills = 3

interface Member {
  readonly child: ChildProcess
  instance: string | undefined
  exited: boolean
}

const members = new Map<number, Member>()

const spawnMember = (file: string): Member => {
  const child = spawn(process.execPath, ["--import", "tsx", "test/fixtures/standby.ts", file], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"]
  })
  const member: Member = { child, instance: undefined, exited: false }
  members.set(child.pid!, member)
  readline.createInterface({ input: child.stdout! }).on("line", (line) => {
    try {
      const parsed = JSON.parse(line) as { instance?: string }
      if (typeof parsed.instance === "string") member.instance = parsed.instance
    } catch {
      // not ours
    }
  })
  child.stderr!.on("data", (chunk: Buffer) => process.stderr.write(`[${child.pid}] ${chunk.toString()}`))
  child.on("exit", () => {
    member.exited = true
  })
  return member
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

const waitFor = async <A>(what: string, probe: () => A | undefined | Promise<A | undefined>, timeoutMs: number): Promise<A> => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    const value = await probe()
    if (value !== undefined) return value
    await sleep(20)
  }
  throw new Error(`timed out waiting for ${what}`)
}

afterAll(() => {
  for (const member of members.values()) if (!member.exited) member.child.kill("SIGKILL")
})

for (const variant of variants) describe(`scheduler across processes on ${variant.title}`, () => {
  it("one firer per boundary, no gaps, while leaders are SIGKILLed", async () => {
    const filename = freshFile("fleet")
    const registered = await Effect.runPromise(
      Effect.flatMap(Scheduler.Scheduler, (scheduler) => scheduler.schedule("tick", "@every 1s", "ticks", { t: 1 })).pipe(
        Effect.provide(variant.engine.store({ filename })),
        Effect.orDie
      )
    )
    const first = DateTime.toEpochMillis(registered.nextFireAt)
    const file = await variant.database(filename)

    const db = await variant.reader(file)
    try {
      /** The live member holding the lease now, if any. */
      const leader = async (): Promise<Member | undefined> => {
        const row = await db.lease()
        if (row === undefined || row.expires_at <= Date.now()) return undefined
        for (const member of members.values()) {
          if (!member.exited && member.instance !== undefined && row.owner.startsWith(`${member.instance}:`)) {
            return member
          }
        }
        return undefined
      }

      // This variant's fleet only: a member the previous variant spawned and stopped before it printed its
      // instance (a slow start under load) would otherwise keep "every member started" false forever.
      for (const member of members.values()) if (!member.exited) member.child.kill("SIGKILL")
      members.clear()
      for (let i = 0; i < 3; i++) spawnMember(file)
      await waitFor("three members to start", () =>
        [...members.values()].every((m) => m.instance !== undefined) || undefined, 60_000)

      // SIGKILL whoever leads, `kills` times, a few boundaries into each tenure. (A
      // leader starved of CPU past its lease may also hand over on its own: fine.)
      const killed: Array<number> = []
      for (let k = 0; k < kills; k++) {
        await waitFor("a leader", leader, 10_000)
        await sleep(4_000)
        const current = await waitFor("a leader", leader, 10_000)
        current.child.kill("SIGKILL")
        killed.push(current.child.pid!)
        await waitFor("the kill", () => current.exited || undefined, 5_000)
        spawnMember(file)
      }
      await waitFor("the last leader", leader, 10_000)
      await sleep(4_000)
      const survivor = await waitFor("a live leader at the stop", leader, 10_000)
      const stoppedAt = Date.now()
      for (const member of members.values()) if (!member.exited) member.child.kill("SIGKILL")
      await waitFor("the fleet to stop", () => [...members.values()].every((m) => m.exited) || undefined, 5_000)

      const fired = await db.fired()
      const runAts = fired.map((row) => row.run_at)
      const next = await db.nextFireAt()
      const lags = fired.map((row) => row.created_at - row.run_at)
      const maxLag = Math.max(...lags)
      console.log(
        `fleet: ${runAts.length} boundaries, ${kills} leaders killed, ` +
          `${members.size} processes, largest catch-up lag ${maxLag} ms; ` +
          `late fires (boundary: lag ms): ${
            fired.flatMap((row, i) => (lags[i]! > 250 ? [`${(row.run_at - first) / interval}: ${lags[i]}`] : [])).join(", ")
          }`
      )

      // three leaders killed, a fourth process leading at the stop
      expect(new Set(killed).size).toBe(kills)
      expect(killed).not.toContain(survivor.child.pid)
      expect(runAts.length).toBeGreaterThanOrEqual(20)
      // exactly once: no duplicate boundary
      expect(new Set(runAts).size).toBe(runAts.length)
      // no gap: consecutive boundaries from the first (registration + interval)
      expect(runAts).toEqual(runAts.map((_, i) => first + i * interval))
      // the schedule row agrees: every boundary before its next fire has fired
      expect(next).toBe(first + runAts.length * interval)
      // and every boundary that elapsed while the last leader ran had fired by the stop
      expect(next).toBeGreaterThan(stoppedAt - interval)
      // the kills did leave boundaries to catch up on
      expect(maxLag).toBeGreaterThan(200)
    } finally {
      await db.close()
    }
  }, 150_000)
})
