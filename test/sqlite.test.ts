import { engines } from "./contract/harness.js"
import { namesContract } from "./contract/names.js"

for (const engine of engines) {
  namesContract(engine)
}
