import { wakeContract } from "./contract/wake.js"
import { engines } from "./contract/harness.js"

for (const engine of engines) {
  wakeContract(engine)
}
