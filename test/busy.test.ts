import { busyContract } from "./contract/busy.js"
import { engines } from "./contract/harness.js"

// Another connection holding SQLite's write lock: a SQLite file's matter.
for (const engine of engines.filter((e) => e.capabilities.sqliteFile)) {
  busyContract(engine)
}
