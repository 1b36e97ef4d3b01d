import type { SqlError } from "@effect/sql/SqlError"
import { Effect, type Exit, Option } from "effect"
import type * as O from "../Outbox.js"
import type { InvalidOptions } from "../StoreError.js"
import { Engine } from "./engine.js"
import { type ClaimHandle, jobAttributes, settle } from "./handle.js"
import { outboxQueueName, validateName } from "./names.js"
import { fromChecked } from "./duration.js"
import { checkFunction, outboxDefaults, ownOptions, type QueueOptionsInput, resolveQueueOptions } from "./options.js"
import { busyWaitsInterruptible } from "./patience.js"
import { jsonCodec } from "./payload.js"
import { makeQueue } from "./queue.js"
import { attr, linkOf, tracing, withNewSpan } from "./telemetry.js"

const deliverSpan = "alkstore.outbox.deliver"

export const makeOutboxes: Effect.Effect<O.OutboxShape, never, Engine> = Effect.gen(function*() {
  const engine = yield* Engine
  const outbox = (name: string, opts?: QueueOptionsInput) =>
    Effect.map(
      Effect.zip(
        validateName(name),
        Effect.flatMap(fromChecked(ownOptions(opts)), (read) => resolveQueueOptions(outboxDefaults, read))
      ),
      ([name, stamp]): O.OutboxHandle => {
        const queueName = outboxQueueName(name)
        // A delivery's span is named for the outbox, in `run` as in `runOnce`.
        const queue = makeQueue(engine, queueName, stamp, jsonCodec, {
          name: deliverSpan,
          attributes: { [attr.outbox]: name }
        })
        /** One delivery and its settling; in its own span (linked to the enqueuer) when this fiber traces. */
        const deliverOne = <E, R>(
          handle: ClaimHandle<unknown>,
          deliver: O.Deliver<E, R>,
          restore: <X, E2, R2>(effect: Effect.Effect<X, E2, R2>) => Effect.Effect<X, E2, R2>
        ) => {
          const delivered = Effect.suspend(() => restore(deliver(handle.job, handle))).pipe(
            Effect.exit,
            Effect.flatMap((exit: Exit.Exit<void, unknown>) => settle(handle, exit))
          )
          return Effect.withFiberRuntime<boolean, InvalidOptions | SqlError, R>((fiber) => {
            if (!tracing(fiber)) return Effect.as(delivered, true)
            const link = linkOf(handle.row.trace_context)
            return withNewSpan(
              deliverSpan,
              { [attr.outbox]: name, ...jobAttributes(queueName, handle.row) },
              (span) => Effect.map(delivered, (outcome) => {
                span.attribute(attr.outcome, outcome)
                return true
              }),
              { kind: "consumer", root: true, ...(link === undefined ? {} : { links: [link] }) }
            )
          })
        }
        return {
          name,
          enqueue: queue.enqueue,
          runOnce: (workerId, deliver) =>
            // Before the claim: a delivery that is not a function would spend the claimed job's attempt.
            Effect.zipRight(checkFunction("deliver", deliver), Effect.uninterruptibleMask((restore) =>
              Effect.flatMap(
                // Nothing is written while the claim waits out a busy file: a stop may end those waits (patience.ts).
                Effect.locally(queue.claim(workerId), busyWaitsInterruptible, true),
                Option.match({
                  onNone: () => Effect.succeed(false),
                  onSome: (handle) => deliverOne(handle as ClaimHandle<unknown>, deliver, restore)
                })
              )
            )),
          run: (workerId, deliver, opts) => Effect.zipRight(checkFunction("deliver", deliver), queue.process(workerId, deliver, opts)),
          stats: queue.stats,
          dead: queue.dead,
          requeueDead: queue.requeueDead,
          purgeDead: queue.purgeDead,
          getJob: queue.getJob
        }
      }
    )
  return { outbox }
})
