import { SqlError } from "@effect/sql/SqlError"
import { Channel, Chunk, Clock, Context, Duration, Effect, Exit, type Fiber, Option, Schedule, Stream, type Tracer } from "effect"
import type * as Q from "../Queues.js"
import { InvalidOptions, type InvalidPayload } from "../StoreError.js"
import { backoffMillis } from "./backoff.js"
import { isInvalid } from "./duration.js"
import { type EngineShape, type Fence, type JobRow, type NewJob, signalOnCommit } from "./engine.js"
import {
  checkEnqueue,
  type EnqueueOptionsInput,
  positiveCount,
  type ResolvedEnqueue,
  type Stamp,
  validateText
} from "./options.js"
import { type ClaimHandle, jobAttributes, makeHandles, settle } from "./handle.js"
import {
  attr,
  inSpan,
  linkOf,
  queueMetrics,
  traced,
  traceparentOf,
  tracing,
  withNewSpan
} from "./telemetry.js"
import type { PayloadCodec } from "./payload.js"
import { transientRetry } from "./transient.js"
import type { WakeReason } from "./wake.js"
import type { FlowProbe } from "./engine.js"
import { makeInspection } from "./queueInspection.js"

const checkWorker = (workerId: string) => validateText("workerId", workerId)

/** The fiber's clock, read synchronously (TestClock included). */
const nowOf = (fiber: Fiber.RuntimeFiber<any, any>) =>
  Context.get(fiber.currentDefaultServices, Clock.Clock).unsafeCurrentTimeMillis()

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
): Q.Queue<A> => {
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
  // A slot of a limited queue freed (ack, death, cancel): wake a waiter here, and other processes.
  const freed = Effect.suspend(() => (flow.memory.known(name) ? Effect.zipRight(signal(1), flow.freed(name)) : Effect.void))
  const { toHandles } = makeHandles(name, storage, signal, codec, m, freed)

  const claimUpTo = (workerId: string, n: number): Effect.Effect<ReadonlyArray<ClaimHandle<A>>, SqlError> =>
    Effect.withFiberRuntime((fiber) => {
      const at = nowOf(fiber)
      const round = (
        collected: ReadonlyArray<ClaimHandle<A>>
      ): Effect.Effect<ReadonlyArray<ClaimHandle<A>>, SqlError> =>
        storage.claim(name, workerId, at, n - collected.length).pipe(
          Effect.flatMap((rows) => toHandles(rows, at)),
          Effect.flatMap(({ buried, handles }) => {
            const all = collected.length === 0 ? handles : [...collected, ...handles]
            return buried > 0 && all.length < n ? round(all) : Effect.succeed(all)
          })
        )
      return round([])
    })

  /**
   * Claims up to `n`, waiting while there is nothing. Only the wait is
   * interruptible (`restore`): a claim that took rows always returns them.
   * Each round holds its ticket only while it runs, so a round that fails
   * (a storage error after the ticket was taken) leaves none behind.
   */
  const takeUpTo = (
    workerId: string,
    n: number,
    restore: <X, E, R>(effect: Effect.Effect<X, E, R>) => Effect.Effect<X, E, R>
  ): Effect.Effect<ReadonlyArray<ClaimHandle<A>>, Q.WaitError> => {
    const round = (reason: WakeReason): Effect.Effect<ReadonlyArray<ClaimHandle<A>>, Q.WaitError> =>
      Effect.flatMap(
        engine.wake.withTicket(name, (ticket) =>
          Effect.gen(function*() {
            const at = yield* now
            // A signal from this process means work is there: claim at once. Any
            // other wake asks with a read first, so idle waiters never write; on a
            // queue seen limited that read is the flow walk's (docs/flow-control.md).
            let probe: FlowProbe | undefined
            const look = reason === "signalled" ||
              (flow.memory.known(name)
                ? (probe = yield* flow.probe(name, at)).claimable || !probe.limited
                : yield* storage.hasClaimable(name, at))
            const handles = look ? yield* claimUpTo(workerId, n) : []
            if (handles.length > 0) {
              ticket.cancel()
              engine.wake.signal(name, 1) // pass the baton: there may be more
              return handles
            }
            // Held back by a limit: also wake when its rate window admits the next claim.
            if (probe === undefined && flow.memory.known(name)) probe = yield* flow.probe(name, at)
            const reopenAt = probe?.reopenAt ?? null
            const deadline = Option.map(
              yield* storage.nextDeadline(name, at),
              (d) => (reopenAt === null ? d : Math.min(d, reopenAt))
            ).pipe(Option.orElse(() => Option.fromNullable(reopenAt)))
            const wakeAfter = Option.match(deadline, {
              onNone: () => engine.settings.fallbackPollMillis,
              onSome: (d) => Math.min(d - at, engine.settings.fallbackPollMillis)
            })
            return yield* restore(ticket.wait(wakeAfter))
          })),
        (outcome) => typeof outcome === "string" ? round(outcome) : Effect.succeed(outcome)
      )
    return round("changed")
  }

  /** Gives claims back (no attempt spent) in one transaction; on failure they return when their lease lapses. */
  const releaseUnhanded = (handles: ReadonlyArray<ClaimHandle<A>>) =>
    handles.length === 0 ? Effect.void : engine.transaction(Effect.forEach(handles, (handle) => handle.release, { discard: true })).pipe(
      Effect.catchAll((error) =>
        Effect.logWarning(`alkstore: releasing ${handles.length} unconsumed claims of ${name} failed; they return when their lease lapses`, error)
      )
    )

  const nextOf = (rows: ReadonlyArray<JobRow>, at: number) =>
    Effect.map(toHandles(rows, at), ({ handles }) => Option.fromNullable(handles[0]))

  // A worker's step between two jobs: in place where the engine can (one effect), else as effects.
  const ackThenClaim = (handle: ClaimHandle<A>, workerId: string, onAck?: (acked: boolean) => void) =>
    Effect.withFiberRuntime<Option.Option<ClaimHandle<A>>, SqlError>((fiber) => {
      const at = nowOf(fiber)
      if (storage.ackAndClaimNow !== undefined) {
        let result: { readonly acked: boolean; readonly rows: ReadonlyArray<JobRow> } | undefined
        try {
          result = storage.ackAndClaimNow(fiber.currentContext, handle.fence, name, workerId, at, 1)
        } catch (cause) {
          return cause instanceof SqlError ? Effect.fail(cause) : Effect.die(cause)
        }
        if (result !== undefined) {
          if (result.acked) m.acked(1)
          onAck?.(result.acked)
          return nextOf(result.rows, at)
        }
      }
      return Effect.flatMap(storage.ackAndClaim(handle.fence, name, workerId, at, 1), ({ acked, rows }) => {
        if (acked) m.acked(1)
        onAck?.(acked)
        return nextOf(rows, at)
      })
    })

  /**
   * Runs `effect` with its claim's lease extended every third of the
   * visibility timeout until it ends. The beat is a raced fiber that must be
   * interruptible whatever the caller's region (a worker runs under
   * `uninterruptibleMask`): else the race could never stop it when `effect`
   * ends, and the worker would hang on a lease renewed forever.
   */
  const withHeartbeat = <X, E, R>(handle: Q.JobHandle<A>, effect: Effect.Effect<X, E, R>) => {
    const every = Duration.millis(Math.max(1, Duration.toMillis(handle.job.visibilityTimeout) / 3))
    const beat = handle.heartbeat().pipe(
      Effect.repeat({ schedule: Schedule.spaced(every), while: (alive) => alive }),
      Effect.ignore
    )
    return Effect.raceFirst(effect, Effect.interruptible(Effect.zipRight(Effect.delay(beat, every), Effect.never)))
  }

  const workerRetry = transientRetry({
    firstMillis: 50,
    capMillis: Math.min(engine.settings.fallbackPollMillis, 2_000),
    resetAfterMillis: 10_000
  })

  const process = <E, R>(
    workerId: string,
    handler: (job: Q.Job<A>, handle: Q.JobHandle<A>) => Effect.Effect<void, E, R>,
    opts?: Q.ProcessOpts
  ): Effect.Effect<never, InvalidOptions | Q.WaitError, R> =>
    Effect.gen(function*() {
      yield* checkWorker(workerId)
      const concurrency = yield* positiveCount("concurrency", opts?.concurrency ?? 1)
      const worker = Effect.uninterruptibleMask((restore) => {
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
          // The handler, with its heartbeat when asked, runs interruptible: the worker's
          // interruption reaches it (and the beat) and its claim is then released.
          const work = Effect.suspend(() => handler(handle.job, handle))
          const run = restore(opts?.heartbeat === true ? withHeartbeat(handle, work) : work)
          const started = nowOf(fiber)
          return Effect.flatMap(Effect.exit(run), (exit) => {
            m.handler(nowOf(fiber) - started)
            if (Exit.isSuccess(exit)) {
              return ackThenClaim(handle, workerId, span && ((acked) => span.attribute(attr.outcome, acked ? "acked" : "lost")))
            }
            return Effect.as(
              span === undefined ? settle(handle, exit) : Effect.tap(settle(handle, exit), (outcome) => span.attribute(attr.outcome, outcome)),
              Option.none()
            )
          })
        }
        // A claim in hand always runs (or is released, when interrupted); with
        // none, `restore(Effect.void)` is where a pending interruption stops the
        // worker before it claims again.
        const loop = (next: Option.Option<ClaimHandle<A>>): Effect.Effect<never, InvalidOptions | Q.WaitError, R> =>
          Option.isSome(next)
            ? Effect.flatMap(runOne(next.value), loop)
            : restore(Effect.void).pipe(
              Effect.zipRight(takeUpTo(workerId, 1, restore)),
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
      return yield* Effect.all(Array.from({ length: concurrency }, () => worker), {
        concurrency: "unbounded",
        discard: true
      }).pipe(Effect.zipRight(Effect.never))
    }).pipe(Effect.withSpan("alkstore.queue.worker", { attributes: { [attr.queue]: name, [attr.workerId]: workerId } }))

  const newJob = (resolved: ResolvedEnqueue, payload: string, at: number, traceContext: string | undefined): NewJob => ({
    queue: name,
    payload,
    createdAt: at,
    priority: resolved.priority,
    runAt: resolved.runAt,
    maxAttempts: resolved.maxAttempts,
    visibilityTimeoutMillis: resolved.visibilityTimeoutMillis,
    backoffBaseMillis: resolved.backoffBaseMillis,
    expiresAt: resolved.expiresAt,
    key: resolved.key,
    traceContext,
    group: resolved.group
  })

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
    const jobs: Array<NewJob> = []
    for (const payload of payloads) {
      const encoded = codec.encode(payload)
      if (typeof encoded !== "string") return Effect.fail(encoded)
      jobs.push(newJob(resolved, encoded, at, traceContext))
    }
    // One key names one live job: a shared key would silently collapse the batch into its first payload.
    if (resolved.key !== undefined && jobs.length > 1) {
      return Effect.fail(
        new InvalidOptions({ field: "key", reason: "a batch of more than one payload cannot share one idempotency key" })
      )
    }
    if (jobs.length === 0) return Effect.succeed([])
    return Effect.map(storage.insert(jobs), (ids) => {
      engine.signal(fiber.currentContext, name, jobs.length)
      m.enqueued(jobs.length)
      return ids
    })
  }

  const claimTraced = <X, E>(
    workerId: string,
    effect: Effect.Effect<X, E>,
    handlesOf: (x: X) => ReadonlyArray<ClaimHandle<A>>
  ) => traced("alkstore.queue.claim", claimAttributes(workerId), effect, (x, span) => claimOutcome(handlesOf(x), span))

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
      Effect.zipRight(
        checkWorker(workerId),
        Effect.map(claimTraced(workerId, claimUpTo(workerId, 1), (handles) => handles), (handles) => Option.fromNullable(handles[0]))
      ),
    claimBatch: (workerId, n) =>
      Effect.zipRight(
        Effect.zipRight(checkWorker(workerId), positiveCount("batch", n)),
        claimTraced(workerId, claimUpTo(workerId, n), (handles) => handles)
      ),
    ackAll: (handles) =>
      Effect.suspend((): Effect.Effect<ReadonlyArray<boolean>, InvalidOptions | SqlError> => {
        const fences: Array<Fence> = []
        for (const handle of handles) {
          // The handle's own queue name as its caller gave it, not one read back from the row
          // (nor `handle.job`: a batch acked unread never builds its jobs).
          const { fence, queueName } = handle as Partial<ClaimHandle<A>>
          if (fence === undefined || queueName !== name) {
            return Effect.fail(
              new InvalidOptions({ field: "handles", reason: `a handle of job ${handle.job.id} was not claimed from queue ${name}` })
            )
          }
          fences.push(fence)
        }
        if (fences.length === 0) return Effect.succeed([])
        const acked = Effect.map(storage.ackMany(fences), (results) => {
          let n = 0
          for (const ok of results) if (ok) n++
          if (n > 0) m.acked(n)
          return results
        }).pipe(Effect.tap((results) => (results.includes(true) ? freed : Effect.void)))
        return traced("alkstore.queue.ack_all", queueAttributes, acked, (results, span) => {
          span.attribute(attr.count, results.length)
          span.attribute("alkstore.acked", results.filter((ok) => ok).length)
        })
      }),
    take: (workerId) =>
      Effect.zipRight(
        checkWorker(workerId),
        claimTraced(
          workerId,
          Effect.uninterruptibleMask((restore) => Effect.map(takeUpTo(workerId, 1, restore), (handles) => handles[0]!)),
          (handle) => [handle]
        )
      ),
    // A batch is claimed in one round trip but handed on one handle at a time: whatever ends the stream
    // (a `Stream.take`, interruption, a failure downstream), the claims it never handed on are released.
    stream: (workerId, opts) =>
      Stream.unwrapScoped(Effect.gen(function*() {
        yield* checkWorker(workerId)
        const batch = yield* positiveCount("batch", opts?.batch ?? 1)
        let held: ReadonlyArray<ClaimHandle<A>> = []
        let handed = 0
        yield* Effect.addFinalizer(() => releaseUnhanded(held.slice(handed)))
        const claimBatch = Effect.uninterruptibleMask((restore) =>
          Effect.map(takeUpTo(workerId, batch, restore), (handles) => {
            held = handles
            handed = 0
          })
        )
        // One handle per write, straight from the channel (cheaper per handle than an effect per pull).
        const emit = (): Channel.Channel<Chunk.Chunk<ClaimHandle<A>>, unknown, Q.WaitError, unknown, void, unknown> =>
          Channel.suspend(() =>
            handed < held.length
              ? Channel.flatMap(Channel.write(Chunk.of(held[handed++]!)), emit)
              : Channel.flatMap(claimBatch, emit)
          )
        return Stream.fromChannel(emit())
      })),
    process,
    ...makeInspection<A>(engine, name, freed)
  }
}
