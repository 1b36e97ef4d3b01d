/** What every chaos check is: a seeded program that ends in one summary line and a list of violations. */
import type { EngineKind } from "../engine.js"

export interface CheckConfig {
  readonly seed: number
  /** The short form `.ci/run` uses: seconds, not minutes. */
  readonly short: boolean
  readonly engine: EngineKind
}

export interface CheckResult {
  /** `key=value` facts for the summary line: counts, throughput, what was seen. */
  readonly facts: Record<string, string | number>
  /** Each broken guarantee, one sentence each; empty when the check passed. */
  readonly violations: ReadonlyArray<string>
}

export interface Check {
  readonly name: string
  /** Engines the check applies to (contention and file faults are SQLite's). */
  readonly engines: ReadonlyArray<EngineKind>
  readonly run: (config: CheckConfig) => Promise<CheckResult>
}

/** Collects violations, keeping the first few of each kind readable. */
export const violations = () => {
  const list: Array<string> = []
  const perKind = new Map<string, number>()
  return {
    list,
    add: (kind: string, detail: string) => {
      const n = (perKind.get(kind) ?? 0) + 1
      perKind.set(kind, n)
      if (n <= 5) list.push(`${kind}: ${detail}`)
      else if (n === 6) list.push(`${kind}: (more of this kind not shown)`)
    }
  }
}
