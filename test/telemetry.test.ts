import { engines } from "./contract/harness.js"
import { telemetryContract } from "./contract/telemetry.js"

for (const engine of engines) {
  telemetryContract(engine)
}
