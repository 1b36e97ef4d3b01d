import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import type * as Q from "../Queues.js"
import { InvalidOptions } from "../StoreError.js"
import type { Fence, QueueStorage } from "./engine.js"
import { failureText } from "./errorText.js"
import type { ClaimHandle } from "./handle.js"
import { attr, type QueueMetrics, traced } from "./telemetry.js"

/** What `ackAll` is built from (src/internal/queue.ts). */
export interface AckAllParts {
  readonly name: string
  readonly storage: QueueStorage
  readonly metrics: QueueMetrics
  /** Wakes waiters a freed slot may admit (flow control), after an ack that took. */
  readonly freed: Effect.Effect<void, SqlError>
}

/** What `ackAll` says of anything that is not a claim handle of this queue (a `Job`, `{}`, `null`). */
const notHandle = (name: string, value: unknown) => {
  const fence = (value as { readonly fence?: Fence } | null | undefined)?.fence
  return new InvalidOptions({
    field: "handles",
    reason: fence === undefined
      ? "must be claim handles (a Job is not its handle)"
      : `a handle of job ${fence.id} was not claimed from queue ${name} of this store`
  })
}

/**
 * A queue's `ackAll`: its handles' fences acked in one statement, each
 * answered in order. Anything that is not a claim handle of this queue — or
 * handles that cannot be read (not iterable, an iterable that throws) — is
 * `InvalidOptions` on "handles" before anything is acked.
 */
export const makeAckAll = <A>({ freed, metrics: m, name, storage }: AckAllParts): Q.Queue<A>["ackAll"] => (handles) =>
  Effect.suspend((): Effect.Effect<ReadonlyArray<boolean>, InvalidOptions | SqlError> => {
    const fences: Array<Fence> = []
    // A traced stream's claims, whose own spans end with their outcomes (none untraced).
    let spanned: Array<[ClaimHandle<A>, number]> | undefined
    try {
      for (const handle of handles) {
        // The handle's own queue name as its caller gave it, not one read back from the row
        // (nor `handle.job`: a batch acked unread never builds its jobs).
        // And the store's own: another store's queue of the same name has the same fences for other jobs.
        const { fence, queueName, storage: claimedIn } = (handle ?? {}) as Partial<ClaimHandle<A>>
        if (fence === undefined || queueName !== name || claimedIn !== storage) return Effect.fail(notHandle(name, handle))
        if ((handle as ClaimHandle<A>).jobSpan !== undefined) (spanned ??= []).push([handle as ClaimHandle<A>, fences.length])
        fences.push(fence)
      }
    } catch (cause) {
      return Effect.fail(new InvalidOptions({ field: "handles", reason: `could not be read: ${failureText(cause)}` }))
    }
    if (fences.length === 0) return Effect.succeed([])
    const acked = Effect.map(storage.ackMany(fences), (results) => {
      let n = 0
      for (const ok of results) if (ok) n++
      if (n > 0) m.acked(n)
      return results
    }).pipe(
      Effect.tap((results) => (results.includes(true) ? freed : Effect.void)),
      Effect.tap((results) =>
        spanned === undefined
          ? Effect.void
          : Effect.forEach(spanned, ([handle, i]) => handle.endJobSpan(results[i] ? "acked" : "lost"), { discard: true })
      )
    )
    return traced("alkstore.queue.ack_all", () => ({ [attr.queue]: name }), acked, (results, span) => {
      span.attribute(attr.count, results.length)
      span.attribute("alkstore.acked", results.filter((ok) => ok).length)
    })
  })
