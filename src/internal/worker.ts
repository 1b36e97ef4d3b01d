import { SqlError } from "@effect/sql/SqlError"
import { Clock, Context, Duration, Effect, Exit, Fiber, Option, type Tracer } from "effect"
import type * as Q from "../Queues.js"
import type { InvalidOptions } from "../StoreError.js"
import type { EngineShape, JobRow } from "./engine.js"
import { fromChecked, maxRenewalMillis } from "./duration.js"
import { eventLoopTurn, turnEveryMillis } from "./eventLoop.js"
import { type ClaimHandle, jobAttributes, settle } from "./handle.js"
import { checkFunction, maxProcessConcurrency, ownOptions, positiveCount, validateText } from "./options.js"
import { untilFirstFailure } from "./race.js"
import { realClock } from "./realClock.js"
import type { StatementStop } from "./stoppableClaim.js"
import { attr, describing, linkOf, type QueueMetrics, tracing, withNewSpan } from "./telemetry.js"
import { transientRetry } from "./transient.js"
import type { TakeOptions } from "./queueInternals.js"
import type { Quiet } from "./wake.js"

const checkWorker = (workerId: string) => validateText("workerId", workerId)

const nowOf = (fiber: Fiber.RuntimeFiber<any, any>) =>
  Context.get(fiber.currentDefaultServices, Clock.Clock).unsafeCurrentTimeMillis()

/** What a queue's worker is built from (src/internal/queue.ts). */
export interface WorkerParts<A> {
  readonly engine: EngineShape
  readonly name: string
  readonly metrics: QueueMetrics
  /** The per-job span of `process` (an outbox names its own), and attributes every span of it carries. */
  readonly processSpan: { readonly name: string; readonly attributes: Record<string, unknown> }
  readonly toHandles: (
    rows: ReadonlyArray<JobRow>,
    current: number
  ) => Effect.Effect<{ readonly handles: ReadonlyArray<ClaimHandle<A>> }, SqlError>
  /** Waits for and claims up to `n` jobs, the wait interruptible through `restore`. */
  readonly takeUpTo: (
    workerId: string,
    n: number,
    restore: <X, E, R>(effect: Effect.Effect<X, E, R>) => Effect.Effect<X, E, R>,
    options?: TakeOptions<A>
  ) => Effect.Effect<ReadonlyArray<ClaimHandle<A>>, Q.WaitError>
}

/**
 * A queue's `process`: `concurrency` workers, each running one claim at a
 * time; after a success the ack and the next claim are one step (one
 * transaction, or one statement on PostgreSQL). A storage failure that heals
 * does not end a worker.
 */
