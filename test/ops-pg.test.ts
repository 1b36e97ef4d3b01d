/**
 * The operator tools on PostgreSQL (issue 12: everything works on both
 * engines): the CLI's inspection and repair commands, `watch --json` (its
 * terminal view is checked under tmux in test/cli-watch.test.ts) and the dashboard, as
 * child processes over a `postgres://` URL naming a fresh database seeded
 * like the SQLite file of test/cli.test.ts and test/dashboard.test.ts.
 * The pages are the engine-free layer's; Chromium drives them in
 * test/dashboard.test.ts, so HTTP is enough here.
 */
import type { ChildProcess } from "node:child_process"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { pgDatabaseUrl } from "./contract/harness.js"
import { cli, dashboard, hostile, seed, type Seeded, watchJsonReadings } from "./ops-support.js"

const children: Array<ChildProcess> = []
afterAll(() => {
  for (const child of children) child.kill("SIGTERM")
})

let url = ""
let ids: Seeded

const json = async (args: ReadonlyArray<string>) => {
  const ran = await cli([...args, "--db", url, "--json"])
  expect(ran.stderr).toBe("")
  expect(ran.code).toBe(0)
  return JSON.parse(ran.stdout)
}

beforeAll(async () => {
  url = await pgDatabaseUrl()
  ids = await seed(url)
}, 120_000)

describe("operator tools on PostgreSQL", () => {
  it("the CLI reads the store: stats, jobs, job (with its trace context), dead, schedules, locks", async () => {
    const stats = await json(["stats"])
    expect(stats.queues.map((q: { name: string }) => q.name)).toEqual(["emails", "reports"])
    expect(stats.queues[0]).toMatchObject({ pending: 2, scheduled: 1, claimed: 1, dead: 1 })
    expect(stats.totals).toEqual({ lastJobId: 6, live: 6 })
    const table = await cli(["stats", "--db", url])
    expect(table.stdout).toMatch(/emails\s+2\s+1\s+1\s+1/)

    expect((await json(["jobs", "--queue", "emails", "--state", "pending"])).map((j: { id: number }) => j.id))
      .toEqual([...ids.pending].reverse())
    const job = await json(["job", String(ids.deadEmail)])
    expect(job).toMatchObject({ id: ids.deadEmail, queue: "emails", state: "dead", lastError: `SMTP said ${hostile}` })
    expect(job.payload.to).toBe(hostile)
    const { spanId, traceId } = ids.deadEmailTrace
    expect(job.traceContext).toEqual({ traceparent: `00-${traceId}-${spanId}-01`, traceId, spanId, sampled: true })
    expect((await cli(["job", String(ids.deadEmail), "--db", url])).stdout).toMatch(new RegExp(`trace id\\s+${traceId}\\n`))

    const dead = await json(["dead", "--queue", "reports"])
    expect(dead.map((j: { id: number; lastError: string }) => [j.id, j.lastError])).toEqual([[ids.deadReport, "report generator crashed"]])
    const [nightly] = await json(["schedules"])
    expect(nightly).toMatchObject({ name: "nightly-digest", spec: "@every 1d", queue: "emails", payload: { digest: true } })
    const locks = await json(["locks"])
    expect(locks.map((l: { name: string; owner: string; held: boolean; token: number }) => [l.name, l.owner, l.held, l.token])).toEqual([
      [`lock ${hostile}`, `owner ${hostile}`, true, 1],
      ["reindex", "host-a:1234", true, 1]
    ])
  })

  it("watch --json reads the store on a schedule (rates from the second reading) until SIGINT, exit 0", async () => {
    const { code, readings: [first, second] } = await watchJsonReadings(url, children)
    expect(code).toBe(0)
    expect(first.rates).toBeNull()
    expect(second.rates).toEqual({ enqueuedPerSec: 0, completedPerSec: 0 })
    expect(second.queues.map((q: { name: string }) => q.name)).toEqual(["emails", "reports"])
    expect(second.totals.live).toBe(6)
  })

  it("the dashboard shows the store, refuses injection, and requeues a dead job, which then reads pending", async () => {
    const base = await dashboard(url, ["--allow-writes"], children)
    const page = async (path: string) => {
      const response = await fetch(`${base}${path}`)
      expect(response.status).toBe(200)
      return response.text()
    }
    const home = await page("/")
    expect(home).toContain(`href="/queue?name=emails"`)
    expect(await page("/schedules")).toContain("nightly-digest")
    const deadPage = await page("/dead")
    expect(deadPage).toContain("report generator crashed")
    expect(deadPage).not.toContain("<img")
    expect(deadPage).toContain("&lt;img src=x onerror=alert(1)&gt;")
    const jobPage = await page(`/jobs/${ids.deadEmail}`)
    expect(jobPage).toContain("state-dead")
    expect(jobPage).toContain(`<code>${ids.deadEmailTrace.traceId}</code>`)
    expect(await page("/locks")).toContain("host-a:1234")

    // As the dashboard's own page posts (a POST with neither Sec-Fetch-Site nor Origin is refused).
    const requeued = await fetch(`${base}/jobs/${ids.deadReport}/requeue`, {
      method: "POST",
      redirect: "manual",
      headers: { "sec-fetch-site": "same-origin" }
    })
    expect([requeued.status, requeued.headers.get("location")]).toEqual([303, `/jobs/${ids.deadReport}?done=requeued`])
    expect(await page(`/jobs/${ids.deadReport}?done=requeued`)).toContain("state-pending")
    expect((await json(["job", String(ids.deadReport)])).state).toBe("pending")
  })

  it("the CLI repairs: requeue, cancel and purge", async () => {
    const requeued = await cli(["requeue", String(ids.deadEmail), "--db", url])
    expect(requeued.code).toBe(0)
    expect(requeued.stdout).toContain(`requeued job ${ids.deadEmail} (queue emails): pending`)
    expect((await json(["job", String(ids.deadEmail)])).attempts).toBe(0)
    expect((await cli(["requeue", String(ids.deadEmail), "--db", url])).code).toBe(1)
    expect((await cli(["cancel", String(ids.pending[0]), "--db", url])).code).toBe(0)
    expect((await cli(["job", String(ids.pending[0]), "--db", url])).code).toBe(1)
    expect(await json(["purge", "--queue", "emails", "--older-than", "1h"])).toEqual({ queue: "emails", purged: 0 })
  })
})
