import { Effect, Exit, Fiber } from "effect"
import type { Restore } from "./queueInternals.js"

/**
 * A claim whose statement can wait on the server (PostgreSQL: a row or
 * table lock another session holds — an application's open transaction on
 * a queue's limits row, an index build — or a pool with no connection free)
 * for as long as that lasts, made stoppable: it runs in a fiber of its own,
 * its caller waits for it through `restore`, and an interruption ends that
 * wait at once. The statement itself is not cut off — an answer lost after
 * it committed would leave its jobs claimed, an attempt spent, until their
 * lease lapsed — but finishes in the background (`inBackground`: the store's
 * close waits for it), and whatever it claimed is given back (`giveBack`, no
 * attempt spent).
 */
export const stoppableClaim = <H, E>(
  claim: Effect.Effect<ReadonlyArray<H>, E>,
  restore: Restore,
  inBackground: (effect: Effect.Effect<void>) => Effect.Effect<void>,
  giveBack: (handles: ReadonlyArray<H>) => Effect.Effect<void>
): Effect.Effect<ReadonlyArray<H>, E> =>
  Effect.flatMap(Effect.forkDaemon(claim), (fiber) =>
    Effect.onInterrupt(restore(Fiber.join(fiber)), () =>
      inBackground(Effect.flatMap(Fiber.await(fiber), (exit) => (Exit.isSuccess(exit) ? giveBack(exit.value) : Effect.void)))))
