/** PersistedQueue over Effect's in-memory store `layerStoreMemory`: a reference for the PQ rows (see reference-pq.ts). */
import { referencePq } from "./reference-pq.js"

export const contender = referencePq("memory")
