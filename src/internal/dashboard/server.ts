import * as HttpRouter from "@effect/platform/HttpRouter"
import * as HttpServerRequest from "@effect/platform/HttpServerRequest"
import * as HttpServerResponse from "@effect/platform/HttpServerResponse"
import * as UrlParams from "@effect/platform/UrlParams"
import { Clock, Data, Effect, Option } from "effect"
import * as Admin from "../../Admin.js"
import { parseAge } from "../cli/common.js"
import { isWellFormed, maxTextBytes } from "../names.js"
import type { History } from "./history.js"
import { type Html, layout, queueHref, segment } from "./html.js"
import * as Pages from "./pages.js"

/**
 * The dashboard's routes. Every request is validated (its Host first, then
 * ids, queue names, states, limits, notices) before the store is read; writes
 * (requeue, cancel, purge) are POSTs that answer 403 unless the dashboard was
 * started with them allowed, and only from its own pages (same origin).
 */

class HttpFailure extends Data.TaggedError("HttpFailure")<{ readonly status: number; readonly reason: string }> {}

const bad = (reason: string) => new HttpFailure({ status: 400, reason })

export interface DashboardOptions {
  readonly writes: boolean
  readonly history: History
  /** The `Host` values this dashboard answers to (see {@link allowedHosts}); any other is a 421. */
  readonly hosts: ReadonlySet<string>
}

/** How a host name or address is written in a `Host` header: lower case, an IPv6 address in brackets. */
const hostName = (host: string) => {
  const name = host.trim().toLowerCase()
  return name.includes(":") && !name.startsWith("[") ? `[${name}]` : name
}

/**
 * The `Host` values the dashboard answers to: `localhost`, `127.0.0.1`,
 * `[::1]` and the address it is bound to (`--host`), each with its port
 * (also without it on port 80, as browsers send it), and every `--allow-host`
 * value exactly as given (`name:port`, or a bare name for a proxy on a
 * default port). Anything else is refused: a DNS-rebinding page (a foreign
 * name resolving to this machine) sends its own name as Host.
 */
export const allowedHosts = (options: {
  readonly port: number
  readonly bindHost: string
  readonly extra: ReadonlyArray<string>
}): ReadonlySet<string> => {
  const hosts = new Set<string>()
  for (const name of ["localhost", "127.0.0.1", "[::1]", hostName(options.bindHost)]) {
    hosts.add(`${name}:${options.port}`)
    if (options.port === 80) hosts.add(name)
  }
  for (const value of options.extra) hosts.add(value.trim().toLowerCase())
  return hosts
}

/** An `Origin` is this dashboard's own when it is `http://` or `https://` (a TLS proxy) and an allowed Host. */
const originAllowed = (hosts: ReadonlySet<string>, origin: string) => {
  const match = /^https?:\/\/([^/]+)$/i.exec(origin)
  return match !== null && hosts.has(match[1]!.toLowerCase())
}

const securityHeaders = {
  // No script at all: the pages are server-rendered HTML and forms.
  "content-security-policy":
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
  "x-content-type-options": "nosniff",
  // Not no-referrer: under it a browser sends `Origin: null` with the forms' POSTs.
  "referrer-policy": "same-origin",
  "x-frame-options": "DENY",
  "cache-control": "no-store"
}

const respond = (status: number, body: string) =>
  HttpServerResponse.text(body, { status, contentType: "text/html; charset=utf-8", headers: securityHeaders })

export const parseId = (raw: string | undefined): Effect.Effect<number, HttpFailure> =>
  raw !== undefined && /^[1-9][0-9]{0,15}$/.test(raw) && Number.isSafeInteger(Number(raw))
    ? Effect.succeed(Number(raw))
    : Effect.fail(bad("a job id is a whole number of at least 1"))

export const parseQueue = (raw: string | undefined): Effect.Effect<string, HttpFailure> =>
  raw === undefined || raw.length === 0
    ? Effect.fail(bad("a queue name must not be empty"))
    : raw.length > 1000
    ? Effect.fail(bad("a queue name is at most 1000 characters here"))
    : !isWellFormed(raw)
    ? Effect.fail(bad("a queue name must be well-formed Unicode"))
    : raw.includes("\u0000")
    ? Effect.fail(bad("a queue name must not contain NUL"))
    : Effect.succeed(raw)

