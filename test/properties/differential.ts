import { type EngineUnderTest, engines } from "../contract/harness.js"

/**
 * A differential property's check: the same operations run on every engine of the harness, one after the
 * other, then each engine's run is checked against the rules and all runs against each other, step by step.
 */
export const onEveryEngine = <Op, Run>(parts: {
  readonly runOn: (engine: EngineUnderTest, ops: ReadonlyArray<Op>) => Promise<Run>
  readonly assertRules: (name: string, ops: ReadonlyArray<Op>, run: Run) => void
  readonly assertSameTraces: (ops: ReadonlyArray<Op>, runs: ReadonlyArray<readonly [string, Run]>) => void
}) =>
async (ops: ReadonlyArray<Op>): Promise<void> => {
  const runs: Array<readonly [string, Run]> = []
  for (const engine of engines) runs.push([engine.name, await parts.runOn(engine, ops)])
  for (const [name, run] of runs) parts.assertRules(name, ops, run)
  parts.assertSameTraces(ops, runs)
}
