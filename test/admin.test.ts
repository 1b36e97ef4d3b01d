import { adminContract } from "./contract/admin.js"
import { engines } from "./contract/harness.js"

for (const engine of engines) adminContract(engine)
