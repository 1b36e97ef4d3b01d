/**
 * docs/benchmarks.md is written by several benches, each its own part:
 * bench/run.ts the whole file but the marked sections, which the others
 * write between two marker comments of their own (bench/pg/run.ts the
 * PostgreSQL section, bench/flow.ts flow control's, one per engine). A
 * bench replaces its own section and leaves every other as it found it.
 */

/** The comment a section starts with (`writer` names the bench that writes it). */
export const sectionStart = (name: string, writer: string) => `<!-- ${name}:start (written by ${writer}) -->`
/** The comment a section ends with. */
export const sectionEnd = (name: string) => `<!-- ${name}:end -->`

const startPattern = /<!-- ([a-z0-9-]+):start[^>]*-->/g

/** `doc` with the section `name` (markers included) replaced by `block`, or `block` appended when it has none. */
const replaceBlock = (doc: string, name: string, block: string): string => {
  const a = doc.search(new RegExp(`<!-- ${name}:start[^>]*-->`))
  const end = sectionEnd(name)
  const b = a < 0 ? -1 : doc.indexOf(end, a)
  if (a >= 0 && b > a) return `${doc.slice(0, a)}${block}${doc.slice(b + end.length)}`
  return `${doc.trimEnd()}\n\n${block}\n`
}

/** `doc` with the section `name` replaced by `body` (appended when it has none). */
export const spliceSection = (doc: string, name: string, writer: string, body: string): string =>
  replaceBlock(doc, name, `${sectionStart(name, writer)}\n${body.trim()}\n${sectionEnd(name)}`)

/** Every marked section of `doc`, in its order, whole (markers included). */
export const sectionsOf = (doc: string): ReadonlyArray<{ readonly name: string; readonly block: string }> => {
  const found: Array<{ name: string; block: string }> = []
  for (const match of doc.matchAll(startPattern)) {
    const name = match[1]!
    const end = doc.indexOf(sectionEnd(name), match.index)
    if (end < 0) continue
    found.push({ name, block: doc.slice(match.index, end + sectionEnd(name).length) })
  }
  return found
}

/** `fresh` (bench/run.ts's newly written file) with every marked section of `old` kept, in `old`'s order. */
export const keepSections = (old: string, fresh: string): string =>
  sectionsOf(old).reduce((doc, { block, name }) => replaceBlock(doc, name, block), fresh)
