/**
 * HTML built from templates whose every interpolation is escaped: payloads,
 * error texts, queue and lock names are anybody's strings. Only `Html`
 * values (built here) pass through unescaped, so markup cannot come from
 * data by accident.
 */
export class Html {
  constructor(readonly text: string) {}
  toString() {
    return this.text
  }
}

const entities: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" }

export const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => entities[c]!)

type Part = Html | string | number | boolean | null | undefined | ReadonlyArray<Part>

const render = (part: Part): string =>
  part instanceof Html
    ? part.text
    : Array.isArray(part)
    ? part.map(render).join("")
    : part === null || part === undefined || part === false
    ? ""
    : escapeHtml(String(part))

/** `html\`<td>${value}</td>\``: values escaped, nested `Html` kept. */
export const html = (strings: TemplateStringsArray, ...values: ReadonlyArray<Part>): Html =>
  new Html(strings.reduce((out, s, i) => out + s + (i < values.length ? render(values[i] as Part) : ""), ""))

/** A path segment or a query value (queue names may hold `/`, `?`, `#`, `&`…). */
export const segment = (value: string | number) => encodeURIComponent(String(value))

/**
 * A queue's page. The name goes in the query, not the path: a browser
 * resolves a `.` or `..` segment (`%2e%2e` too) before sending the request,
 * and both are valid queue names.
 */
export const queueHref = (queue: string, state?: string) =>
  `/queue?name=${segment(queue)}${state === undefined ? "" : `&state=${segment(state)}`}`

const style = `
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d2330;background:#f6f7f9}
header{background:#1d2330;color:#fff;padding:10px 20px;display:flex;gap:20px;align-items:baseline}
header a{color:#cfe0ff;text-decoration:none}header strong{font-size:16px;margin-right:10px}
main{padding:16px 20px;max-width:1200px}h1{font-size:20px;margin:6px 0 14px}h2{font-size:16px;margin:22px 0 8px}
table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 2px #0001}
th,td{text-align:left;padding:6px 10px;border-bottom:1px solid #e6e8ec;vertical-align:top}
th{background:#eef0f4;font-weight:600;font-size:12px;text-transform:uppercase;letter-spacing:.03em}
td.n{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#fff;border:1px solid #e1e4ea;padding:10px;white-space:pre-wrap;word-break:break-all;margin:0}
.state{display:inline-block;padding:1px 7px;border-radius:9px;font-size:12px;background:#e3e7ee}
.state-pending{background:#dcebff}.state-scheduled{background:#ece3ff}.state-claimed{background:#fff1cc}.state-dead{background:#ffd9d9}
.notice{background:#e3f6e8;border:1px solid #b5e2c1;padding:8px 12px;margin-bottom:12px}
.error{background:#ffe8e8;border:1px solid #f3b9b9;padding:8px 12px;margin-bottom:12px}
.muted{color:#69707d}.tabs a{margin-right:12px}.mode{margin-left:auto;font-size:12px;color:#cfd5df}
form.inline{display:inline}button{font:inherit;padding:3px 10px;cursor:pointer}
dl{display:grid;grid-template-columns:max-content 1fr;gap:6px 16px;background:#fff;padding:12px;margin:0}dt{color:#69707d}dd{margin:0}
.rates{display:flex;gap:26px;margin:4px 0 12px}.rates b{font-size:18px}
`

export interface Page {
  readonly title: string
  readonly body: Html
  readonly writes: boolean
  /** Seconds between automatic reloads (the overview only). */
  readonly refresh?: number
}

export const layout = (page: Page): string =>
  html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
${page.refresh === undefined ? "" : new Html(`<meta http-equiv="refresh" content="${page.refresh}">`)}
<title>${page.title} · alkstore</title><style>${new Html(style)}</style></head>
<body><header><strong>alkstore</strong><a href="/">Queues</a><a href="/dead">Dead jobs</a><a href="/schedules">Schedules</a><a href="/locks">Locks</a>
<span class="mode">${page.writes ? "writes allowed" : "read-only"}</span></header>
<main>${page.body}</main></body></html>`.text
