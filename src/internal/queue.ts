import { SqlError } from "@effect/sql/SqlError"
import { Clock, Context, Duration, Effect, Exit, type Fiber, FiberRef, HashSet, Option, type Tracer } from "effect"
import type * as Q from "../Queues.js"
import { InvalidOptions, type InvalidPayload } from "../StoreError.js"
import { backoffMillis } from "./backoff.js"
import { isInvalid } from "./duration.js"
import { type EngineShape, type Fence, signalOnCommit } from "./engine.js"
import {
  checkEnqueue,
  type EnqueueOptionsInput,
  jobOf,
  positiveCount,
  type ResolvedEnqueue,
  type Stamp,
  validateText
} from "./options.js"
import { type ClaimHandle, makeHandles } from "./handle.js"
import { attr, inSpan, queueMetrics, traced, traceparentOf, tracing } from "./telemetry.js"
import { type PayloadCodec, thrownProblem } from "./payload.js"
import type { Quiet, WakeReason } from "./wake.js"
import type { FlowProbe } from "./engine.js"
import { makeInspection } from "./queueInspection.js"
import { makeProcess } from "./worker.js"
import { makeStream } from "./stream.js"
import { makeAckAll } from "./ackAll.js"
import { makeAckAndClaim } from "./ackAndClaim.js"
import { busyWaitsInterruptible, givingBack } from "./patience.js"
import { statementStop } from "./stoppableClaim.js"
import { outsideTransactions } from "./transactionOwner.js"
import {
  ackClaimWithin,
  claimWithin,
  limitedWithin,
  type ClaimOne,
  type QueueInternals,
  type Restore,
  type TakeOptions,
  takeWithin
} from "./queueInternals.js"

const checkWorker = (workerId: string) => validateText("workerId", workerId)

/** The fiber's clock (TestClock included). */
const clockOf = (fiber: Fiber.RuntimeFiber<any, any>) => Context.get(fiber.currentDefaultServices, Clock.Clock)

/** The fiber's clock, read synchronously. */
const nowOf = (fiber: Fiber.RuntimeFiber<any, any>) => clockOf(fiber).unsafeCurrentTimeMillis()

export const backoff = (base: Duration.DurationInput, attempts: number): Duration.Duration =>
  Duration.millis(backoffMillis(Duration.toMillis(Duration.decode(base)), attempts))

/**
 * One queue over the engine, engine-free: validation, stamping, fencing,
 * the retry curve and waiting live here; the engine runs the SQL. `name` is
 * already validated (or an engine-derived name such as an outbox's).
 */
