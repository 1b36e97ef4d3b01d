import type { Reading } from "../cli/plain.js"
import { html, Html } from "./html.js"

const colours = ["#2f6fde", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#0b7285", "#e67700", "#5c940d"]

/** How many queues the chart draws: the first ones in the store's order (by name). */
export const chartedQueues = colours.length

/**
 * An SVG line chart of each queue's due depth over the readings (numbers
 * only in the markup; queue names go through the escaping template).
 */
export const depthChart = (readings: ReadonlyArray<Reading>, queues: ReadonlyArray<string>): Html => {
  const width = 760
  const height = 180
  const pad = { left: 44, right: 10, top: 10, bottom: 22 }
  if (readings.length < 2 || queues.length === 0) {
    return html`<p class="muted">The chart fills in as the dashboard samples the store (${readings.length} reading${readings.length === 1 ? "" : "s"} so far).</p>`
  }
  const shown = queues.slice(0, chartedQueues)
  const first = readings[0]!.at
  const last = readings[readings.length - 1]!.at
  const span = Math.max(1, last - first)
  const depth = (r: Reading, q: string) => r.queues.find((x) => x.name === q)?.pending ?? 0
  // A loop, not Math.max(...): one argument per point would grow with the history.
  let max = 1
  for (const r of readings) for (const q of shown) max = Math.max(max, depth(r, q))
  const x = (at: number) => (pad.left + ((at - first) / span) * (width - pad.left - pad.right)).toFixed(1)
  const y = (v: number) => (pad.top + (1 - v / max) * (height - pad.top - pad.bottom)).toFixed(1)
  const lines = shown.map((q, i) =>
    new Html(`<polyline fill="none" stroke="${colours[i]}" stroke-width="2" points="${readings.map((r) => `${x(r.at)},${y(depth(r, q))}`).join(" ")}"/>`)
  )
  const axis = new Html(
    `<line x1="${pad.left}" y1="${height - pad.bottom}" x2="${width - pad.right}" y2="${height - pad.bottom}" stroke="#999"/>` +
      `<line x1="${pad.left}" y1="${pad.top}" x2="${pad.left}" y2="${height - pad.bottom}" stroke="#999"/>` +
      `<text x="${pad.left - 6}" y="${pad.top + 10}" text-anchor="end" font-size="11">${max}</text>` +
      `<text x="${pad.left - 6}" y="${height - pad.bottom}" text-anchor="end" font-size="11">0</text>` +
      `<text x="${pad.left}" y="${height - 6}" font-size="11">${new Date(first).toISOString().slice(11, 19)}</text>` +
      `<text x="${width - pad.right}" y="${height - 6}" text-anchor="end" font-size="11">${new Date(last).toISOString().slice(11, 19)} UTC</text>`
  )
  const legend = shown.map((q, i) => html`<span style="margin-right:14px"><span style="color:${new Html(colours[i]!)}">■</span> ${q}</span>`)
  return html`<svg role="img" aria-label="pending jobs per queue over time" viewBox="0 0 ${width} ${height}" width="100%" style="max-width:${width}px;background:#fff">${axis}${lines}</svg>
<div class="muted">${legend}${queues.length > shown.length ? ` (+${queues.length - shown.length} more queues not drawn)` : ""}</div>`
}
