/**
 * The order test files start in: the longest first, so two workers end together.
 *
 * vitest orders by the durations of the previous run when it has them, and by file size when it does not — a
 * clean clone (CI) has none. By size, the contract files came last: a few lines each that run a contract
 * module over every engine (test/scheduler.test.ts: 14 lines, 80 s), so one of them started when the other
 * worker had finished and the run waited on it alone. Without durations this sequencer weighs a file by its own
 * text plus, for each contract module it imports, that module's text times the number of engines it runs over;
 * a file that starts processes of its own (the multi-process checks, the CLI, the package) weighs four times its
 * text, for the real-time waits those checks are made of.
 */
import { readFileSync } from "node:fs"
import { dirname, relative, resolve } from "node:path"
import { BaseSequencer, type TestSpecification } from "vitest/node"

/** The engine variants a contract module runs over (test/contract/harness.ts `engines`). */
const engineVariants = 4

/** How much more a file that starts processes weighs than its text. */
const processesFactor = 4

const sizeOf = (file: string): number => {
  try {
    return readFileSync(file, "utf8").length
  } catch {
    return 0
  }
}

/** A test file's text plus the text of the contract modules it runs over every engine. */
const estimatedWeight = (file: string): number => {
  const text = readFileSync(file, "utf8")
  let weight = text.includes("node:child_process") ? processesFactor * text.length : text.length
  if (!/\bof engines\b/.test(text)) return weight
  for (const [, imported] of text.matchAll(/from "(\.\/contract\/[^"]+)\.js"/g)) {
    if (imported!.endsWith("/harness") || imported!.endsWith("/support")) continue
    weight += engineVariants * sizeOf(resolve(dirname(file), `${imported}.ts`))
  }
  return weight
}

export default class LongestFirst extends BaseSequencer {
  override async sort(files: Array<TestSpecification>): Promise<Array<TestSpecification>> {
    const cache = this.ctx.cache
    const known = files.every((spec) =>
      cache.getFileTestResults(`${spec.project.name}:${relative(this.ctx.config.root, spec.moduleId)}`) !== undefined
    )
    if (known) return super.sort(files)
    const weights = new Map(files.map((spec) => [spec, estimatedWeight(spec.moduleId)] as const))
    return [...files].sort((a, b) => weights.get(b)! - weights.get(a)!)
  }
}
