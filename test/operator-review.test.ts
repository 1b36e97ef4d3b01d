/**
 * Review of the operator surfaces (the dashboard and the CLI): hostile
 * names and texts in a real Chromium, cross-site writes from another site's
 * page, routes for every queue name the store holds, odd request input on
 * both engines, where the dashboard listens, the CLI's exit codes and
 * messages, its output for a very large number of queues, and the Admin
 * service's typed refusals of bad input before anything is written.
 */
import { describe, expect, it } from "@effect/vitest"
import { type ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { chromium, type BrowserContext, type Page } from "playwright-core"
import { afterAll, beforeAll } from "vitest"
import { Effect, Either, Layer, Option, Redacted } from "effect"
import { Admin, Locks, PgStore, Queues, Scheduler, SqliteStore } from "../src/index.js"
import { type EngineUnderTest, pgDatabaseUrl, pgOwned, sqliteOwned } from "./contract/harness.js"
import { cli, dashboard, tempDir } from "./ops-support.js"

const chromiumPath = "/usr/bin/chromium"
const dir = tempDir("operator-review")
const children: Array<ChildProcess> = []
let context: BrowserContext | undefined
let attacker: http.Server | undefined

afterAll(async () => {
  await context?.close()
  attacker?.close()
  for (const child of children) child.kill("SIGTERM")
  fs.rmSync(dir, { recursive: true, force: true })
})

type Services = Queues.Queues | Admin.Admin | Scheduler.Scheduler | Locks.Locks
const run = <A, E>(layer: Layer.Layer<Services, unknown>, effect: Effect.Effect<A, E, Services>) =>
  Effect.runPromise(Effect.scoped(Effect.provide(effect, layer)) as Effect.Effect<A, never>)

/** Markup in every name the pages show (short enough for any route: < 100 characters). */
const hostileQueue = `q<img src=x onerror=alert(1)>"'</title><svg onload=alert(2)>`
const hostileName = `s<img src=x onerror=alert(3)></td></table><script>alert(4)</script>`
const hostileLock = `l<iframe src=javascript:alert(5)></iframe><b onmouseover=alert(6)>`
/** A valid queue name (the store keeps up to 1000 bytes) past 100 characters. */
const longQueue = `tenant-${"x".repeat(120)}`
/** A valid queue name a URL path cannot carry as a segment (browsers resolve it). */
const dotDot = ".."

interface SeededIds {
  readonly hostileDead: number
  readonly victimDead: number
  readonly victimPending: number
  readonly longDead: number
}

/** The store the browser and HTTP tests read (each engine seeds the same). */
const seedStore = (layer: Layer.Layer<Services, unknown>) =>
  run(layer, Effect.gen(function*() {
    const queues = yield* Queues.Queues
    const hostile = yield* queues.queue(hostileQueue, { maxAttempts: 1 })
    const hostileDead = yield* hostile.enqueue({ n: 1 })
    yield* Option.getOrThrow(yield* hostile.claim("w")).fail(`boom <img src=x onerror=alert(8)>`)
    yield* hostile.enqueue({ html: `</pre><img src=x onerror=alert(7)>` })
    const victim = yield* queues.queue("victim", { maxAttempts: 1 })
    const victimDead = yield* victim.enqueue({ v: 1 })
    yield* Option.getOrThrow(yield* victim.claim("w")).fail("victim died")
    const victimPending = yield* victim.enqueue({ v: 2 })
    const long = yield* queues.queue(longQueue, { maxAttempts: 1 })
    const longDead = yield* long.enqueue({ l: 1 })
    yield* Option.getOrThrow(yield* long.claim("w")).fail("long died")
    yield* (yield* queues.queue(dotDot)).enqueue({ dots: true })
    yield* (yield* Scheduler.Scheduler).schedule(hostileName, "@every 1d", hostileQueue, { s: `<img src=x onerror=alert(9)>` })
    yield* (yield* Locks.Locks).acquire(hostileLock, { ttl: "1 hour", owner: `o<img src=x onerror=alert(10)>` })
    return { hostileDead, victimDead, victimPending, longDead }
  }))

/** A request with any headers (fetch will not send a path such as `//` as given). */
const raw = (base: string, method: string, pathname: string, headers: Record<string, string> = {}) =>
  new Promise<{ readonly status: number; readonly headers: http.IncomingHttpHeaders; readonly body: string }>((resolve, reject) => {
    const url = new URL(base)
    const request = http.request({ hostname: url.hostname, port: url.port, path: pathname, method, headers }, (response) => {
      let body = ""
      response.setEncoding("utf8")
      response.on("data", (chunk) => (body += chunk))
      response.on("end", () => resolve({ status: response.statusCode!, headers: response.headers, body }))
    })
    request.on("error", reject)
    request.end()
  })

const errorText = (body: string) => /<div class="error">(.*?)<\/div>/s.exec(body)?.[1] ?? body.slice(0, 200)

let sqliteFile = ""
let sqliteIds: SeededIds
let pgUrl = ""
/** Each engine's dashboard: SQLite with writes allowed (the browser's), PostgreSQL read-only. */
const dashboards: Array<{ readonly engine: string; readonly base: string; readonly writes: boolean }> = []

const sqliteLayer = (file: string) => SqliteStore.layer({ filename: file })
const pgLayer = (url: string) => PgStore.layer({ url: Redacted.make(url) })

beforeAll(async () => {
  sqliteFile = path.join(dir, "dash.db")
  pgUrl = await pgDatabaseUrl()
  ;[sqliteIds] = await Promise.all([seedStore(sqliteLayer(sqliteFile)), seedStore(pgLayer(pgUrl))])
  const [sqliteBase, pgBase] = await Promise.all([
    dashboard(sqliteFile, ["--allow-writes"], children),
    dashboard(pgUrl, [], children)
  ])
  dashboards.push({ engine: "sqlite", base: sqliteBase!, writes: true }, { engine: "postgresql", base: pgBase!, writes: false })
}, 120_000)

const sqliteDashboard = () => dashboards[0]!.base

const browserPage = async (): Promise<Page> => {
  expect(fs.existsSync(chromiumPath), "Debian's chromium package").toBe(true)
  context ??= await chromium.launchPersistentContext(path.join(dir, "profile"), {
    executablePath: chromiumPath,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
    viewport: { width: 1200, height: 820 }
  })
  return context.newPage()
}

describe("dashboard in headless Chromium", () => {
  it.live("hostile queue, schedule, lock and owner names, payloads and error texts are text on every page, the chart's legend included", () =>
    Effect.promise(async () => {
      const page = await browserPage()
      const dialogs: Array<string> = []
      page.on("dialog", (dialog) => {
        dialogs.push(dialog.message())
        void dialog.dismiss()
      })
      const nothingInjected = async (where: string) => {
        expect(await page.locator("img, script, iframe, b[onmouseover], [onload], [onerror]").count(), where).toBe(0)
        expect(await page.locator("svg").count(), where).toBeLessThanOrEqual(1) // the chart's own
      }
      const base = sqliteDashboard()
      // The chart (and its legend of queue names) needs two readings: the dashboard samples every second.
      await expect.poll(async () => {
        await page.goto(`${base}/`)
        return page.locator("svg polyline").count()
      }, { timeout: 20_000 }).toBeGreaterThan(0)
      expect(await page.locator("main").innerText()).toContain(hostileQueue)
      expect(await page.locator("svg + div.muted").innerText()).toContain(hostileQueue)
      await nothingInjected("overview")

      await page.getByRole("link", { name: hostileQueue, exact: true }).first().click()
      expect(await page.locator("h1").innerText()).toBe(`Queue ${hostileQueue}`)
      expect(await page.locator("#jobs").innerText()).toContain(`</pre><img src=x onerror=alert(7)>`)
      await nothingInjected("queue page")

      await page.goto(`${base}/dead?queue=${encodeURIComponent(hostileQueue)}`)
      expect(await page.locator("#dead").innerText()).toContain(`boom <img src=x onerror=alert(8)>`)
      expect(await page.locator("form[action^='/purge?queue=']").innerText()).toContain(hostileQueue)
      await nothingInjected("dead page")

      await page.goto(`${base}/jobs/${sqliteIds.hostileDead}`)
      expect(await page.locator("#last-error").innerText()).toBe(`boom <img src=x onerror=alert(8)>`)
      await nothingInjected("job page")

      await page.getByRole("link", { name: "Schedules" }).click()
      expect(await page.locator("#schedules").innerText()).toContain(hostileName)
      expect(await page.locator("#schedules").innerText()).toContain(`<img src=x onerror=alert(9)>`)
      await nothingInjected("schedules")

      await page.getByRole("link", { name: "Locks" }).click()
      expect(await page.locator("#locks").innerText()).toContain(hostileLock)
      expect(await page.locator("#locks").innerText()).toContain(`o<img src=x onerror=alert(10)>`)
      await nothingInjected("locks")
      expect(dialogs).toEqual([])
      await page.close()
    }), 60_000)

  it.live("a page on another site cannot requeue, cancel or purge through the visitor's browser (form POSTs and GETs)", () =>
    Effect.promise(async () => {
      const base = sqliteDashboard()
      const form = (action: string, target: string, fields = "") =>
        `<iframe name="${target}"></iframe><form target="${target}" method="post" action="${base}${action}">${fields}</form>`
      const evil = `<!doctype html><html><body>
${form(`/jobs/${sqliteIds.victimDead}/requeue`, "a")}
${form(`/jobs/${sqliteIds.victimPending}/cancel`, "b")}
${form(`/queues/victim/purge`, "c", `<input name="older_than" value="">`)}
<img src="${base}/jobs/${sqliteIds.victimPending}/cancel"><img src="${base}/queues/victim/purge">
<script>for (const f of document.forms) f.submit()</script></body></html>`
      attacker = http.createServer((_, res) => res.writeHead(200, { "content-type": "text/html" }).end(evil))
      await new Promise<void>((resolve) => attacker!.listen(0, "127.0.0.1", resolve))
      const port = (attacker.address() as net.AddressInfo).port
      const page = await browserPage()
      const posts: Array<number> = []
      page.on("response", (response) => {
        if (response.request().method() === "POST" && response.url().startsWith(base)) posts.push(response.status())
      })
      // `localhost` is another site than the dashboard's 127.0.0.1.
      await page.goto(`http://localhost:${port}/`)
      await expect.poll(() => posts.length, { timeout: 15_000 }).toBe(3)
      expect(posts).toEqual([403, 403, 403])
      await page.close()
      const after = await run(sqliteLayer(sqliteFile), Effect.gen(function*() {
        const admin = yield* Admin.Admin
        return {
          dead: Option.map(yield* admin.job(sqliteIds.victimDead), (j) => j.state),
          pending: Option.map(yield* admin.job(sqliteIds.victimPending), (j) => j.state)
        }
      }))
      expect(after).toEqual({ dead: Option.some("dead"), pending: Option.some("pending") })
    }), 60_000)

  it.live("a queue whose name is longer than 100 characters opens from the overview's link (names up to 1000 bytes are valid)", () =>
    Effect.promise(async () => {
      const page = await browserPage()
      await page.goto(`${sqliteDashboard()}/`)
      await page.getByRole("link", { name: longQueue, exact: true }).click()
      const shown = await page.locator("main").innerText()
      expect(shown, `the queue's page, not: ${shown.slice(0, 120)}`).toContain(`Queue ${longQueue}`)
      await page.close()
    }), 60_000)

  it.live("a queue named '..' opens from the overview's link (it is a valid queue name)", () =>
    Effect.promise(async () => {
      const page = await browserPage()
      await page.goto(`${sqliteDashboard()}/`)
      await page.getByRole("link", { name: dotDot, exact: true }).click()
      const heading = await page.locator("h1").innerText()
      expect(heading, `landed on ${page.url()}`).toBe(`Queue ${dotDot}`)
      await page.close()
    }), 60_000)
})

describe("dashboard over HTTP, each engine", () => {
  it.live("odd query input is a 400 page that says what was wrong; an unknown queue is an empty page; nothing is a 500", () =>
    Effect.promise(async () => {
      for (const { base, engine } of dashboards) {
        const cases: ReadonlyArray<[string, number]> = [
          ["/queues/victim?limit=-1", 400],
          ["/queues/victim?limit=99999999999999999999", 400],
          ["/queues/victim?limit=abc", 400],
          ["/queues/victim?limit=1.5", 400],
          ["/queues/victim?limit=", 400],
          ["/queues/victim?limit=1000", 200],
          ["/queues/victim?offset=10", 400],
          ["/queues/victim?state=dead&limit=5&limit=6", 400],
          ["/queues/no-such-queue", 200],
          ["/dead?queue=no-such-queue&limit=1", 200],
          ["/dead?queue=", 400],
          ["/jobs/-1", 400],
          ["/jobs/1.5", 400],
          ["/jobs/1e3", 400],
          ["/jobs/9007199254740993", 400],
          ["/queues/%E0%A4%A", 404]
        ]
        for (const [url, status] of cases) {
          const response = await raw(base, "GET", url)
          expect(response.status, `${engine} ${url}: ${errorText(response.body)}`).toBe(status)
          expect(response.headers["content-security-policy"], `${engine} ${url}`).toContain("default-src 'none'")
        }
        expect((await raw(base, "GET", "/queues/no-such-queue")).body).toContain("No jobs")
      }
    }), 60_000)

  it.live("GET // (a doubled slash) is answered as a page with the security headers, not an empty 500", () =>
    Effect.promise(async () => {
      const answers: Array<string> = []
      for (const { base, engine } of dashboards) {
        for (const url of ["//", "//?limit=5"]) {
          const response = await raw(base, "GET", url)
          const csp = (response.headers["content-security-policy"] ?? "").includes("default-src 'none'")
          answers.push(`${engine} GET ${url}: ${response.status < 500 ? "4xx" : response.status}, ${csp ? "CSP" : "no CSP"}`)
        }
      }
      expect(answers).toEqual(dashboards.flatMap(({ engine }) => [`${engine} GET //: 4xx, CSP`, `${engine} GET //?limit=5: 4xx, CSP`]))
    }), 60_000)

  it.live("a queue with a name over 100 characters has its page and its purge, on each engine", () =>
    Effect.promise(async () => {
      const answers: Array<string> = []
      const expected: Array<string> = []
      for (const { base, engine, writes } of dashboards) {
        const page = await raw(base, "GET", `/queues/${encodeURIComponent(longQueue)}`)
        answers.push(`${engine} page: ${page.status} ${page.status === 200 ? "" : errorText(page.body)}`.trim())
        expected.push(`${engine} page: 200`)
        if (writes) {
          const host = new URL(base).host
          const purge = await raw(base, "POST", `/queues/${encodeURIComponent(longQueue)}/purge`, {
            host,
            origin: `http://${host}`,
            "sec-fetch-site": "same-origin"
          })
          answers.push(`${engine} purge: ${purge.status} ${purge.status === 303 ? "" : errorText(purge.body)}`.trim())
          expected.push(`${engine} purge: 303`)
        }
      }
      expect(answers).toEqual(expected)
    }), 60_000)

  it.live("listens on 127.0.0.1 only by default: not on the machine's other addresses", () =>
    Effect.promise(async () => {
      const port = Number(new URL(sqliteDashboard()).port)
      const others = Object.values(os.networkInterfaces()).flat().filter((a) => a !== undefined && !a.internal && a.family === "IPv4")
      for (const address of [...others.map((a) => a!.address), "::1"]) {
        const outcome = await new Promise<string>((resolve) => {
          const socket = net.connect({ host: address, port })
          socket.on("connect", () => {
            socket.destroy()
            resolve("connected")
          })
          socket.on("error", (error: NodeJS.ErrnoException) => resolve(error.code ?? "error"))
        })
        expect(outcome, address).not.toBe("connected")
      }
    }), 30_000)
})

describe("alkstore CLI", () => {
  it.live("dashboard on a port already in use says so (the address and EADDRINUSE), not an empty 'storage error'", () =>
    Effect.promise(async () => {
      const port = new URL(sqliteDashboard()).port
      const ran = await cli(["dashboard", "--db", sqliteFile, "--port", port])
      expect(ran.code).not.toBe(0)
      expect(ran.stderr.trim(), "stderr").toMatch(/EADDRINUSE|in use/)
      expect(ran.stderr, "exit 4 and 'storage error' mean the database failed (docs/operations.md)").not.toContain("storage error")
    }), 30_000)

  it.live("a usage error prints the command's help (docs/operations.md: usage errors print the command's help)", () =>
    Effect.promise(async () => {
      const ran = await cli(["jobs", "--db", sqliteFile, "--state", "done"])
      expect(ran.code).toBe(2)
      const printed = ran.stdout + ran.stderr
      expect(printed, printed).toContain("--limit")
      expect(printed, printed).toContain("--queue")
    }), 30_000)

  it.live("an option the command does not take is named in the message, not reported as a missing --db", () =>
    Effect.promise(async () => {
      // `--limit` belongs to `jobs`; `--db` is given.
      const ran = await cli(["stats", "--limit", "5", "--db", sqliteFile])
      expect(ran.code).toBe(2)
      expect(ran.stderr, ran.stderr).toContain("--limit")
    }), 30_000)

  it.live("a database that cannot be opened exits 3 before anything is done: a missing file, a PostgreSQL database that does not exist, a refusing server", () =>
    Effect.promise(async () => {
      const missing = path.join(dir, "missing.db")
      const unknownDb = new URL(pgUrl)
      unknownDb.pathname = "/alkstore_no_such_database"
      unknownDb.password = "s3cret-pw"
      const runs = await Promise.all([
        cli(["purge", "--db", missing, "--queue", "victim"]),
        cli(["requeue", "1", "--db", missing]),
        cli(["stats", "--db", unknownDb.toString()]),
        cli(["cancel", "1", "--db", "postgres://u:s3cret-pw@127.0.0.1:1/x"])
      ])
      for (const ran of runs) {
        expect(ran.code, ran.stderr).toBe(3)
        expect(ran.stderr).toMatch(/^alkstore: cannot open database /)
        expect(ran.stderr).not.toContain("s3cret-pw")
      }
      expect(fs.existsSync(missing)).toBe(false)
    }), 60_000)

  it.live("stats over a store with 160 000 queues prints its table (exit 0), not a crash", () =>
    Effect.promise(async () => {
      const file = path.join(dir, "many-queues.db")
      await run(sqliteLayer(file), Effect.flatMap(Effect.flatMap(Queues.Queues, (q) => q.queue("seed")), (q) => q.enqueue(0)))
      // Many rows at once: copies of the library's own row, one queue each (160 000 enqueues would take half a minute).
      const { default: Database } = await import("better-sqlite3")
      const db = new Database(file)
      try {
        db.exec(`INSERT INTO __alkstore_jobs (queue, payload, state, priority, run_at, max_attempts, visibility_timeout, backoff_base, created_at, group_key)
          WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 160000)
          SELECT printf('tenant-%06d', i), j.payload, j.state, j.priority, j.run_at, j.max_attempts, j.visibility_timeout, j.backoff_base, j.created_at, j.group_key
          FROM n, (SELECT * FROM __alkstore_jobs LIMIT 1) j`)
      } finally {
        db.close()
      }
      const ran = await cli(["stats", "--db", file])
      expect(ran.stderr.slice(0, 200)).toBe("")
      expect(ran.code).toBe(0)
      expect(ran.stdout).toContain("160001 jobs in the store")
    }), 60_000)
})

describe("Admin: bad input is a typed error before anything is written", () => {
  const bad = (engine: EngineUnderTest) =>
    it.effect(`requeue, cancel, job, jobs and purgeDead refuse bad input with InvalidOptions or InvalidName (${engine.name})`, () =>
      Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const admin = yield* Admin.Admin
        const q = yield* queues.queue("repairs", { maxAttempts: 1 })
        const dead = yield* q.enqueue({ d: 1 })
        yield* Option.getOrThrow(yield* q.claim("w")).fail("x")
        const pending = yield* q.enqueue({ p: 1 })
        const attempts: ReadonlyArray<[string, Effect.Effect<unknown, { readonly _tag: string }>]> = [
          ["requeue(0)", admin.requeue(0)],
          ["requeue(1.5)", admin.requeue(1.5)],
          ["requeue(NaN)", admin.requeue(Number.NaN)],
          ["requeue(2^53)", admin.requeue(2 ** 53)],
          ["cancel(-1)", admin.cancel(-1)],
          ["cancel(Infinity)", admin.cancel(Number.POSITIVE_INFINITY)],
          ["job(0)", admin.job(0)],
          ["jobs limit 0", admin.jobs({ limit: 0 })],
          ["jobs limit 1001", admin.jobs({ limit: 1001 })],
          ["jobs limit 2.5", admin.jobs({ limit: 2.5 })],
          ["jobs state", admin.jobs({ state: "done" as Admin.JobState })],
          ["jobs beforeId 0", admin.jobs({ beforeId: 0 })],
          ["jobs queue ''", admin.jobs({ queue: "" })],
          ["jobs queue NUL", admin.jobs({ queue: "a\u0000b" })],
          ["jobs queue lone surrogate", admin.jobs({ queue: "a\ud800" })],
          ["purgeDead('')", admin.purgeDead("")],
          ["purgeDead NUL", admin.purgeDead("repairs\u0000")],
          ["purgeDead -1", admin.purgeDead("repairs", -1)],
          ["purgeDead NaN", admin.purgeDead("repairs", Number.NaN)],
          ["purgeDead Infinity", admin.purgeDead("repairs", Number.POSITIVE_INFINITY)],
          ["purgeDead 'soon'", admin.purgeDead("repairs", "soon" as never)]
        ]
        const outcomes: Array<string> = []
        for (const [label, attempt] of attempts) {
          const result = yield* Effect.either(attempt)
          outcomes.push(`${label}: ${Either.isLeft(result) ? result.left._tag : "succeeded"}`)
        }
        expect(outcomes.filter((o) => !/: (InvalidOptions|InvalidName)$/.test(o))).toEqual([])
        expect(Option.map(yield* admin.job(dead), (j) => j.state)).toEqual(Option.some("dead"))
        expect(Option.map(yield* admin.job(pending), (j) => j.state)).toEqual(Option.some("pending"))
        expect((yield* admin.queues).find((s) => s.name === "repairs")).toMatchObject({ pending: 1, dead: 1 })
      }).pipe(Effect.provide(engine.store())), 30_000)
  for (const engine of [sqliteOwned, pgOwned]) bad(engine)
})