type Param = "state" | "limit" | "queue" | "name" | "done"

/**
 * The query string, each parameter at most once and one the route takes.
 * Read from the raw URL: `new URL` throws on a request line such as `//`
 * (a host-less scheme-relative URL), which would escape the page as a defect.
 */
const query = (known: ReadonlyArray<Param>) =>
  Effect.gen(function*() {
    const request = yield* HttpServerRequest.HttpServerRequest
    const at = request.url.indexOf("?")
    const seen = new Map<string, string>()
    for (const [key, value] of new URLSearchParams(at === -1 ? "" : request.url.slice(at + 1))) {
      if (!(known as ReadonlyArray<string>).includes(key)) return yield* bad(`unknown parameter ${JSON.stringify(key)}`)
      if (seen.has(key)) return yield* bad(`parameter ${key} given twice`)
      seen.set(key, value)
    }
    const state = seen.get("state")
    if (state !== undefined && !Admin.jobStates.includes(state as Admin.JobState)) {
      return yield* bad("state must be pending, scheduled, claimed or dead")
    }
    const limitText = seen.get("limit")
    const limit = limitText === undefined ? 100 : /^[0-9]{1,4}$/.test(limitText) ? Number(limitText) : NaN
    if (!(limit >= 1 && limit <= 1000)) return yield* bad("limit must be a whole number from 1 to 1000")
    const done = seen.get("done")
    if (done !== undefined && !(done in Pages.notices)) return yield* bad("unknown notice")
    const queue = seen.get("queue")
    return {
      state: state as Admin.JobState | undefined,
      limit,
      done: done as Pages.Notice | undefined,
      queue: queue === undefined ? undefined : yield* parseQueue(queue),
      /** `name` as given (`/queue?name=…`), validated by the route that takes it. */
      name: seen.get("name")
    }
  })

type Query = Effect.Effect.Success<ReturnType<typeof query>>

/** A route's page, its failures as error pages (storage errors are 500s and logged). */
const page = <E extends { readonly _tag: string }, R>(
  writes: boolean,
  title: string,
  body: Effect.Effect<{ readonly title?: string; readonly body: Html; readonly refresh?: number }, E, R>
) =>
  body.pipe(
    Effect.map((p) => respond(200, layout({ writes, title: p.title ?? title, body: p.body, ...(p.refresh === undefined ? {} : { refresh: p.refresh }) }))),
    Effect.catchAll((error) => failure(writes, error))
  )

const failure = (writes: boolean, error: { readonly _tag: string }) => {
  if (error instanceof HttpFailure) {
    return Effect.succeed(respond(error.status, layout({ writes, title: String(error.status), body: Pages.errorPage(error.status, error.reason) })))
  }
  if (["InvalidOptions", "InvalidName", "UsageError"].includes(error._tag)) {
    const reason = (error as unknown as Error).message
    return Effect.succeed(respond(400, layout({ writes, title: "400", body: Pages.errorPage(400, reason) })))
  }
  return Effect.as(
    Effect.logError("dashboard: request failed", error),
    respond(500, layout({ writes, title: "500", body: Pages.errorPage(500, "the store failed to answer; see the dashboard's log") }))
  )
}

/**
 * A write: allowed by the flag, and only from this dashboard's own pages. The
 * request's Host was checked already (every route's is). Browsers send
 * Sec-Fetch-Site (a page cannot forge it) and Origin with every POST: the
 * first must say same-origin, the second name an allowed Host. A POST with
 * neither comes from no browser (curl, a script): refused too, the CLI is the
 * tool for scripted repairs.
 */
const guardWrite = (writes: boolean, hosts: ReadonlySet<string>) =>
  Effect.gen(function*() {
    if (!writes) return yield* new HttpFailure({ status: 403, reason: "this dashboard is read-only (start it with --allow-writes)" })
    const request = yield* HttpServerRequest.HttpServerRequest
    const site = request.headers["sec-fetch-site"]
    const origin = request.headers["origin"]
    if (site === undefined && origin === undefined) {
      return yield* new HttpFailure({
        status: 403,
        reason: "writes are accepted from this dashboard's own pages only (this request sent neither Sec-Fetch-Site nor Origin; for scripts, use the alkstore CLI)"
      })
    }
    if ((site !== undefined && site !== "same-origin") || (origin !== undefined && !originAllowed(hosts, origin))) {
      return yield* new HttpFailure({ status: 403, reason: "writes are accepted from this dashboard's own pages only" })
    }
  })

