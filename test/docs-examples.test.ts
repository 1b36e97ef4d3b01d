/**
 * The docs' examples cannot rot: every ```ts block of README.md and docs/*.md
 * is type-checked against the library as users import it (one TypeScript
 * program for all of them), every ```ts runnable block is also run (in a
 * scratch directory of its own, so its SQLite file is a temporary one), and
 * every public export carries a TSDoc comment (the API reference in docs/api/
 * is generated from them). A failure names the markdown file and line.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"
import { blockSlug, collectBlocks, type DocBlock, extractBlocks, runnableSource, typeCheck, where } from "./support/docExamples.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const { blocks, problems } = collectBlocks(root)

// Inside the repository (not os.tmpdir()) so that the blocks' own imports (effect, @effect/sql) resolve from its
// node_modules; outside tsconfig.json's "include", and git-ignored.
fs.mkdirSync(path.join(root, ".docs-examples"), { recursive: true })
const scratch = fs.mkdtempSync(path.join(root, ".docs-examples", "run-"))
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }))

const written = new Map<string, DocBlock>()
for (const block of blocks) {
  const file = path.join(scratch, `${blockSlug(block)}.ts`)
  fs.writeFileSync(file, block.code)
  written.set(file, block)
}

let checked: ReturnType<typeof typeCheck> | undefined
const checkedProgram = () => (checked ??= typeCheck(root, written))

/** A run may take this long (the docs promise examples that finish in a few seconds). */
const runLimitMillis = 20_000

describe("docs examples", () => {
  it("every fence in README.md and docs/*.md names its language, and ts fences are `ts` or `ts runnable`", () => {
    expect(problems.map((p) => `${p.file}:${p.line}: ${p.reason}`)).toEqual([])
    expect(blocks.length).toBeGreaterThan(0)
    expect(blocks.some((b) => b.runnable)).toBe(true)
  })

  it("every ts block type-checks against the library, imported as \"alkstore\"", () => {
    const { diagnostics } = checkedProgram()
    expect(diagnostics.map((d) => `${d.where}: ${d.message}`)).toEqual([])
  })

  describe("runnable blocks run to completion", () => {
    for (const block of blocks.filter((b) => b.runnable)) {
      it(`${where(block)} runs`, async () => {
        const dir = path.join(scratch, blockSlug(block))
        fs.mkdirSync(dir)
        const file = path.join(dir, "main.ts")
        fs.writeFileSync(file, runnableSource(root, block.code))
        const cwd = process.cwd()
        process.chdir(dir) // the block's relative file names ("app.db") land in its own scratch directory
        try {
          await import(file)
        } catch (error) {
          throw new Error(`${where(block)}: the block failed: ${error instanceof Error ? error.stack ?? error.message : String(error)}`)
        } finally {
          process.chdir(cwd)
        }
      }, runLimitMillis)
    }
  })
})

describe("the block extractor", () => {
  const text = [
    "# Title",
    "```ts",
    "const a = 1",
    "```",
    "1. a step",
    "   ```ts runnable",
    "   await Promise.resolve(2)",
    "     // indented more",
    "   ```",
    "```sh",
    "npm test",
    "```",
    "````",
    "```ts",
    "inside a bare fence",
    "```",
    "````",
    "```ts runable",
    "```",
    "```typescript",
    "```"
  ].join("\n")
  const { blocks: found, problems: wrong } = extractBlocks("docs/x.md", text)

  it("finds ts blocks with their first code line, dedents indented ones, and skips other languages", () => {
    expect(found).toEqual([
      { file: "docs/x.md", line: 3, code: "const a = 1\n", runnable: false },
      { file: "docs/x.md", line: 7, code: "await Promise.resolve(2)\n  // indented more\n", runnable: true }
    ])
  })

  it("reports a bare fence, a misspelt word after ts, and typescript for ts, by line", () => {
    expect(wrong.map((p) => p.line)).toEqual([13, 18, 20])
  })

  it("rewrites the alkstore import of a runnable copy to the source file", () => {
    const source = runnableSource("/repo", `import { Queues } from "alkstore"\nconst m = await import('alkstore')\n`)
    expect(source).toBe(`import { Queues } from "/repo/src/index.ts"\nconst m = await import('/repo/src/index.ts')\n`)
  })
})
