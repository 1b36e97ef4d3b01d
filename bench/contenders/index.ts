/**
 * The contender registry. Each contender module loads its engine lazily inside
 * run(), so loading a module for its metadata is cheap. The loaders are
 * literal dynamic imports so bench/run.ts can bundle a child per contender
 * (the other contenders stay external and are never loaded).
 */
import type { Contender } from "../workloads.js"

export const CONTENDER_NAMES = ["raw", "raw-effect", "alkstore", "plainjob", "liteque", "effect-pq", "alkstore-pq", "memory-pq", "noop-pq"] as const
/** Reference contenders that are not durable stores: run only when named in BENCH_CONTENDERS. */
export const REFERENCE_ONLY = ["memory-pq", "noop-pq"] as const
export type ContenderName = (typeof CONTENDER_NAMES)[number]

export const loadContender = async (name: string): Promise<Contender> => {
  switch (name) {
    case "raw":
      return (await import("./raw.js")).contender
    case "raw-effect":
      return (await import("./raw-effect.js")).contender
    case "alkstore":
      return (await import("./alkstore.js")).contender
    case "plainjob":
      return (await import("./plainjob.js")).contender
    case "liteque":
      return (await import("./liteque.js")).contender
    case "effect-pq":
      return (await import("./effect-pq.js")).contender
    case "alkstore-pq":
      return (await import("./alkstore-pq.js")).contender
    case "memory-pq":
      return (await import("./memory-pq.js")).contender
    case "noop-pq":
      return (await import("./noop-pq.js")).contender
    default:
      throw new Error(`unknown contender ${name}`)
  }
}