const redirect = (location: string) => HttpServerResponse.empty({ status: 303, headers: { ...securityHeaders, location } })

const outcome = (result: Admin.RepairOutcome, id: number) =>
  result._tag === "NotFound"
    ? Effect.fail(new HttpFailure({ status: 404, reason: `no job ${id}` }))
    : result._tag === "Refused"
    ? Effect.fail(new HttpFailure({ status: 409, reason: result.reason }))
    : Effect.succeed(result.job)

/**
 * The router's longest path parameter, decoded: a queue name in an old
 * `/queues/<name>` link is up to `maxTextBytes` UTF-8 bytes, so at most as
 * many UTF-16 units (find-my-way's default of 100 answered such a queue 404).
 */
const routerConfig = { maxParamLength: maxTextBytes }

/** The dashboard as an HTTP app: its routes, behind the Host check. */
export const makeApp = (options: DashboardOptions) => {
  const routes = HttpRouter.withRouterConfig(makeRoutes(options), routerConfig)
  return Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
    const host = request.headers["host"]
    return host !== undefined && options.hosts.has(host.toLowerCase())
      ? routes
      : Effect.succeed(respond(
        421,
        layout({
          writes: options.writes,
          title: "421",
          body: Pages.errorPage(
            421,
            "this dashboard answers to its own addresses only (localhost, 127.0.0.1, [::1] or its --host, with its port); start it with --allow-host to add a name it is reached by"
          )
        })
      ))
  }).pipe(
    // A defect (a bug) is still answered as a page with the security headers, and logged, not as the server's bare 500.
    Effect.catchAllDefect((defect) =>
      Effect.as(
        Effect.logError("dashboard: request failed with a defect", defect),
        respond(500, layout({ writes: options.writes, title: "500", body: Pages.errorPage(500, "the dashboard failed; see its log") }))
      )
    )
  )
}

/** A queue's page, for the name however the URL carried it. */
const queueRoute = (
  writes: boolean,
  known: ReadonlyArray<Param>,
  nameOf: (q: Query) => Effect.Effect<string, HttpFailure, HttpRouter.RouteContext>
) =>
  page(writes, "Queue", Effect.gen(function*() {
    const q = yield* query(known)
    const name = yield* nameOf(q)
    const admin = yield* Admin.Admin
    const jobs = yield* admin.jobs({ queue: name, limit: q.limit, ...(q.state === undefined ? {} : { state: q.state }) })
    const summary = (yield* admin.queues).find((s) => s.name === name)
    return { title: name, body: Pages.queuePage(name, q.state, jobs, summary, yield* Clock.currentTimeMillis, q.done) }
  }))

/** Purges a queue's dead jobs (the form's `older_than`, empty for all), then shows its dead jobs. */
const purgeRoute = (
  { hosts, writes }: DashboardOptions,
  queue: Effect.Effect<string, HttpFailure, HttpServerRequest.HttpServerRequest | HttpRouter.RouteContext>
) =>
  Effect.gen(function*() {
    yield* guardWrite(writes, hosts)
    const name = yield* queue
    const request = yield* HttpServerRequest.HttpServerRequest
    const form = yield* Effect.mapError(request.urlParamsBody, () => bad("the form could not be read"))
    const olderThan = Option.getOrElse(UrlParams.getFirst(form, "older_than"), () => "").trim()
    const age = olderThan === "" ? undefined : yield* parseAge("older_than", olderThan)
    yield* Effect.flatMap(Admin.Admin, (admin) => admin.purgeDead(name, age))
    return redirect(`/dead?queue=${segment(name)}&done=purged`)
  }).pipe(Effect.catchAll((error) => failure(writes, error)))

