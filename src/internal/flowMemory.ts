/**
 * Which queues this process has seen limited (a claim took the flow path):
 * a hint for how to wait and whether an ack should wake waiters, never for
 * enforcement (that is the claim transaction's).
 */
export interface FlowMemory {
  readonly known: (queue: string) => boolean
  readonly saw: (queue: string, limited: boolean) => void
}

export const makeFlowMemory = (): FlowMemory => {
  const limited = new Set<string>()
  return {
    known: (queue) => limited.size > 0 && limited.has(queue),
    saw: (queue, is) => {
      if (is) limited.add(queue)
      else limited.delete(queue)
    }
  }
}
