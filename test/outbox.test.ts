import { engines } from "./contract/harness.js"
import { outboxContract } from "./contract/outbox.js"

for (const engine of engines) {
  outboxContract(engine)
}
