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
import ts from "typescript"
import { afterAll, describe, expect, it } from "vitest"
import { differingFiles, filesUnder, renderApiReference } from "./support/apiReference.js"
import { blockSlug, brokenLinks, collectBlocks, type DocBlock, extractBlocks, headingAnchors, runnableSource, typeCheck, where } from "./support/docExamples.js"

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

  it("every relative link of README.md and docs/*.md leads to a file of the repository, and its #anchor to a heading", () => {
    expect(brokenLinks(root).map((p) => `${p.file}:${p.line}: ${p.reason}`)).toEqual([])
  })

  it("every ts block type-checks against the library, imported as \"alkstore\"", () => {
    const { diagnostics } = checkedProgram()
    expect(diagnostics.map((d) => `${d.where}: ${d.message}`)).toEqual([])
  })

  it("a block marked <!-- quote: path --> is that file of the repository, whole", () => {
    const quoting = blocks.filter((b) => b.quotes !== undefined)
    const stale = quoting.filter((b) => {
      const quoted = path.join(root, b.quotes!)
      return !fs.existsSync(quoted) || fs.readFileSync(quoted, "utf8") !== b.code
    })
    expect(stale.map((b) => `${where(b)} differs from ${b.quotes}`)).toEqual([])
  })

  it("every public export of src/index.ts has a TSDoc comment", () => {
    const { program } = checkedProgram()
    expect(undocumentedExports(program)).toEqual([])
  })

  it("docs/api/ is the reference `npm run docs:api` generates from the TSDoc (run it after changing a public export)", async () => {
    const { program } = checkedProgram()
    const out = path.join(scratch, "api")
    await renderApiReference(root, program, out)
    expect(filesUnder(out).length).toBeGreaterThan(1)
    expect(differingFiles(path.join(root, "docs", "api"), out)).toEqual([])
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

/** `Module.name` for each export of each public module that has no documentation comment. */
const undocumentedExports = (program: ts.Program): Array<string> => {
  const checker = program.getTypeChecker()
  const index = program.getSourceFile(path.join(root, "src", "index.ts"))
  if (index === undefined) return ["src/index.ts is not in the program"]
  const resolve = (s: ts.Symbol) => (s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s)
  const missing: Array<string> = []
  const indexSymbol = checker.getSymbolAtLocation(index)
  if (indexSymbol === undefined) return ["src/index.ts has no module symbol"]
  for (const namespace of checker.getExportsOfModule(indexSymbol)) {
    const module = resolve(namespace)
    const moduleFile = module.declarations?.[0]?.getSourceFile()
    if (moduleFile === undefined || !hasModuleComment(moduleFile)) {
      missing.push(`${namespace.name} (a /** … @module */ comment opening its file)`)
    }
    for (const exported of checker.getExportsOfModule(module)) {
      const documented = [exported, resolve(exported)].some((s) => s.getDocumentationComment(checker).length > 0)
      if (!documented) missing.push(`${namespace.name}.${exported.name}`)
    }
  }
  return missing
}

/** A public module opens with a `/** … @module *\/` comment: TypeDoc's text for its page (without the tag it drops it). */
const hasModuleComment = (file: ts.SourceFile) => {
  const text = file.getFullText().trimStart()
  return text.startsWith("/**") && /@module\b/.test(text.slice(0, text.indexOf("*/")))
}

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
    "```",
    "<!-- quote: test/x.test.ts -->",
    "```ts",
    "export {}",
    "```"
  ].join("\n")
  const { blocks: found, problems: wrong } = extractBlocks("docs/x.md", text)

  it("finds ts blocks with their first code line, dedents indented ones, and skips other languages", () => {
    expect(found).toEqual([
      { file: "docs/x.md", line: 3, code: "const a = 1\n", runnable: false },
      { file: "docs/x.md", line: 7, code: "await Promise.resolve(2)\n  // indented more\n", runnable: true },
      { file: "docs/x.md", line: 24, code: "export {}\n", runnable: false, quotes: "test/x.test.ts" }
    ])
  })

  it("reports a bare fence, a misspelt word after ts, and typescript for ts, by line", () => {
    expect(wrong.map((p) => p.line)).toEqual([13, 18, 20])
  })

  it("derives GitHub's heading anchors, repeats numbered", () => {
    const anchors = headingAnchors("# The CLI: `alkstore`\n## A job's life\n## Notes\n## Notes\n```\n# not a heading\n```\n")
    expect([...anchors]).toEqual(["the-cli-alkstore", "a-jobs-life", "notes", "notes-1"])
  })

  it("rewrites the alkstore import of a runnable copy to the source file", () => {
    const source = runnableSource("/repo", `import { Queues } from "alkstore"\nconst m = await import('alkstore')\n`)
    expect(source).toBe(`import { Queues } from "/repo/src/index.ts"\nconst m = await import('/repo/src/index.ts')\n`)
  })
})
