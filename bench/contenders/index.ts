/** The contender registry. Contender modules load their engines lazily inside run(). */
import type { Contender } from "../workloads.js"
import { contender as alkstore } from "./alkstore.js"
import { contender as effectPq } from "./effect-pq.js"
import { contender as liteque } from "./liteque.js"
import { contender as plainjob } from "./plainjob.js"
import { contender as raw } from "./raw.js"

export const contenders: ReadonlyArray<Contender> = [raw, alkstore, plainjob, liteque, effectPq]
