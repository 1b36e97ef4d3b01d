import { Effect, Exit, Option } from "effect"
import type * as O from "../Outbox.js"
import { Engine } from "./engine.js"
import { outboxQueueName, validateName } from "./names.js"
import { outboxDefaults, type QueueOptionsInput, resolveQueueOptions } from "./options.js"
import { jsonCodec } from "./payload.js"
import { settle } from "./handle.js"
import { makeQueue } from "./queue.js"

export const makeOutboxes: Effect.Effect<O.OutboxShape, never, Engine> = Effect.gen(function*() {
  const engine = yield* Engine
  const outbox = (name: string, opts?: QueueOptionsInput) =>
    Effect.map(
      Effect.zip(validateName(name), resolveQueueOptions(outboxDefaults, opts)),
      ([name, stamp]): O.OutboxHandle => {
      const queue = makeQueue(engine, outboxQueueName(name), stamp, jsonCodec)
      return {
        name,
        enqueue: queue.enqueue,
        runOnce: (workerId, deliver) =>
          Effect.uninterruptibleMask((restore) =>
            Effect.flatMap(
              queue.claim(workerId),
              Option.match({
                onNone: () => Effect.succeed(false),
                onSome: (handle) =>
                  Effect.suspend(() => restore(deliver(handle.job, handle))).pipe(
                    Effect.exit,
                    Effect.flatMap((exit: Exit.Exit<void, unknown>) => settle(handle, exit)),
                    Effect.as(true)
                  )
              })
            )
          ).pipe(Effect.withSpan("Outbox.runOnce", { attributes: { name } })),
        run: (workerId, deliver, opts) => queue.process(workerId, deliver, opts),
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
