/**
 * The dashboard end to end: `alkstore dashboard` as a child process over a
 * seeded store holding hostile payloads and error texts, driven in Debian's
 * headless Chromium with playwright-core (no browser download): load,
 * navigate, requeue a dead job, see it pending; nothing from the data ever
 * becomes markup. Plus the HTTP rules: validation (400), read-only (403),
 * same-origin writes, and no answer to a foreign Host (421: DNS rebinding).
 */
import type { ChildProcess } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as path from "node:path"
import { chromium, type BrowserContext, type Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { allowedHosts } from "../src/internal/dashboard/server.js"
import { cli, dashboard, hostile, seed, type Seeded, tempDir } from "./ops-support.js"

const chromiumPath = "/usr/bin/chromium"
const dir = tempDir("dashboard")
const children: Array<ChildProcess> = []
let context: BrowserContext | undefined

afterAll(async () => {
  await context?.close()
  for (const child of children) child.kill("SIGTERM")
  fs.rmSync(dir, { recursive: true, force: true })
})

const startDashboard = (file: string, extra: ReadonlyArray<string>) => dashboard(file, extra, children)

let ids: Seeded
let writable = ""
let readOnly = ""

beforeAll(async () => {
  const file = path.join(dir, "dash.db")
  ids = await seed(file)
  ;[writable, readOnly] = await Promise.all([startDashboard(file, ["--allow-writes"]), startDashboard(file, [])])
}, 120_000)

/** A request with headers fetch will not send as given: any Host (or none), Origin, Sec-Fetch-Site. */
const raw = (base: string, method: string, pathname: string, headers: Record<string, string>, options: { readonly noHost?: boolean } = {}) =>
  new Promise<{ readonly status: number; readonly body: string }>((resolve, reject) => {
    const url = new URL(pathname, base)
    const request = http.request({
      hostname: url.hostname,
      port: url.port,
      path: url.pathname + url.search,
      method,
      headers,
      setHost: options.noHost !== true
    }, (response) => {
      let body = ""
      response.setEncoding("utf8")
      response.on("data", (chunk) => (body += chunk))
      response.on("end", () => resolve({ status: response.statusCode!, body }))
    })
    request.on("error", reject)
    request.end()
  })

describe("dashboard over HTTP", () => {
  it("validates every request: bad ids, states, limits and parameters are 400, unknown pages 404", async () => {
    const status = async (url: string) => (await fetch(url, { redirect: "manual" })).status
    expect(await status(`${readOnly}/`)).toBe(200)
    expect(await status(`${readOnly}/jobs/abc`)).toBe(400)
    expect(await status(`${readOnly}/jobs/0`)).toBe(400)
    expect(await status(`${readOnly}/jobs/99999999999999999999`)).toBe(400)
    expect(await status(`${readOnly}/jobs/999`)).toBe(404)
    expect(await status(`${readOnly}/queues/emails?state=done`)).toBe(400)
    expect(await status(`${readOnly}/queues/emails?limit=0`)).toBe(400)
    expect(await status(`${readOnly}/queues/emails?state=dead&state=pending`)).toBe(400)
    expect(await status(`${readOnly}/dead?bogus=1`)).toBe(400)
    expect(await status(`${readOnly}/dead?done=%3Cscript%3E`)).toBe(400)
    expect(await status(`${readOnly}/nowhere`)).toBe(404)
    const page = await fetch(`${readOnly}/queues/${encodeURIComponent(hostile)}`)
    expect(page.status).toBe(200)
    const body = await page.text()
    expect(body).not.toContain("<img")
    expect(body).toContain("&lt;img src=x onerror=alert(1)&gt;")
    expect(page.headers.get("content-security-policy")).toContain("default-src 'none'")
  })

  it("refuses writes with 403 when read-only, and from another origin when writes are allowed", async () => {
    const post = (url: string, headers: Record<string, string> = {}) =>
      fetch(url, { method: "POST", redirect: "manual", headers })
    expect((await post(`${readOnly}/jobs/${ids.deadReport}/requeue`)).status).toBe(403)
    expect((await post(`${readOnly}/jobs/${ids.pending[0]}/cancel`)).status).toBe(403)
    expect((await post(`${readOnly}/queues/reports/purge`)).status).toBe(403)
    expect((await post(`${writable}/jobs/${ids.deadReport}/requeue`, { origin: "http://evil.example" })).status).toBe(403)
    expect((await post(`${writable}/jobs/${ids.deadReport}/requeue`, { "sec-fetch-site": "cross-site" })).status).toBe(403)
    expect((await post(`${writable}/jobs/abc/requeue`, { "sec-fetch-site": "same-origin" })).status).toBe(400)
    expect((await post(`${writable}/jobs/${ids.pending[0]}/requeue`, { "sec-fetch-site": "same-origin" })).status).toBe(409)
    const readOnlyJob = await (await fetch(`${readOnly}/jobs/${ids.deadReport}`)).text()
    expect(readOnlyJob).not.toContain("Requeue")
    const job = await (await fetch(`${readOnly}/jobs/${ids.deadReport}`)).text()
    expect(job).toContain("state-dead")
  })

  it("a job's page shows the trace context it was enqueued in, and a dash for none", async () => {
    const { spanId, traceId } = ids.deadEmailTrace
    const traced = await (await fetch(`${readOnly}/jobs/${ids.deadEmail}`)).text()
    expect(traced).toContain(`<dd id="trace"><code>${traceId}</code> span <code>${spanId}</code></dd>`)
    const untraced = await (await fetch(`${readOnly}/jobs/${ids.deadReport}`)).text()
    expect(untraced).toContain(`<dd id="trace">–</dd>`)
  })
})

describe("dashboard Host and Origin checks (DNS rebinding)", () => {
  const portOf = (base: string) => new URL(base).port

  it("answers only to its own Host (localhost, 127.0.0.1, [::1] with its port): a foreign Host is 421 on every route, reads and writes", async () => {
    const port = portOf(writable)
    const evil = { host: `evil.example:${port}` }
    const overview = await raw(writable, "GET", "/", evil)
    expect(overview.status).toBe(421)
    expect(overview.body).not.toContain("emails")
    const job = await raw(writable, "GET", `/jobs/${ids.deadEmail}`, evil)
    expect(job.status).toBe(421)
    expect(job.body).not.toContain("SMTP said")
    expect(job.body).toContain("this dashboard answers to its own addresses only")
    expect((await raw(writable, "GET", "/nowhere", evil)).status).toBe(421)
    // A rebinding page is same-origin from the browser's view: Sec-Fetch-Site and Origin agree with its Host.
    const cancel = await raw(writable, "POST", `/jobs/${ids.pending[0]}/cancel`, {
      ...evil,
      "sec-fetch-site": "same-origin",
      origin: `http://evil.example:${port}`
    })
    expect(cancel.status).toBe(421)
    expect((await raw(writable, "GET", `/jobs/${ids.pending[0]}`, { host: `127.0.0.1:${port}` })).status).toBe(200)
    for (const host of [`127.0.0.1:${port}`, `localhost:${port}`, `LocalHost:${port}`, `[::1]:${port}`]) {
      expect((await raw(writable, "GET", `/jobs/${ids.deadEmail}`, { host })).status, host).toBe(200)
    }
    for (const host of [`localhost:${Number(port) === 1 ? 2 : 1}`, "localhost", `127.0.0.1.evil.example:${port}`, `dash.example`]) {
      expect((await raw(writable, "GET", "/", { host })).status, host).toBe(421)
    }
    // No Host at all: node's HTTP server itself answers 400 to such an HTTP/1.1 request.
    expect([400, 421]).toContain((await raw(writable, "GET", "/", {}, { noHost: true })).status)
  })

  it("accepts writes only with a same-origin Sec-Fetch-Site and an Origin of its own; a POST with neither header is refused", async () => {
    const port = portOf(writable)
    const host = `127.0.0.1:${port}`
    const requeuePending = (headers: Record<string, string>) =>
      raw(writable, "POST", `/jobs/${ids.pending[0]}/requeue`, { host, ...headers })
    // Accepted (a pending job is not requeued: 409, nothing changes).
    expect((await requeuePending({ "sec-fetch-site": "same-origin", origin: `http://${host}` })).status).toBe(409)
    expect((await requeuePending({ "sec-fetch-site": "same-origin", origin: `http://localhost:${port}` })).status).toBe(409)
    expect((await requeuePending({ "sec-fetch-site": "same-origin" })).status).toBe(409)
    expect((await requeuePending({ origin: `http://${host}` })).status).toBe(409)
    // Refused.
    expect((await requeuePending({ "sec-fetch-site": "same-origin", origin: `http://evil.example:${port}` })).status).toBe(403)
    expect((await requeuePending({ "sec-fetch-site": "same-origin", origin: "null" })).status).toBe(403)
    expect((await requeuePending({ origin: `http://localhost:${Number(port) === 1 ? 2 : 1}` })).status).toBe(403)
    expect((await requeuePending({ "sec-fetch-site": "same-site", origin: `http://${host}` })).status).toBe(403)
    const bare = await requeuePending({})
    expect(bare.status).toBe(403)
    expect(bare.body).toContain("neither Sec-Fetch-Site nor Origin")
  })

  it("--allow-host adds a Host (and its http or https Origin) exactly as given, e.g. a proxy's name or a LAN address", async () => {
    const proxied = await startDashboard(path.join(dir, "dash.db"), ["--allow-writes", "--allow-host", "Dash.Example", "--allow-host", "192.168.1.5:8080"])
    const port = portOf(proxied)
    expect((await raw(proxied, "GET", "/", { host: "dash.example" })).status).toBe(200)
    expect((await raw(proxied, "GET", "/", { host: "192.168.1.5:8080" })).status).toBe(200)
    expect((await raw(proxied, "GET", "/", { host: `localhost:${port}` })).status).toBe(200)
    expect((await raw(proxied, "GET", "/", { host: `dash.example:${port}` })).status).toBe(421)
    expect((await raw(proxied, "GET", "/", { host: "evil.example" })).status).toBe(421)
    const requeuePending = (headers: Record<string, string>) =>
      raw(proxied, "POST", `/jobs/${ids.pending[0]}/requeue`, { "sec-fetch-site": "same-origin", ...headers })
    // Behind a TLS proxy that forwards its own upstream Host, the Origin is the public https one.
    expect((await requeuePending({ host: `127.0.0.1:${port}`, origin: "https://dash.example" })).status).toBe(409)
    expect((await requeuePending({ host: "dash.example", origin: "http://dash.example" })).status).toBe(409)
    expect((await requeuePending({ host: "dash.example", origin: "https://evil.example" })).status).toBe(403)
    const bad = await cli(["dashboard", "--db", path.join(dir, "dash.db"), "--allow-host", "http://dash.example/"])
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain("invalid --allow-host")
  })

  it("the allowed Hosts carry the dashboard's port, its --host (IPv6 in brackets), and the bare names on port 80", () => {
    const lan = allowedHosts({ port: 4680, bindHost: "192.168.1.5", extra: [] })
    expect([...lan].sort()).toEqual(["127.0.0.1:4680", "192.168.1.5:4680", "[::1]:4680", "localhost:4680"])
    expect(allowedHosts({ port: 4680, bindHost: "::", extra: [] }).has("[::]:4680")).toBe(true)
    const eighty = allowedHosts({ port: 80, bindHost: "127.0.0.1", extra: ["Proxy.Example:443"] })
    expect(["localhost", "localhost:80", "127.0.0.1", "[::1]", "proxy.example:443"].every((h) => eighty.has(h))).toBe(true)
  })
})

describe("dashboard in headless Chromium", () => {
  it("loads, navigates, requeues a dead job and shows it pending, with hostile texts shown as text", async () => {
    expect(fs.existsSync(chromiumPath), "Debian's chromium package (.ci/run installs it)").toBe(true)
    context = await chromium.launchPersistentContext(path.join(dir, "profile"), {
      executablePath: chromiumPath,
      headless: true,
      args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
      viewport: { width: 1200, height: 820 }
    })
    const page: Page = context.pages()[0] ?? (await context.newPage())
    const dialogs: Array<string> = []
    page.on("dialog", (dialog) => {
      dialogs.push(dialog.message())
      void dialog.dismiss()
    })
    const noInjectedMarkup = async () => {
      expect(await page.locator("img").count()).toBe(0)
      expect(await page.locator("script").count()).toBe(0)
    }

    await page.goto(`${writable}/`)
    await expect.poll(() => page.locator("#queues tbody tr").count()).toBe(2)
    expect(await page.locator("#queues").innerText()).toMatch(/emails\s+2\s+\S+\s+1\s+1\s+1/)

    await page.getByRole("link", { name: "Dead jobs" }).click()
    const deadTable = page.locator("#dead")
    expect(await deadTable.innerText()).toContain(`SMTP said ${hostile}`)
    expect(await deadTable.innerText()).toContain("report generator crashed")
    await noInjectedMarkup()

    await deadTable.getByRole("link", { name: String(ids.deadEmail), exact: true }).click()
    await expect.poll(() => page.locator("#job-state").innerText()).toBe("dead")
    expect(await page.locator("#last-error").innerText()).toBe(`SMTP said ${hostile}`)
    expect(await page.locator("#payload").innerText()).toContain(`"html": "</script><b>x</b>"`)
    await noInjectedMarkup()

    await page.getByRole("button", { name: "Requeue" }).click()
    await expect.poll(() => page.locator("#job-state").innerText()).toBe("pending")
    expect(await page.locator(".notice").innerText()).toContain("Job requeued")
    expect(page.url()).toBe(`${writable}/jobs/${ids.deadEmail}?done=requeued`)

    await page.getByRole("link", { name: "emails" }).first().click()
    await page.getByRole("link", { name: "pending", exact: true }).click()
    expect(await page.locator("#jobs").innerText()).toContain(hostile)
    expect(await page.locator("#jobs tbody tr").count()).toBe(3)

    await page.getByRole("link", { name: "Schedules" }).click()
    expect(await page.locator("#schedules").innerText()).toMatch(/nightly-digest\s+@every 1d\s+emails/)
    await page.getByRole("link", { name: "Locks" }).click()
    expect(await page.locator("#locks").innerText()).toContain(`owner ${hostile}`)
    await noInjectedMarkup()

    await page.getByRole("link", { name: "Queues" }).click()
    await expect.poll(async () => {
      await page.reload()
      return page.locator("svg polyline").count()
    }, { timeout: 30_000 }).toBe(2)
    expect(await page.locator("#queues").innerText()).toMatch(/emails\s+3\s+\S+\s+1\s+1\s+0/)
    const shot = await page.screenshot({ fullPage: true })
    expect(shot.subarray(1, 4).toString()).toBe("PNG")
    // `ALKSTORE_SCREENSHOT=docs/dashboard.png npx vitest run test/dashboard.test.ts` refreshes the docs' picture.
    if (process.env.ALKSTORE_SCREENSHOT) fs.writeFileSync(process.env.ALKSTORE_SCREENSHOT, shot)
    expect(dialogs).toEqual([])
  }, 180_000)
})
