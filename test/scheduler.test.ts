import { engines } from "./contract/harness.js"
import { schedulerContract } from "./contract/scheduler.js"
import { standbyContract } from "./contract/standby.js"

for (const engine of engines) {
  schedulerContract(engine)
  standbyContract(engine)
}
