import { engines } from "./contract/harness.js"
import { locksContract } from "./contract/locks.js"

for (const engine of engines) {
  locksContract(engine)
}
