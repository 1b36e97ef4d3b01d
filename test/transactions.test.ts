import { engines } from "./contract/harness.js"
import { transactionsContract } from "./contract/transactions.js"

for (const engine of engines) {
  transactionsContract(engine)
}
