/**
 * The docs' code examples as modules (test/docs-examples.test.ts checks them):
 * every fenced block of README.md and docs/*.md whose info string is `ts`
 * (type-checked) or `ts runnable` (type-checked and run). Each block is a
 * complete module importing the library as users do (`from "alkstore"`),
 * written into a scratch directory; `alkstore` resolves to src/index.ts
 * (a `paths` entry for the type-check, the specifier rewritten to the source
 * file for the run).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import ts from "typescript"

export interface DocBlock {
  /** The markdown file, relative to the repository (`docs/recipes.md`). */
  readonly file: string
  /** 1-based line of the block's first code line in that file. */
  readonly line: number
  readonly code: string
  readonly runnable: boolean
  /** A repository file the block quotes whole (`<!-- quote: test/x.test.ts -->` on the line before its fence). */
  readonly quotes?: string
}

/** A fence whose info string breaks the docs' convention. */
export interface FenceProblem {
  readonly file: string
  readonly line: number
  readonly reason: string
}

/** README.md and docs/*.md (not the generated API reference), relative to `root`. */
export const markdownFiles = (root: string): ReadonlyArray<string> => [
  "README.md",
  ...fs.readdirSync(path.join(root, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`)
]

const fenceOpen = /^( *)(`{3,}|~{3,})(.*)$/
const quoteMark = /^\s*<!--\s*quote:\s*(\S+)\s*-->\s*$/

/**
 * The `ts` blocks of one markdown text, and the fences that break the
 * convention: a bare fence (say `sh`, `sql` or `text`), `typescript` or
 * `tsx` for `ts`, or a `ts` fence with a word other than `runnable`.
 */
export const extractBlocks = (
  file: string,
  text: string
): { readonly blocks: ReadonlyArray<DocBlock>; readonly problems: ReadonlyArray<FenceProblem> } => {
  const lines = text.split("\n")
  const blocks: Array<DocBlock> = []
  const problems: Array<FenceProblem> = []
  for (let i = 0; i < lines.length; i++) {
    const open = fenceOpen.exec(lines[i]!)
    if (open === null) continue
    const [, indent = "", fence = "", infoRaw = ""] = open
    const info = infoRaw.trim().split(/\s+/).filter((w) => w !== "")
    const close = new RegExp(`^ *${fence[0] === "`" ? "`" : "~"}{${fence.length},} *$`)
    let end = i + 1
    while (end < lines.length && !close.test(lines[end]!)) end++
    const body = lines.slice(i + 1, end).map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l.trimStart()))
    const at = { file, line: i + 1 }
    const lang = info[0]
    if (lang === undefined) {
      problems.push({ ...at, reason: "a fence without a language: use ```ts, ```sh, ```sql or ```text" })
    } else if (lang === "typescript" || lang === "tsx" || lang === "js" || lang === "javascript") {
      problems.push({ ...at, reason: `\`\`\`${lang}: examples are \`\`\`ts (compiled) or \`\`\`ts runnable (compiled and run)` })
    } else if (lang === "ts") {
      const extra = info.slice(1)
      if (extra.length > 1 || (extra.length === 1 && extra[0] !== "runnable")) {
        problems.push({ ...at, reason: `\`\`\`${info.join(" ")}: the only word after ts is "runnable"` })
      } else {
        const quotes = i > 0 ? quoteMark.exec(lines[i - 1]!)?.[1] : undefined
        blocks.push({
          file,
          line: i + 2,
          code: body.join("\n") + "\n",
          runnable: extra[0] === "runnable",
          ...(quotes !== undefined ? { quotes } : {})
        })
      }
    }
    i = end
  }
  return { blocks, problems }
}

/** Every block and problem of README.md and docs/*.md. */
export const collectBlocks = (root: string) => {
  const blocks: Array<DocBlock> = []
  const problems: Array<FenceProblem> = []
  for (const file of markdownFiles(root)) {
    const found = extractBlocks(file, fs.readFileSync(path.join(root, file), "utf8"))
    blocks.push(...found.blocks)
    problems.push(...found.problems)
  }
  return { blocks, problems }
}

/** `docs/recipes.md` line 42 → `docs-recipes-L42` (a file name and a directory name). */
export const blockSlug = (block: DocBlock) => `${block.file.replace(/\.md$/, "").replace(/[^A-Za-z0-9]+/g, "-")}-L${block.line}`

/** Where a block is: `docs/recipes.md:42`. */
export const where = (block: DocBlock, lineInBlock = 0) => `${block.file}:${block.line + lineInBlock}`

/** The compiler options of the repository's tsconfig.json, with `alkstore` mapped to its source. */
export const compilerOptions = (root: string): ts.CompilerOptions => {
  const parsed = ts.getParsedCommandLineOfConfigFile(path.join(root, "tsconfig.json"), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => {
      throw new Error(ts.flattenDiagnosticMessageText(d.messageText, "\n"))
    }
  })
  if (parsed === undefined) throw new Error("tsconfig.json did not parse")
  return {
    ...parsed.options,
    noEmit: true,
    // Each block is a module of its own even without an import.
    moduleDetection: ts.ModuleDetectionKind.Force,
    paths: { alkstore: [path.join(root, "src", "index.ts")] }
  }
}

