import { engines } from "./contract/harness.js"
import { telemetryContract } from "./contract/telemetry.js"
import { telemetryStreamContract } from "./contract/telemetry-stream.js"

for (const engine of engines) {
  telemetryContract(engine)
  telemetryStreamContract(engine)
}
