/**
 * vitest setupFiles: runs before every test file, also where a worker runs
 * many files with the modules it loaded (`isolate: false`,
 * vitest.config.ts). The hooks here are the file's own: what the test
 * support made for the file (database files, a PostgreSQL database, the
 * CLI's build) is removed after it.
 */
import { afterAll } from "vitest"
import { endTestFile } from "../contract/harness.js"
import { endTestFileBuilds } from "../ops-support.js"

// Registered first, so it runs after the file's own afterAll hooks (their stores, servers and children ended).
afterAll(async () => {
  endTestFileBuilds()
  await endTestFile()
})