export interface Diagnostic {
  /** `docs/recipes.md:42` for a block, the file name otherwise. */
  readonly where: string
  readonly message: string
}

/**
 * Type-checks `files` (written blocks, by path) in one program. Returns its
 * diagnostics, each placed at its markdown line, and the program (for the
 * TSDoc check of the public exports).
 */
export const typeCheck = (
  root: string,
  files: ReadonlyMap<string, DocBlock>
): { readonly diagnostics: ReadonlyArray<Diagnostic>; readonly program: ts.Program } => {
  const program = ts.createProgram({ rootNames: [...files.keys()], options: compilerOptions(root) })
  // Only the blocks' own diagnostics: the library itself is checked by the project's tsc, and checking just the
  // blocks leaves most of its function bodies unchecked here (seconds saved).
  const blockFiles = program.getSourceFiles().filter((f) => files.has(path.resolve(f.fileName)))
  const found = [
    ...program.getOptionsDiagnostics(),
    ...program.getGlobalDiagnostics(),
    ...blockFiles.flatMap((f) => [...program.getSyntacticDiagnostics(f), ...program.getSemanticDiagnostics(f)])
  ]
  const diagnostics = found.map((d): Diagnostic => {
    const message = ts.flattenDiagnosticMessageText(d.messageText, "\n")
    if (d.file === undefined) return { where: "(program)", message }
    const block = files.get(path.resolve(d.file.fileName))
    const { line, character } = d.file.getLineAndCharacterOfPosition(d.start ?? 0)
    return block !== undefined
      ? { where: `${where(block, line)} (column ${character + 1})`, message }
      : { where: `${path.relative(root, d.file.fileName)}:${line + 1}`, message }
  })
  return { diagnostics, program }
}

/** A runnable copy: `"alkstore"` imported from the source file, as the type-check resolved it. */
export const runnableSource = (root: string, code: string) =>
  code.replace(/(from\s+|import\s*\(\s*)(["'])alkstore\2/g, (_, lead: string, quote: string) =>
    `${lead}${quote}${path.join(root, "src", "index.ts")}${quote}`)

/** GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to hyphens. */
export const headingSlug = (heading: string) =>
  heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-")

/** The anchors of a markdown text's headings (outside fences), with GitHub's `-1`, `-2` for repeats. */
export const headingAnchors = (text: string): Set<string> => {
  const anchors = new Set<string>()
  const seen = new Map<string, number>()
  for (const line of withoutCode(text, { inline: "keep" }).split("\n")) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
    if (heading === null) continue
    const base = headingSlug(heading[1]!)
    const n = seen.get(base) ?? 0
    seen.set(base, n + 1)
    anchors.add(n === 0 ? base : `${base}-${n}`)
  }
  return anchors
}

/** The text with fenced blocks blanked (lines kept, for line numbers) and inline code removed (or kept). */
const withoutCode = (text: string, options: { readonly inline: "drop" | "keep" } = { inline: "drop" }) => {
  let fence: string | undefined
  return text.split("\n").map((line) => {
    const open = /^ *(`{3,}|~{3,})/.exec(line)
    if (fence === undefined && open !== null) {
      fence = open[1]!
      return ""
    }
    if (fence !== undefined) {
      if (new RegExp(`^ *${fence[0] === "`" ? "`" : "~"}{${fence.length},} *$`).test(line)) fence = undefined
      return ""
    }
    return options.inline === "keep" ? line : line.replace(/`[^`]*`/g, "")
  }).join("\n")
}

/**
 * Relative links of README.md and docs/*.md that lead nowhere: a missing file,
 * a missing heading anchor in a markdown target, or a path out of the
 * repository's docs (`../shared/` and the like: the project carries its own).
 */
export const brokenLinks = (root: string): Array<FenceProblem> => {
  const problems: Array<FenceProblem> = []
  for (const file of markdownFiles(root)) {
    const text = fs.readFileSync(path.join(root, file), "utf8")
    withoutCode(text).split("\n").forEach((line, i) => {
      for (const match of line.matchAll(/!?\[[^\]]*\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
        const target = match[1]!
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue // https:, mailto:
        const [pathPart = "", anchor] = target.split("#", 2)
        const resolved = pathPart === "" ? path.join(root, file) : path.resolve(path.dirname(path.join(root, file)), pathPart)
        const at = { file, line: i + 1 }
        if (path.relative(root, resolved).startsWith("..")) {
          problems.push({ ...at, reason: `${target} leaves the repository` })
        } else if (!fs.existsSync(resolved)) {
          problems.push({ ...at, reason: `${target}: no such file` })
        } else if (anchor !== undefined && resolved.endsWith(".md") && !headingAnchors(fs.readFileSync(resolved, "utf8")).has(anchor)) {
          problems.push({ ...at, reason: `${target}: no heading with that anchor` })
        }
      }
    })
  }
  return problems
}
