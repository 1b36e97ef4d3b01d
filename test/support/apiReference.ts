/**
 * The API reference (docs/api/, written by `npm run docs:api`, which is
 * TypeDoc with typedoc-plugin-markdown and typedoc.json) rendered again into a
 * scratch directory over the source files of a program the caller already
 * built, so that the docs-examples test can tell when the committed reference
 * is out of date without parsing the library a second time.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Application, TypeDocReader } from "typedoc"
import ts from "typescript"

/**
 * Renders the reference of `root`'s src/index.ts, as typedoc.json configures
 * it, into `out`. The program is a new one over `parsed`'s source files (no
 * file is parsed again) with a checker of its own: a checker that already
 * checked other code orders union members differently in what it prints.
 */
export const renderApiReference = async (root: string, parsed: ts.Program, out: string): Promise<void> => {
  const options = parsed.getCompilerOptions()
  const host = ts.createCompilerHost(options)
  const readFresh = host.getSourceFile.bind(host)
  host.getSourceFile = (fileName, languageVersion, onError, shouldCreate) =>
    parsed.getSourceFile(fileName) ?? readFresh(fileName, languageVersion, onError, shouldCreate)
  const program = ts.createProgram({ rootNames: [path.join(root, "src", "index.ts")], options, host })
  const app = await Application.bootstrapWithPlugins(
    { options: path.join(root, "typedoc.json"), out, logLevel: "Error" },
    [new TypeDocReader()] // typedoc.json only: never the test runner's argv
  )
  const sourceFile = program.getSourceFile(path.join(root, "src", "index.ts"))
  if (sourceFile === undefined) throw new Error("src/index.ts is not in the program")
  const project = app.converter.convert([{ displayName: "alkstore", program, sourceFile }])
  await app.generateOutputs(project)
}

/** Every file under `dir`, relative to it, sorted. */
export const filesUnder = (dir: string): Array<string> =>
  fs.existsSync(dir)
    ? (fs.readdirSync(dir, { recursive: true, encoding: "utf8" }) as Array<string>)
      .filter((f) => fs.statSync(path.join(dir, f)).isFile())
      .sort()
    : []

/** The files that differ between two trees (present in one only, or with other contents). */
export const differingFiles = (expected: string, actual: string): Array<string> => {
  const names = [...new Set([...filesUnder(expected), ...filesUnder(actual)])].sort()
  const read = (dir: string, f: string) => (fs.existsSync(path.join(dir, f)) ? fs.readFileSync(path.join(dir, f), "utf8") : undefined)
  return names.filter((f) => read(expected, f) !== read(actual, f))
}
