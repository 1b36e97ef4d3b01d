import { engines } from "./contract/harness.js"
import { persistedQueueContract } from "./contract/persistedQueue.js"
import { persistedQueueInterruptionContract } from "./contract/persistedQueueInterruption.js"
import { rateLimiterContract } from "./contract/rateLimiter.js"

for (const engine of engines) {
  persistedQueueContract(engine)
  persistedQueueInterruptionContract(engine)
  rateLimiterContract(engine)
}
