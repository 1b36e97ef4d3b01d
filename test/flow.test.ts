import { engines } from "./contract/harness.js"
import { flowContract } from "./contract/flow.js"

for (const engine of engines) {
  flowContract(engine)
}
