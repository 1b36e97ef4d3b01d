/**
 * `npm run chaos`: runs every reliability check (issue 11) against an
 * engine, prints one summary line per check, and exits non-zero when any
 * check found a violation.
 *
 *   npm run chaos                      every check, full length, a fresh seed
 *   npm run chaos -- --short           the short form .ci/run uses (fixed seed 1)
 *   npm run chaos -- --seed 42         replay a run
 *   npm run chaos -- --only crash,lock run some checks
 *   npm run chaos -- --engine pg       another engine (see chaos/engine.ts); PostgreSQL boots a
 *                                      throw-away cluster unless ALKSTORE_PG_URL names a server
 *   npm run chaos -- --results f.json  also write { passed, failed } for CI
 */
import * as fs from "node:fs"
import { cleanup, type EngineKind } from "./engine.js"
import type { Check } from "./lib/check.js"
import { checks } from "./checks/index.js"
import { startCluster } from "../test/support/pg-cluster.js"

const args = process.argv.slice(2)
const option = (name: string) => {
  const i = args.indexOf(`--${name}`)
  return i === -1 ? undefined : args[i + 1]
}
const short = args.includes("--short")
const seedArg = option("seed")
const seed = seedArg !== undefined ? Number(seedArg) : short ? 1 : Math.floor(Math.random() * 2 ** 31)
const engine = (option("engine") ?? "sqlite") as EngineKind
const only = option("only")?.split(",")
const resultsFile = option("results")

const selected: ReadonlyArray<Check> = checks.filter((c) =>
  (only === undefined || only.includes(c.name)) && c.engines.includes(engine)
)
if (selected.length === 0) {
  console.error(`no check matches --only ${only?.join(",")} on ${engine}; checks: ${checks.map((c) => c.name).join(", ")}`)
  process.exit(2)
}

const replay = (name: string) => `npm run chaos -- --only ${name} --seed ${seed}${short ? " --short" : ""} --engine ${engine}`

// PostgreSQL without a server given: a throw-away cluster, as the tests boot (test/support/pg-cluster.ts)
let cluster: Awaited<ReturnType<typeof startCluster>> | undefined
if (engine === "pg" && (process.env.ALKSTORE_PG_URL ?? "") === "") {
  cluster = await startCluster({ durableCommits: true })
  process.env.ALKSTORE_PG_URL = cluster.url
}

let passed = 0
let failed = 0
for (const check of selected) {
  const started = Date.now()
  try {
    const result = await check.run({ seed, short, engine })
    const facts = Object.entries(result.facts).map(([k, v]) => `${k}=${v}`).join(" ")
    const verdict = result.violations.length === 0 ? "PASS" : "FAIL"
    console.log(`chaos ${check.name} [${engine}] ${verdict} seed=${seed} ${((Date.now() - started) / 1000).toFixed(1)}s ${facts}`)
    for (const violation of result.violations) console.log(`  violation: ${violation}`)
    if (result.violations.length === 0) passed++
    else {
      failed++
      console.log(`  replay: ${replay(check.name)}`)
    }
  } catch (error) {
    failed++
    console.log(`chaos ${check.name} [${engine}] FAIL seed=${seed}: ${error instanceof Error ? error.stack : String(error)}`)
    console.log(`  replay: ${replay(check.name)}`)
  }
}
console.log(`chaos: ${passed} passed, ${failed} failed (seed ${seed})`)
if (resultsFile !== undefined) fs.writeFileSync(resultsFile, JSON.stringify({ passed, failed }))
cleanup()
cluster?.stop()
process.exit(failed === 0 ? 0 : 1)
