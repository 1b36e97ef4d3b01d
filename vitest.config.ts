import { availableParallelism } from "node:os"
import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"
import LongestFirst from "./test/support/sequencer.js"

// CI reads a plain "N passed, N failed" line (.ci/run prints it from this JSON).
const ci = process.env.CI !== undefined && process.env.CI !== ""

export default defineConfig({
  // Tests that show users' code (test/recipes-*.test.ts, quoted in docs/recipes.md) import "alkstore" as users do.
  resolve: { alias: [{ find: /^alkstore$/, replacement: fileURLToPath(new URL("./src/index.ts", import.meta.url)) }] },
  test: {
    include: ["test/**/*.test.ts"],
    // Boots a throw-away PostgreSQL cluster unless ALKSTORE_PG_URL is set; fails the run if it cannot.
    globalSetup: ["test/support/pg-global-setup.ts"],
    // Per test file: what the test support made for it removed after it (files share their worker's modules).
    setupFiles: ["test/support/per-file.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // A worker runs file after file with the modules it already loaded (Effect, the drivers, the sources): a
    // fresh process per file spent ~1.6 s of CPU per file loading them (231 s of CPU in a run of 891 s on
    // 2 cores; the same run took 690 s without). State the test support keeps per module lives as long as the
    // worker (test/contract/harness.ts: its counters and names); what is per file is removed per file
    // (test/support/per-file.ts: the file's database files, PostgreSQL database and CLI build).
    isolate: false,
    // Most of the suite waits (on child processes, PostgreSQL, real-time cross-process checks): one worker left a
    // 2-core machine 75 % idle for ~13 minutes. vitest's default is one worker per core but one; two at least
    // (7.5 minutes on that machine), and the longest files first so both end together (test/support/sequencer.ts).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    minWorkers: 1,
    sequence: { sequencer: LongestFirst },
    ...(ci ? { reporters: ["default", "json"], outputFile: { json: ".vitest-results.json" } } : {})
  }
})
