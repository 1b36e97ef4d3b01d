/**
 * Which queues this process has seen limited (a claim took the flow path):
 * a hint for how to wait and whether an ack should wake waiters, never for
 * enforcement (that is the claim transaction's). With it, an engine may
 * note the shape of a queue's limits as its last claim read them (SQLite:
 * which one-statement claim fits them), again a hint its claim verifies.
 */
export interface FlowMemory {
  readonly known: (queue: string) => boolean
  readonly saw: (queue: string, limited: boolean) => void
  /** The shape noted for `queue` (`undefined`: none). */
  readonly shape: (queue: string) => string | undefined
  readonly sawShape: (queue: string, shape: string | undefined) => void
}

export const makeFlowMemory = (): FlowMemory => {
  const limited = new Set<string>()
  const shapes = new Map<string, string>()
  return {
    known: (queue) => limited.size > 0 && limited.has(queue),
    saw: (queue, is) => {
      if (is) limited.add(queue)
      else {
        limited.delete(queue)
        shapes.delete(queue)
      }
    },
    shape: (queue) => (shapes.size > 0 ? shapes.get(queue) : undefined),
    sawShape: (queue, shape) => {
      if (shape === undefined) shapes.delete(queue)
      else shapes.set(queue, shape)
    }
  }
}