export const makeProcess = <A>(
  { engine, metrics: m, name, processSpan, takeUpTo, toHandles }: WorkerParts<A>
): Q.Queue<A>["process"] => {
  const storage = engine.queues
  const nextOfRows = (rows: ReadonlyArray<JobRow>, current: number) =>
    Effect.map(toHandles(rows, current), ({ handles }) => Option.fromNullable(handles[0]))

  // A worker's step between two jobs: in place where the engine can (one effect), else as effects.
  // When it claims nothing, `onEmpty` gets the wake hub's generation from before it and its time,
  // so the worker's wait that follows needs no read of its own (takeUpTo's `quietSince`).
  const ackThenClaim = (
    handle: ClaimHandle<A>,
    workerId: string,
    onAck: ((acked: boolean) => void) | undefined,
    onEmpty: (quiet: Quiet) => void,
    stop: StatementStop | undefined
  ) =>
    Effect.withFiberRuntime<Option.Option<ClaimHandle<A>>, SqlError>((fiber) => {
      const clock = Context.get(fiber.currentDefaultServices, Clock.Clock)
      const at = clock.unsafeCurrentTimeMillis()
      const generation = engine.wake.generation(name)
      const nextOf = (rows: ReadonlyArray<JobRow>, at: number) => {
        if (rows.length === 0) onEmpty({ generation, at })
        return nextOfRows(rows, nowOf(fiber))
      }
      if (storage.ackAndClaimNow !== undefined) {
        let result: { readonly acked: boolean; readonly rows: ReadonlyArray<JobRow> } | undefined
        try {
          result = storage.ackAndClaimNow(fiber.currentContext, handle.fence, name, workerId, clock, 1)
        } catch (cause) {
          return cause instanceof SqlError ? Effect.fail(cause) : Effect.die(cause)
        }
        if (result !== undefined) {
          if (result.acked) m.acked(1)
          onAck?.(result.acked)
          return nextOf(result.rows, at)
        }
      }
      const heard = (acked: boolean) => {
        if (acked) m.acked(1)
        onAck?.(acked)
      }
      // Where its statement can wait on the server (another session's lock), it stops at that statement as a
      // take's claim does (stoppableClaim.ts): the job's ack and whatever the statement claims finish in the
      // background, the claims given back, and the ack is heard of when it comes.
      return Effect.flatMap(
        storage.ackAndClaim(handle.fence, name, workerId, clock, 1, stop && { stop, acked: heard }),
        ({ acked, rows }) => {
          heard(acked)
          return nextOf(rows, at)
        }
      )
    })

  /**
   * The exit of `effect` (the handler, interruptible through the worker's
   * `restore`), run with its claim's lease extended every third of the
   * visibility timeout until that exit is known (never shortened: a lease
   * the handler extended further itself is kept). The beat is a fiber of its
   * own, outside the worker's children and interruptible whatever the
   * caller's region (a worker runs under `uninterruptibleMask`): a stop that
   * interrupts the worker while its handler cannot be interrupted (an
   * uninterruptible handler) waits for the handler with the lease still kept,
   * and the beat ends only once the handler has. A beat that fails (a
   * `SqlError`: busy past its patience, a killed connection) is logged, and
   * the next one comes on the schedule; the beating stops early only when a
   * heartbeat finds the claim lost.
   */
  const withHeartbeat = <X, E, R>(handle: ClaimHandle<A>, effect: Effect.Effect<X, E, R>) => {
    const every = Duration.millis(Math.min(Math.max(1, Duration.toMillis(handle.job.visibilityTimeout) / 3), maxRenewalMillis))
    // Extends only: a lease the handler made longer itself is left as it is.
    const beatOnce = Effect.catchAllCause(handle.keepAlive, (cause) =>
      Effect.as(
        Effect.logWarning(
          `alkstore: a heartbeat of job ${handle.job.id} of ${name} failed; the next one comes on schedule`,
          cause
        ),
        true
      ))
    const beat = Effect.repeat(Effect.delay(beatOnce, every), { while: (alive) => alive })
    return Effect.flatMap(
      Effect.forkDaemon(Effect.interruptible(beat)),
      (beating) => Effect.zipLeft(Effect.exit(effect), Fiber.interrupt(beating))
    )
  }

  const workerRetry = transientRetry({
    firstMillis: 50,
    capMillis: Math.min(engine.settings.fallbackPollMillis, 2_000),
    resetAfterMillis: 10_000
  })

  const process = <E, R>(
    workerId: string,
    handler: (job: Q.Job<A>, handle: Q.JobHandle<A>) => Effect.Effect<void, E, R>,
    given?: Q.ProcessOpts
  ): Effect.Effect<never, InvalidOptions | Q.WaitError, R> =>
    Effect.gen(function*() {
      const opts = yield* fromChecked(ownOptions(given)) // read once: a throwing getter is InvalidOptions
      yield* checkWorker(workerId)
      // Before any claim: a handler that is not a function would spend every claimed job's attempt.
      yield* checkFunction("handler", handler)
      const concurrency = yield* positiveCount("concurrency", opts?.concurrency ?? 1, maxProcessConcurrency)
      const worker = Effect.uninterruptibleMask((restore) => {
        // Set when this worker's last step claimed nothing; its next take starts from it.
        let quiet: Quiet | undefined
        // When this worker last gave the event loop a turn (see `turnEveryMillis`); a job handed
        // on in place after longer than that waits for one first. Real time: it is the event loop's.
        let turnAt = realClock.unsafeCurrentTimeMillis()
        const next = (handle: ClaimHandle<A>) => {
          const now = realClock.unsafeCurrentTimeMillis()
          if (now - turnAt < turnEveryMillis) return Effect.flatMap(runOne(handle), loop)
          turnAt = now
          return Effect.zipRight(eventLoopTurn, Effect.flatMap(runOne(handle), loop))
        }
        const onEmpty = (q: Quiet) => {
          quiet = q
        }
        // The fused ack + claim stops at its statements where they can wait on the server (PostgreSQL).
        const stop: StatementStop | undefined = storage.claimsWaitOnServer
          ? { restore, inBackground: engine.lifetime.background }
          : undefined
        // Runs one claim; after a success, acks it and claims the next in one transaction.
        // The handler's time goes to its histogram; when this fiber traces, the job runs in its
        // own span (a root: one trace per job, linked to the span that enqueued it).
        const runOne = (handle: ClaimHandle<A>): Effect.Effect<Option.Option<ClaimHandle<A>>, InvalidOptions | SqlError, R> =>
          Effect.withFiberRuntime((fiber) => {
            if (!tracing(fiber)) return runJob(fiber, handle, undefined)
            const link = linkOf(handle.row.trace_context)
            return withNewSpan(
              processSpan.name,
              { ...processSpan.attributes, ...jobAttributes(name, handle.row), [attr.workerId]: workerId },
              (span) => Effect.withFiberRuntime((inner) => runJob(inner, handle, span)),
              { kind: "consumer", root: true, ...(link === undefined ? {} : { links: [link] }) }
            )
          })
        const runJob = (
          fiber: Fiber.RuntimeFiber<any, any>,
          handle: ClaimHandle<A>,
          span: Tracer.Span | undefined
        ): Effect.Effect<Option.Option<ClaimHandle<A>>, InvalidOptions | SqlError, R> => {
          // The handler runs interruptible: the worker's interruption reaches it, and its claim is
          // then released (see `settle`). Its exit is taken in the worker's region, and its
          // heartbeat, when asked, lasts until that exit is known (see `withHeartbeat`).
          const work = restore(Effect.suspend(() => handler(handle.job, handle)))
          const run = opts?.heartbeat === true ? withHeartbeat(handle, work) : Effect.exit(work)
          const started = nowOf(fiber)
          return Effect.flatMap(run, (exit) => {
            m.handler(nowOf(fiber) - started)
            if (Exit.isSuccess(exit)) {
              return ackThenClaim(
                handle,
                workerId,
                span && ((acked) => describing(() => span.attribute(attr.outcome, acked ? "acked" : handle.settledAs ?? "lost"))),
                onEmpty,
                stop
              )
            }
            return Effect.as(
              span === undefined
                ? settle(handle, exit)
                : Effect.tap(settle(handle, exit), (outcome) =>
                  describing(() => span.attribute(attr.outcome, outcome === "lost" ? handle.settledAs ?? "lost" : outcome))),
              Option.none()
            )
          })
        }
        // A claim in hand always runs (or is released, when interrupted); with
        // none, `restore(Effect.void)` is where a pending interruption stops the
        // worker before it claims again.
        const loop = (following: Option.Option<ClaimHandle<A>>): Effect.Effect<never, InvalidOptions | Q.WaitError, R> =>
          Option.isSome(following)
            ? next(following.value)
            : restore(Effect.void).pipe(
              Effect.zipRight(Effect.suspend(() => {
                const since = quiet
                quiet = undefined
                return takeUpTo(workerId, 1, restore, { quietSince: since })
              })),
              Effect.flatMap((handles) => runOne(handles[0]!)),
              Effect.flatMap(loop)
            )
        return loop(Option.none())
      }).pipe(
        // A storage failure that heals by itself (busy past its patience, a killed connection, a
        // restarting server) does not end the worker: logged, and the loop starts again on the
        // transient schedule. A claim it held when it failed returns when its lease lapses.
        Effect.tapErrorTag("SqlError", (error) =>
          Effect.logWarning(`alkstore: worker ${workerId} of ${name} met a storage error; it tries again`, error)),
        Effect.retry({ schedule: workerRetry, while: (error) => error._tag === "SqlError" })
      )
      // Not `Effect.all` with concurrency: an interruption before its processing fiber started hung it (race.ts).
      return yield* untilFirstFailure(worker, concurrency)
    }).pipe(Effect.withSpan("alkstore.queue.worker", { attributes: { [attr.queue]: name, [attr.workerId]: workerId } }))

  return process
}
