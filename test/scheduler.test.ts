import { engines } from "./contract/harness.js"
import { schedulerContract } from "./contract/scheduler.js"

for (const engine of engines) {
  schedulerContract(engine)
}
