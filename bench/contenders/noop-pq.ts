/** PersistedQueue over a store that does nothing: PersistedQueue's own part of a take (see reference-pq.ts). */
import { referencePq } from "./reference-pq.js"

export const contender = referencePq("noop")
