import { SqlError } from "@effect/sql/SqlError"
import { Clock, Context, Effect } from "effect"
import type { JobRow, QueueStorage } from "./engine.js"
import type { ClaimHandle } from "./handle.js"
import type { QueueMetrics } from "./telemetry.js"

/**
 * Acks one claim and claims up to `n` more of the same queue in one
 * transaction (one statement on PostgreSQL): the engine's fused step, the
 * one a queue's worker takes between two jobs, for a caller that settles
 * its claims itself (EffectStores' PersistedQueue prefetch). In place where
 * the engine can (the store's own SQLite connection, free now), else as an
 * effect. Yields the new claims; the ack's outcome goes to the metrics only
 * (a lost ack is no error, as `handle.ack`'s `false`).
 */
export const makeAckAndClaim = <A>(
  storage: QueueStorage,
  name: string,
  m: QueueMetrics,
  toHandles: (
    rows: ReadonlyArray<JobRow>,
    current: number
  ) => Effect.Effect<{ readonly handles: ReadonlyArray<ClaimHandle<A>> }, SqlError>
) =>
(handle: ClaimHandle<A>, workerId: string, n: number): Effect.Effect<ReadonlyArray<ClaimHandle<A>>, SqlError> =>
  Effect.withFiberRuntime((fiber) => {
    const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
    const claimed = ({ acked, rows }: { readonly acked: boolean; readonly rows: ReadonlyArray<JobRow> }) => {
      if (acked) m.acked(1)
      return Effect.map(toHandles(rows, clock.unsafeCurrentTimeMillis()), ({ handles }) => handles)
    }
    if (storage.ackAndClaimNow !== undefined) {
      let result: { readonly acked: boolean; readonly rows: ReadonlyArray<JobRow> } | undefined
      try {
        result = storage.ackAndClaimNow(fiber.currentContext, handle.fence, name, workerId, clock, n)
      } catch (cause) {
        return cause instanceof SqlError ? Effect.fail(cause) : Effect.die(cause)
      }
      if (result !== undefined) return claimed(result)
    }
    return Effect.flatMap(storage.ackAndClaim(handle.fence, name, workerId, clock, n), claimed)
  })
