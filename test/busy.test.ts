import { busyContract } from "./contract/busy.js"
import { engines } from "./contract/harness.js"

for (const engine of engines) {
  busyContract(engine)
}
