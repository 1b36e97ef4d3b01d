/**
 * Human tables for the terminal: columns padded to their widest cell,
 * numbers right-aligned. Control characters in cells (payloads and error
 * texts are anybody's strings) are shown escaped so they cannot move the
 * cursor or recolour the terminal.
 */
export const sanitize = (text: string): string =>
  // eslint-disable-next-line no-control-regex
  text.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => (c === "\n" ? "\\n" : c === "\t" ? "\\t" : `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`))

const width = (text: string) => [...text].length

/**
 * The widest of `texts`, at least `min`. A loop: `Math.max(...texts)` passes
 * one argument per row and overflows the stack past ~120 000 rows.
 */
const widest = (min: number, texts: Iterable<string>) => {
  let max = min
  for (const text of texts) max = Math.max(max, width(text))
  return max
}

export const clip = (text: string, max: number) => {
  const chars = [...text]
  return chars.length <= max ? text : `${chars.slice(0, max - 1).join("")}…`
}

export const table = (
  headers: ReadonlyArray<string>,
  rows: ReadonlyArray<ReadonlyArray<string | number>>
): string => {
  const cells = rows.map((row) => row.map((cell) => sanitize(String(cell))))
  const numeric = headers.map((_, i) => rows.length > 0 && rows.every((row) => typeof row[i] === "number"))
  const widths = headers.map((h, i) => widest(width(h), cells.map((row) => row[i] ?? "")))
  const line = (row: ReadonlyArray<string>) =>
    row
      .map((cell, i) => {
        const pad = " ".repeat(widths[i]! - width(cell))
        return numeric[i] ? pad + cell : cell + pad
      })
      .join("  ")
      .trimEnd()
  return [line(headers), line(widths.map((w) => "─".repeat(w))), ...cells.map(line)].join("\n")
}

/** `key  value` lines, keys padded. */
export const fields = (entries: ReadonlyArray<readonly [string, string]>): string => {
  const keyWidth = widest(0, entries.map(([key]) => key))
  return entries.map(([key, value]) => `${key.padEnd(keyWidth)}  ${sanitize(value)}`).join("\n")
}
