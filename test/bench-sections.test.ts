/**
 * docs/benchmarks.md is written by several benches (bench/sections.ts): a full `bench/run.ts` rewrote the whole
 * file but the PostgreSQL section, so flow control's tables, pasted in by hand, went with every full run. Each bench
 * now replaces its own marked section and keeps every other.
 */
import { describe, expect, it } from "vitest"
import { keepSections, sectionsOf, spliceSection } from "../bench/sections.js"

const old = [
  "# Benchmarks",
  "old SQLite tables",
  "<!-- flow-bench-sqlite:start (written by bench/flow.ts) -->",
  "flow, SQLite",
  "<!-- flow-bench-sqlite:end -->",
  "",
  "<!-- pg-bench:start (written by bench/pg/run.ts) -->",
  "PostgreSQL",
  "<!-- pg-bench:end -->",
  ""
].join("\n")

describe("the sections of docs/benchmarks.md", () => {
  it("a section written replaces only its own, and is appended when the file has none", () => {
    const flow = spliceSection(old, "flow-bench-sqlite", "bench/flow.ts", "flow, SQLite, again")
    expect(flow).toContain("flow, SQLite, again\n<!-- flow-bench-sqlite:end -->")
    expect(flow).not.toContain("flow, SQLite\n")
    expect(flow).toContain("old SQLite tables")
    expect(flow).toContain("<!-- pg-bench:start (written by bench/pg/run.ts) -->\nPostgreSQL\n<!-- pg-bench:end -->")
    const added = spliceSection(old, "flow-bench-pg", "bench/flow.ts", "flow, PostgreSQL")
    expect(added.trimEnd().endsWith("<!-- flow-bench-pg:start (written by bench/flow.ts) -->\nflow, PostgreSQL\n<!-- flow-bench-pg:end -->"))
      .toBe(true)
    expect(sectionsOf(added).map((s) => s.name)).toEqual(["flow-bench-sqlite", "pg-bench", "flow-bench-pg"])
  })

  it("a file written afresh by bench/run.ts keeps every section of the old one, in its order", () => {
    const fresh = keepSections(old, "# Benchmarks\nnew SQLite tables\n")
    expect(fresh).toContain("new SQLite tables")
    expect(fresh).not.toContain("old SQLite tables")
    expect(sectionsOf(fresh)).toEqual(sectionsOf(old))
  })
})
