import { engines } from "./contract/harness.js"
import { instantsContract } from "./contract/instants.js"
import { queuesContract } from "./contract/queues.js"
import { queuesExpiryContract } from "./contract/queues-expiry.js"
import { queuesInspectionContract } from "./contract/queues-inspection.js"
import { queuesValidationContract } from "./contract/queues-validation.js"

for (const engine of engines) {
  queuesContract(engine)
  queuesValidationContract(engine)
  queuesInspectionContract(engine)
  queuesExpiryContract(engine)
  instantsContract(engine)
}
