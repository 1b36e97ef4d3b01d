import { SqlError } from "@effect/sql/SqlError"
import { Channel, Chunk, Clock, Context, Duration, Effect, Exit, type Fiber, Option, Schedule, Stream } from "effect"
import type * as Q from "../Queues.js"
import { InvalidOptions } from "../StoreError.js"
import { backoffMillis } from "./backoff.js"
import { isInvalid, optionalDurationMillis } from "./duration.js"
import { Engine, type EngineShape, type Fence, type JobRow, type NewJob, signalOnCommit } from "./engine.js"
import { checkName } from "./names.js"
import {
  checkEnqueue,
  type EnqueueOptionsInput,
  positiveCount,
  type QueueOptionsInput,
  queueDefaults,
  type ResolvedEnqueue,
  resolveQueueOptions,
  type Stamp,
  validateText
} from "./options.js"
import { type ClaimHandle, makeHandles, oldestPendingAge, settle, storedJob } from "./handle.js"
import { jsonCodec, type PayloadCodec, schemaCodec } from "./payload.js"
import { transientRetry } from "./transient.js"
import type { WakeReason } from "./wake.js"

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
  codec: PayloadCodec<A>
): Q.Queue<A> => {
  const storage = engine.queues
  const now = Clock.currentTimeMillis
  const signal = (count: number) => signalOnCommit(engine, name, count)

  const { toHandles } = makeHandles(name, storage, signal, codec)

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
            // other wake asks with a read first, so idle waiters never write.
            const look = reason === "signalled" || (yield* storage.hasClaimable(name, at))
            const handles = look ? yield* claimUpTo(workerId, n) : []
            if (handles.length > 0) {
              ticket.cancel()
              engine.wake.signal(name, 1) // pass the baton: there may be more
              return handles
            }
            const deadline = yield* storage.nextDeadline(name, at)
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
  const ackThenClaim = (handle: ClaimHandle<A>, workerId: string) =>
    Effect.withFiberRuntime<Option.Option<ClaimHandle<A>>, SqlError>((fiber) => {
      const at = nowOf(fiber)
      if (storage.ackAndClaimNow !== undefined) {
        let result: { readonly rows: ReadonlyArray<JobRow> } | undefined
        try {
          result = storage.ackAndClaimNow(fiber.currentContext, handle.fence, name, workerId, at, 1)
        } catch (cause) {
          return cause instanceof SqlError ? Effect.fail(cause) : Effect.die(cause)
        }
        if (result !== undefined) return nextOf(result.rows, at)
      }
      return Effect.flatMap(storage.ackAndClaim(handle.fence, name, workerId, at, 1), ({ rows }) => nextOf(rows, at))
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
        const runOne = (handle: ClaimHandle<A>): Effect.Effect<Option.Option<ClaimHandle<A>>, InvalidOptions | SqlError, R> => {
          // The handler, with its heartbeat when asked, runs interruptible: the worker's
          // interruption reaches it (and the beat) and its claim is then released.
          const work = Effect.suspend(() => handler(handle.job, handle))
          const run = restore(opts?.heartbeat === true ? withHeartbeat(handle, work) : work)
          return Effect.flatMap(
            Effect.exit(run),
            (exit) => Exit.isSuccess(exit) ? ackThenClaim(handle, workerId) : Effect.as(settle(handle, exit), Option.none())
          )
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
    }).pipe(Effect.withSpan("Queue.process", { attributes: { queue: name, workerId } }))

  const newJob = (resolved: ResolvedEnqueue, payload: string, at: number): NewJob => ({
    queue: name,
    payload,
    createdAt: at,
    priority: resolved.priority,
    runAt: resolved.runAt,
    maxAttempts: resolved.maxAttempts,
    visibilityTimeoutMillis: resolved.visibilityTimeoutMillis,
    backoffBaseMillis: resolved.backoffBaseMillis,
    expiresAt: resolved.expiresAt,
    key: resolved.key
  })

  return {
    name,
    // The hot path: validation and encoding are plain functions, and where the engine can, the insert runs
    // in place (no effect of its own); otherwise it waits for the connection as an effect.
    enqueue: (payload, opts) =>
      Effect.withFiberRuntime((fiber) => {
        const at = nowOf(fiber)
        const resolved = checkEnqueue(stamp, opts as EnqueueOptionsInput | undefined, at)
        if (isInvalid(resolved)) return Effect.fail(resolved)
        const encoded = codec.encode(payload)
        if (typeof encoded !== "string") return Effect.fail(encoded)
        const job = newJob(resolved, encoded, at)
        if (storage.insertOneNow !== undefined) {
          let id: number | undefined
          try {
            id = storage.insertOneNow(fiber.currentContext, job)
          } catch (cause) {
            return cause instanceof SqlError ? Effect.fail(cause) : Effect.die(cause)
          }
          if (id !== undefined) {
            engine.signal(fiber.currentContext, name, 1)
            return Effect.succeed(id)
          }
        }
        return Effect.map(storage.insertOne(job), (id) => {
          engine.signal(fiber.currentContext, name, 1)
          return id
        })
      }),
    enqueueBatch: (payloads, opts) =>
      Effect.withFiberRuntime((fiber) => {
        const at = nowOf(fiber)
        const resolved = checkEnqueue(stamp, opts as EnqueueOptionsInput | undefined, at)
        if (isInvalid(resolved)) return Effect.fail(resolved)
        const jobs: Array<NewJob> = []
        for (const payload of payloads) {
          const encoded = codec.encode(payload)
          if (typeof encoded !== "string") return Effect.fail(encoded)
          jobs.push(newJob(resolved, encoded, at))
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
          return ids
        })
      }),
    claim: (workerId) =>
      Effect.zipRight(
        checkWorker(workerId),
        Effect.map(claimUpTo(workerId, 1), (handles) => Option.fromNullable(handles[0]))
      ),
    claimBatch: (workerId, n) =>
      Effect.zipRight(
        Effect.zipRight(checkWorker(workerId), positiveCount("batch", n)),
        claimUpTo(workerId, n)
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
        return fences.length === 0 ? Effect.succeed([]) : storage.ackMany(fences)
      }),
    take: (workerId) =>
      Effect.zipRight(
        checkWorker(workerId),
        Effect.uninterruptibleMask((restore) => Effect.map(takeUpTo(workerId, 1, restore), (handles) => handles[0]!))
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
    getJob: (id) => Effect.map(storage.get(name, id), Option.map(storedJob)),
    cancel: (id) => storage.cancel(name, id),
    stats: Effect.gen(function*() {
      const at = yield* now
      const row = yield* storage.stats(name, at)
      return {
        pending: row.pending,
        scheduled: row.scheduled,
        claimed: row.claimed,
        dead: row.dead,
        oldestPendingAge: oldestPendingAge(at, row.oldestPendingRunAt)
      }
    }),
    dead: (opts) =>
      Effect.flatMap(positiveCount("limit", opts?.limit ?? 100), (limit) =>
        Effect.map(storage.dead(name, limit), (rows) => rows.map(storedJob))),
    requeueDead: (id) =>
      Effect.flatMap(now, (at) => storage.requeueDead(name, id, at)).pipe(
        Effect.tap((requeued) => (requeued ? signal(1) : Effect.void))
      ),
    purgeDead: (olderThan) =>
      Effect.gen(function*() {
        const age = yield* optionalDurationMillis("olderThan", olderThan)
        return yield* storage.purgeDead(name, age === undefined ? undefined : (yield* now) - age)
      })
  }
}

export const makeQueues: Effect.Effect<Q.QueuesShape, never, Engine> = Effect.gen(function*() {
  const engine = yield* Engine
  const queue = (name: string, opts?: QueueOptionsInput) =>
    Effect.gen(function*() {
      const nameError = checkName(name)
      if (nameError !== undefined) return yield* nameError
      const stamp = yield* resolveQueueOptions(queueDefaults, opts)
      const codec = opts?.schema === undefined ? jsonCodec : schemaCodec(opts.schema)
      return makeQueue(engine, name, stamp, codec as PayloadCodec<unknown>)
    }).pipe(Effect.withSpan("Queues.queue", { attributes: { name } }))
  return {
    queue: queue as Q.QueuesShape["queue"],
    maintenance: Effect.gen(function*() {
      const at = yield* Clock.currentTimeMillis
      return yield* engine.queues.maintenance(at, at - engine.settings.deadRetentionMillis)
    }).pipe(Effect.withSpan("Queues.maintenance"))
  }
})