const makeRoutes = (options: DashboardOptions) => {
  const { history, hosts, writes } = options
  const pathName = Effect.flatMap(HttpRouter.params, (p) => parseQueue(p["name"]))
  return HttpRouter.empty.pipe(
    HttpRouter.get("/", page(writes, "Queues", Effect.gen(function*() {
      yield* query([])
      const admin = yield* Admin.Admin
      const live = yield* admin.queues
      return { body: Pages.overviewPage(yield* history.readings, live, yield* Clock.currentTimeMillis), refresh: 5 }
    }))),
    // A queue's name as a query parameter: every valid name works, `.` and `..` included (a browser resolves
    // those as path segments before it sends the request, so `/queues/..` would be `/`).
    HttpRouter.get("/queue", queueRoute(writes, ["name", "state", "limit", "done"], (q) => parseQueue(q.name))),
    // The earlier form of a queue's address, for links made before.
    HttpRouter.get("/queues/:name", queueRoute(writes, ["state", "limit", "done"], () => pathName)),
    HttpRouter.get("/jobs/:id", page(writes, "Job", Effect.gen(function*() {
      const q = yield* query(["done"])
      const id = yield* Effect.flatMap(HttpRouter.params, (p) => parseId(p["id"]))
      const job = yield* Effect.flatMap(Admin.Admin, (admin) => admin.job(id))
      if (Option.isNone(job)) return yield* new HttpFailure({ status: 404, reason: `no job ${id} (acked and cancelled jobs are deleted)` })
      return { title: `Job ${id}`, body: Pages.jobPage(job.value, yield* Clock.currentTimeMillis, writes, q.done) }
    }))),
    HttpRouter.get("/dead", page(writes, "Dead jobs", Effect.gen(function*() {
      const q = yield* query(["queue", "limit", "done"])
      const jobs = yield* Effect.flatMap(Admin.Admin, (admin) =>
        admin.jobs({ state: "dead", limit: q.limit, ...(q.queue === undefined ? {} : { queue: q.queue }) }))
      return { body: Pages.deadPage(q.queue, jobs, yield* Clock.currentTimeMillis, writes, q.done) }
    }))),
    HttpRouter.get("/schedules", page(writes, "Schedules", Effect.gen(function*() {
      yield* query([])
      const schedules = yield* Effect.flatMap(Admin.Admin, (admin) => admin.schedules)
      return { body: Pages.schedulesPage(schedules, yield* Clock.currentTimeMillis) }
    }))),
    HttpRouter.get("/locks", page(writes, "Locks", Effect.gen(function*() {
      yield* query([])
      const locks = yield* Effect.flatMap(Admin.Admin, (admin) => admin.locks)
      return { body: Pages.locksPage(locks, yield* Clock.currentTimeMillis) }
    }))),
    HttpRouter.post("/jobs/:id/requeue", Effect.gen(function*() {
      yield* guardWrite(writes, hosts)
      const id = yield* Effect.flatMap(HttpRouter.params, (p) => parseId(p["id"]))
      yield* Effect.flatMap(Effect.flatMap(Admin.Admin, (admin) => admin.requeue(id)), (r) => outcome(r, id))
      return redirect(`/jobs/${id}?done=requeued`)
    }).pipe(Effect.catchAll((error) => failure(writes, error)))),
    HttpRouter.post("/jobs/:id/cancel", Effect.gen(function*() {
      yield* guardWrite(writes, hosts)
      const id = yield* Effect.flatMap(HttpRouter.params, (p) => parseId(p["id"]))
      const job = yield* Effect.flatMap(Effect.flatMap(Admin.Admin, (admin) => admin.cancel(id)), (r) => outcome(r, id))
      return redirect(`${queueHref(job.queue)}&done=cancelled`)
    }).pipe(Effect.catchAll((error) => failure(writes, error)))),
    // The queue in the form's action, percent-encoded as for `/queue` (not a hidden field: a form's
    // values have their line breaks rewritten as CRLF, and a name may hold a bare LF).
    HttpRouter.post("/purge", purgeRoute(options, Effect.flatMap(query(["queue"]), (q) => parseQueue(q.queue)))),
    HttpRouter.post("/queues/:name/purge", purgeRoute(options, pathName)),
    Effect.catchTag("RouteNotFound", () =>
      Effect.succeed(respond(404, layout({ writes, title: "404", body: Pages.errorPage(404, "no such page (or method)") }))))
  )
}
