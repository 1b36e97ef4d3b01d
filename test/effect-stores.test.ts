import { engines } from "./contract/harness.js"
import { persistedQueueContract } from "./contract/persistedQueue.js"
import { persistedQueueCoalescingContract } from "./contract/persistedQueueCoalescing.js"
import { persistedQueueElementsContract } from "./contract/persistedQueueElements.js"
import { persistedQueueInterruptionContract } from "./contract/persistedQueueInterruption.js"
import { persistedQueuePrefetchContract } from "./contract/persistedQueuePrefetch.js"
import { rateLimiterContract } from "./contract/rateLimiter.js"

for (const engine of engines) {
  persistedQueueContract(engine)
  persistedQueueInterruptionContract(engine)
  persistedQueueCoalescingContract(engine)
  persistedQueueElementsContract(engine)
  persistedQueuePrefetchContract(engine)
  rateLimiterContract(engine)
}
