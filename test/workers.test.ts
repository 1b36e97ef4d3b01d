import { engines } from "./contract/harness.js"
import { workersContract } from "./contract/workers.js"

for (const engine of engines) {
  workersContract(engine)
}
