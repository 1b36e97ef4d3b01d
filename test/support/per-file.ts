/**
 * vitest setupFiles: runs before every test file, also where a worker runs
 * many files with the modules it loaded (`isolate: false`,
 * vitest.config.ts). The hooks here are the file's own.
 */
import { afterAll } from "vitest"
import { endFileDatabase } from "../contract/harness.js"

// Registered first, so it runs after the file's own afterAll hooks (their stores and servers closed by then).
afterAll(endFileDatabase)