export const makeQueue = <A>(
  engine: EngineShape,
  name: string,
  stamp: Stamp,
  codec: PayloadCodec<A>,
  /** The per-job span of `process` (an outbox names its own), and attributes every span of it carries. */
  processSpan: { readonly name: string; readonly attributes: Record<string, unknown> } = {
    name: "alkstore.queue.process",
    attributes: {}
  }
): Q.Queue<A> & QueueInternals<A> => {
  const storage = engine.queues
  const now = Clock.currentTimeMillis
  const signal = (count: number) => signalOnCommit(engine, name, count)
  const m = queueMetrics(name)
  const queueAttributes = () => ({ [attr.queue]: name })
  const claimAttributes = (workerId: string) => () => ({ [attr.queue]: name, [attr.workerId]: workerId })
  const claimOutcome = (handles: ReadonlyArray<ClaimHandle<A>>, span: Tracer.Span) => {
    span.attribute(attr.count, handles.length)
    span.attribute(attr.outcome, handles.length > 0 ? "claimed" : "empty")
    if (handles.length === 1) {
      span.attribute(attr.jobId, handles[0]!.row.id)
      span.attribute(attr.attempt, handles[0]!.row.attempts)
    }
  }

  const flow = engine.flow
  // Waiters here and in other processes read again (on commit; other processes by NOTIFY where the engine needs it).
  const tellWaiters = Effect.suspend(() => Effect.zipRight(signal(1), flow.freed(name)))
  // A slot of a limited queue freed by an ack: wake a waiter here, and other processes.
  const ackFreed = Effect.suspend(() => (flow.memory.known(name) ? tellWaiters : Effect.void))
  // Freed by a death, a cancel or an ack of many: their statements tell other processes themselves where the
  // queue has limits (PostgreSQL's NOTIFY, sent on commit, so a caller cut off before the answer leaves nobody
  // uninformed; SQLite's commits tell by themselves). Here, a waiter is held back by limits only where this
  // process has seen the queue limited.
  const freed = Effect.suspend(() => (flow.memory.known(name) ? signal(1) : Effect.void))
  // A limited queue's ack tells other processes in its own statement where the engine can (PostgreSQL).
  const ackOf = (fence: Fence) =>
    flow.ackFreeing !== undefined && flow.memory.known(name)
      ? Effect.tap(flow.ackFreeing(fence, name), (done) => (done ? signal(1) : Effect.void))
      : Effect.tap(storage.ack(fence), (done) => (done ? ackFreed : Effect.void))
  const { toHandles } = makeHandles(name, storage, signal, codec, m, freed, ackOf, tellWaiters, engine.afterCommit)

  const claimUpTo = (workerId: string, n: number): Effect.Effect<ReadonlyArray<ClaimHandle<A>>, SqlError> =>
    Effect.withFiberRuntime((fiber) => {
      // A round that met rows it could not hand out (buried, or lost while renewed) claims again, from now.
      const round = (
        collected: ReadonlyArray<ClaimHandle<A>>
      ): Effect.Effect<ReadonlyArray<ClaimHandle<A>>, SqlError> => {
        const claimed = storage.claim(name, workerId, clockOf(fiber), n - collected.length).pipe(
          Effect.flatMap((rows) => toHandles(rows, nowOf(fiber))),
          Effect.flatMap(({ buried, handles, lost }) => {
            const all = collected.length === 0 ? handles : [...collected, ...handles]
            return buried + lost > 0 && all.length < n ? round(all) : Effect.succeed(all)
          })
        )
        // A later round that fails gives back what the earlier ones claimed: the call's error leaves no job
        // claimed without a handle (docs/guarantees.md).
        return collected.length === 0 ? claimed : Effect.onError(claimed, () => releaseUnhanded(collected))
      }
      return round([])
    })

  /**
   * Claims up to `n`, waiting while there is nothing. Only the wait is
   * interruptible (`restore`): a claim that took rows always returns them.
   * Each round holds its ticket only while it runs, so a round that fails
   * (a storage error after the ticket was taken) leaves none behind.
   *
   * `quietSince`: the wake hub's generation of this queue taken just before
   * a claim at `at` that found nothing (the worker's fused ack + claim). When it has
   * not moved by the time this round holds its ticket, nothing committed
   * after that claim's snapshot has been announced, and anything announced
   * from now on wakes the ticket: the claim was this round's read, and the
   * round goes straight to its wait (one round trip fewer between a job and
   * the worker's readiness for the next; docs/performance-pg.md).
   */
  const takeUpTo = (
    workerId: string,
    n: number,
    restore: Restore,
    options?: TakeOptions<A>
  ): Effect.Effect<ReadonlyArray<ClaimHandle<A>>, Q.WaitError> => {
    // A claim writes nothing until it gets through: its waits on a busy file may end on interruption (patience.ts),
    // and a wait on the server ends the caller's wait, not the claim (stoppableClaim.ts). A caller's own claim
    // (a PersistedQueue's: prefetched elements, claims shared by concurrent takes) keeps to the caller's fiber.
    const claimOnce = Effect.locally(options?.claim ?? claimUpTo(workerId, n), busyWaitsInterruptible, true)
    const claim = storage.claimsWaitOnServer && options?.claim === undefined
      ? Effect.locally(claimOnce, statementStop, { restore, inBackground: engine.lifetime.background })
      : claimOnce
    // A wake acted on after its ticket was given back (a claim at once, or a re-read in the next round) is
    // handed on when that step is cut off before it claimed or read: another waiter of the queue would
    // otherwise sleep to its fallback poll with the job there (docs/waking.md).
    const handingOn = (reason: WakeReason) => Effect.sync(() => engine.wake.handOn(name, reason))
    const round = (quiet?: Quiet, woken?: WakeReason): Effect.Effect<ReadonlyArray<ClaimHandle<A>>, Q.WaitError> =>
      Effect.flatMap(
        engine.wake.withTicket(name, (ticket) => {
          let waiting = false
          const body = Effect.gen(function*() {
            const at = yield* now
            // Asks with a read first, so idle waiters never write; on a queue seen
            // limited that read is the flow walk's (docs/flow-control.md).
            // A claim that just found nothing, with no signal since, is that read.
            let probe: FlowProbe | undefined
            const unchanged = quiet !== undefined && !flow.memory.known(name) && engine.wake.generation(name) === quiet.generation
            // The reads write nothing: an interruption may end them (`restore`), as it may the wait.
            const look = !unchanged && (flow.memory.known(name)
              ? (probe = yield* restore(flow.probe(name, at))).claimable || !probe.limited
              : yield* restore(storage.hasClaimable(name, at)))
            const handles = look ? yield* claim : []
            if (handles.length > 0) {
              ticket.cancel()
              engine.wake.signal(name, 1) // pass the baton: there may be more
              return handles
            }
            // Held back by a limit: also wake when its rate window admits the next claim. A claim that took
            // nothing after a probe that found work lost it to another process's claim, which may have
            // filled the window the probe saw open: read the window again, or no deadline would be its.
            if ((probe === undefined || look) && flow.memory.known(name)) probe = yield* restore(flow.probe(name, at))
            const reopenAt = probe?.reopenAt ?? null
            const deadline = Option.map(
              // Deadlines from the claim's own time: one that fell due since is waited for 0 ms.
              yield* restore(storage.nextDeadline(name, unchanged ? quiet.at : at)),
              (d) => (reopenAt === null ? d : Math.min(d, reopenAt))
            ).pipe(Option.orElse(() => Option.fromNullable(reopenAt)))
            const poll = at + engine.settings.fallbackPollMillis
            waiting = true
            return yield* restore(ticket.waitUntil(Option.match(deadline, { onNone: () => poll, onSome: (d) => Math.min(d, poll) })))
          })
          return woken === undefined ? body : Effect.onError(body, () => (waiting ? Effect.void : handingOn(woken)))
        }),
        // A signal from this process means work is there: claim at once; any other wake reads first.
        (outcome: WakeReason | ReadonlyArray<ClaimHandle<A>>) =>
          typeof outcome !== "string"
            ? Effect.succeed(outcome)
            : outcome === "signalled"
            ? Effect.flatMap(Effect.onError(claim, () => handingOn("signalled")), afterClaim)
            : round(undefined, outcome)
      )
    // Claiming at once skips the ticket and the read before the claim: a drain's every take is a first
    // round, and a wait signalled from this process means work is there. No ticket is needed while
    // claiming, only before a wait: a claim that finds nothing takes a ticket in `round` and reads
    // again before it waits, so a signal meanwhile is not lost (it costs such a take one more read).
    const afterClaim = (handles: ReadonlyArray<ClaimHandle<A>>): Effect.Effect<ReadonlyArray<ClaimHandle<A>>, Q.WaitError> => {
      if (handles.length === 0) return round()
      engine.wake.signal(name, 1) // pass the baton: there may be more
      return Effect.succeed(handles)
    }
    const atOnce: Effect.Effect<ReadonlyArray<ClaimHandle<A>>, Q.WaitError> = Effect.flatMap(claim, afterClaim)
    return options?.claimAtOnce === true ? atOnce : round(options?.quietSince)
  }

  /** Gives claims back (no attempt spent) in one transaction; on failure they return when their lease lapses. */
  const releaseUnhanded = (handles: ReadonlyArray<ClaimHandle<A>>) =>
    handles.length === 0 ? Effect.void : givingBack(
      engine.transaction(Effect.forEach(handles, (handle) => handle.release, { discard: true })).pipe(
        Effect.catchAll((error) =>
          Effect.logWarning(`alkstore: releasing ${handles.length} unconsumed claims of ${name} failed; they return when their lease lapses`, error)
        )
      ),
      undefined,
      `${handles.length} unconsumed claims of ${name}`
    )

  /**
   * A claim of up to `n` whose handles reach the caller or are given back:
   * where an interruption can land after the statement committed and before
   * its answer arrived (`claimsCanBeCutOff`: PostgreSQL, an application's
   * client), the claim runs uninterruptibly as `take`'s does (only its waits
   * that write nothing end at an interruption) and an interruption seen after
   * it gives the claims back. Interruptible, the claimed rows were dropped, an
   * attempt spent, until their lease lapsed (dead, unrun, on their last).
   * Not a stoppable claim (stoppableClaim.ts), unlike a take's: these calls
   * do not wait for work (as a fiber per claim, a stop cost PostgreSQL's
   * claim + ack ~8%, docs/performance-pg.md); one whose statement waits on
   * another session's lock ends when that statement does.
   * (`FiberRef.getAndSet`/`set` and a look at the fiber's interruptors, not
   * `Effect.locally` and `onInterrupt`: those cost a claim ~10 µs in a fresh
   * process.)
   */
  const claimHanded = (workerId: string, n: number) => {
    const claim = claimTraced(workerId, claimUpTo(workerId, n), (handles) => handles)
    if (!storage.claimsCanBeCutOff) return claim
    return Effect.uninterruptible(Effect.flatMap(FiberRef.getAndSet(busyWaitsInterruptible, true), (before) =>
      Effect.flatMap(Effect.exit(claim), (claimed) =>
        Effect.zipRight(
          FiberRef.set(busyWaitsInterruptible, before),
          Exit.isFailure(claimed) ? claimed : Effect.descriptorWith((fiber) =>
            HashSet.size(fiber.interruptors) === 0
              ? Effect.succeed(claimed.value)
              : Effect.zipRight(releaseUnhanded(claimed.value), Effect.interrupt)
          )
        ))))
  }

  const process = makeProcess<A>({ engine, name, metrics: m, processSpan, toHandles, takeUpTo })

  const newJob = (resolved: ResolvedEnqueue, payload: string, at: number, traceContext: string | undefined) =>
    jobOf(name, resolved, payload, at, traceContext)

  // The hot path: validation and encoding are plain functions, and where the engine can, the insert runs
  // in place (no effect of its own); otherwise it waits for the connection as an effect.
  const enqueueIn = (
    fiber: Fiber.RuntimeFiber<any, any>,
    payload: A,
    opts: Q.EnqueueOpts | undefined
  ): Effect.Effect<number, InvalidOptions | InvalidPayload | SqlError> => {
    const at = nowOf(fiber)
    const resolved = checkEnqueue(stamp, opts as EnqueueOptionsInput | undefined, at)
    if (isInvalid(resolved)) return Effect.fail(resolved)
    const encoded = codec.encode(payload)
    if (typeof encoded !== "string") return Effect.fail(encoded)
    const job = newJob(resolved, encoded, at, traceparentOf(fiber.currentContext))
    if (storage.insertOneNow !== undefined) {
      let id: number | undefined
      try {
        id = storage.insertOneNow(fiber.currentContext, job)
      } catch (cause) {
        return cause instanceof SqlError ? Effect.fail(cause) : Effect.die(cause)
      }
      if (id !== undefined) {
        engine.signal(fiber.currentContext, name, 1)
        m.enqueued(1)
        return Effect.succeed(id)
      }
    }
    return Effect.map(storage.insertOne(job), (id) => {
      engine.signal(fiber.currentContext, name, 1)
      m.enqueued(1)
      return id
    })
  }

  const enqueueBatchIn = (
    fiber: Fiber.RuntimeFiber<any, any>,
    payloads: Iterable<A>,
    opts: Q.EnqueueOpts | undefined
  ): Effect.Effect<ReadonlyArray<number>, InvalidOptions | InvalidPayload | SqlError> => {
    const at = nowOf(fiber)
    const resolved = checkEnqueue(stamp, opts as EnqueueOptionsInput | undefined, at)
    if (isInvalid(resolved)) return Effect.fail(resolved)
    const traceContext = traceparentOf(fiber.currentContext)
    const encoded: Array<string> = []
    try {
      for (const payload of payloads) {
        const text = codec.encode(payload)
        if (typeof text !== "string") return Effect.fail(text)
        encoded.push(text)
      }
    } catch (cause) {
      // The caller's iterable threw (the codec itself never does): the payloads' problem, not a defect.
      return Effect.fail(thrownProblem(cause, "read"))
    }
    // One key names one live job: a shared key would silently collapse the batch into its first payload.
    if (resolved.key !== undefined && encoded.length > 1) {
      return Effect.fail(
        new InvalidOptions({ field: "key", reason: "a batch of more than one payload cannot share one idempotency key" })
      )
    }
    if (encoded.length === 0) return Effect.succeed([])
    // The jobs differ in their payloads alone: where the engine can, they go in as one template and the payloads.
    const inserted = storage.insertPayloads !== undefined && resolved.key === undefined
      ? storage.insertPayloads(newJob(resolved, "", at, traceContext), encoded)
      : storage.insert(encoded.map((payload) => newJob(resolved, payload, at, traceContext)))
    return Effect.map(inserted, (ids) => {
      engine.signal(fiber.currentContext, name, encoded.length)
      m.enqueued(encoded.length)
      return ids
    })
  }

  const claimTraced = <X, E>(
    workerId: string,
    effect: Effect.Effect<X, E>,
    handlesOf: (x: X) => ReadonlyArray<ClaimHandle<A>>
  ) => traced("alkstore.queue.claim", claimAttributes(workerId), effect, (x, span) => claimOutcome(handlesOf(x), span))

  const takeUnder = (workerId: string, restore: Restore, claimAtOnce = false, claimOne?: ClaimOne<A>) =>
    Effect.zipRight(
      checkWorker(workerId),
      claimTraced(
        workerId,
        Effect.map(
          takeUpTo(workerId, 1, restore, {
            claimAtOnce,
            claim: claimOne as Effect.Effect<ReadonlyArray<ClaimHandle<A>>, SqlError> | undefined
          }),
          (handles) => handles[0]!
        ),
        (handle) => [handle]
      )
    )

  return {
    name,
    // Untraced, the enqueue is the same single step as ever (one fiber-runtime read).
    enqueue: (payload, opts) =>
      Effect.withFiberRuntime((fiber) =>
        tracing(fiber)
          ? inSpan(
            "alkstore.queue.enqueue",
            queueAttributes(),
            Effect.withFiberRuntime((inner) => enqueueIn(inner, payload, opts)),
            (id, span) => span.attribute(attr.jobId, id),
            { kind: "producer" }
          )
          : enqueueIn(fiber, payload, opts)
      ),
    enqueueBatch: (payloads, opts) =>
      Effect.withFiberRuntime((fiber) =>
        tracing(fiber)
          ? inSpan(
            "alkstore.queue.enqueue_batch",
            queueAttributes(),
            Effect.withFiberRuntime((inner) => enqueueBatchIn(inner, payloads, opts)),
            (ids, span) => span.attribute(attr.count, ids.length),
            { kind: "producer" }
          )
          : enqueueBatchIn(fiber, payloads, opts)
      ),
    claim: (workerId) =>
      Effect.zipRight(checkWorker(workerId), Effect.map(claimHanded(workerId, 1), (handles) => Option.fromNullable(handles[0]))),
    claimBatch: (workerId, n) =>
      Effect.zipRight(Effect.zipRight(checkWorker(workerId), positiveCount("batch", n)), claimHanded(workerId, n)),
    ackAll: makeAckAll<A>({ name, storage, metrics: m, freed }),
    // The read and the claim run uninterruptibly (only the wait is restored): an interruption that lands
    // meanwhile is seen as the handle is handed out, and gives the claim back (no attempt spent) rather
    // than leaving it claimed, unseen, until its lease lapses.
    take: (workerId) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.flatMap(takeUnder(workerId, restore), (handle) =>
          Effect.onInterrupt(restore(Effect.succeed(handle)), () => Effect.ignore(handle.release)))
      ),
    [takeWithin]: (workerId, restore, claimOne) => takeUnder(workerId, restore, true, claimOne),
    [claimWithin]: (workerId, n) => claimUpTo(workerId, n),
    [ackClaimWithin]: makeAckAndClaim(storage, name, m, toHandles),
    [limitedWithin]: () => flow.memory.known(name),
    stream: makeStream<A>({ name, processSpan, takeUpTo, releaseUnhanded, claimTraced, onStoreClose: engine.lifetime.onClose }),
    // Stopped by the store's close, while its connection still works (lifetime.ts).
    // Never inside the transaction it may have been started in (transactionOwner.ts).
    process: (workerId, handler, opts) => engine.lifetime.supervise(outsideTransactions(process(workerId, handler, opts))),
    ...makeInspection<A>(engine, name, freed)
  }
}
