import type { SqlError } from "@effect/sql/SqlError"
import { Cause, Clock, type Context, type Duration, Effect, Exit, FiberRef, type Tracer } from "effect"
import type * as Q from "../Queues.js"
import { type InvalidOptions, InvalidPayload } from "../StoreError.js"
import { backoffMillis } from "./backoff.js"
import { instantAfter, optionalDurationMillis } from "./duration.js"
import type { Fence, JobRow, QueueStorage } from "./engine.js"
import { causeText, failureText, storableText } from "./errorText.js"
import { JobView } from "./jobView.js"
import type { PayloadCodec } from "./payload.js"
import { attr, type Attributes, describing, type QueueMetrics, traced, wonOrLost } from "./telemetry.js"
import { givingBack, tellingIfCut, wakingAfter } from "./patience.js"
import { inTransaction } from "./transactionOwner.js"

const errorText = (error: unknown): string | undefined =>
  error === undefined ? undefined : storableText(typeof error === "string" ? error : failureText(error))

/** A handle with its fence and row, for the queue's own fused and batch operations. */
export interface ClaimHandle<A> extends Q.JobHandle<A> {
  readonly fence: Fence
  readonly row: JobRow
  /** The name of the queue the claim was made on, as its caller gave it (never read back from the row). */
  readonly queueName: string
  /** The store's queue storage the claim was made in: a handle of another store's queue of that name is not one. */
  readonly storage: QueueStorage
  /**
   * The claim's own consumer span while a traced `stream` holds it out (set as it is handed on): the parent of
   * the handle's operations' spans, ended with the outcome by the operation that settles the claim.
   */
  jobSpan: Tracer.Span | undefined
  /** Ends `jobSpan` (if open) with `outcome` as its `alkstore.outcome`. */
  readonly endJobSpan: (outcome: string) => Effect.Effect<void>
  /**
   * What this handle's own ack, release, retry or fail settled the claim as, once one did: a `process`
   * handler that settles its handle itself leaves the worker's ack nothing to do, and not `lost`.
   */
  readonly settledAs: Exclude<Outcome, "lost"> | undefined
  /**
   * `process`'s automatic heartbeat: the lease extended to a visibility timeout from now, unless it already
   * ends later in the database (a handler's own `heartbeat(longer)` is kept, never shortened); whether the
   * claim is held.
   */
  readonly keepAlive: Effect.Effect<boolean, SqlError | InvalidOptions>
}

/** What settling a claim came to (a span's `alkstore.outcome`). */
export type Outcome = "acked" | "released" | "retried" | "dead" | "lost"

/** Ends a job's span with its outcome, unless it has ended already (a stream's end closes those still open). */
export const endSpan = (span: Tracer.Span, outcome: string): Effect.Effect<void> =>
  span.status._tag === "Ended" ? Effect.void : Effect.map(Clock.currentTimeNanos, (nanos) =>
    describing(() => {
      span.attribute(attr.outcome, outcome)
      span.end(nanos, Exit.void)
    }))

/**
 * The outcome of a handler on its claim, settled from the fiber that ran it
 * (a worker, or `runOnce`): success acks; an interruption alone releases (no
 * attempt spent) when it is this fiber's own, its stop; any other failure or
 * defect retries on the curve with its text — and so does a handler that
 * ended in an interruption of its own (`Effect.interrupt`, the join of an
 * interrupted child) while nobody stopped the fiber, as `"interrupted"`:
 * released, it would be claimed again at once, for ever, never spending an
 * attempt.
 */
export const settle = <A, E>(
  handle: Q.JobHandle<A>,
  exit: Exit.Exit<void, E>
): Effect.Effect<Outcome, InvalidOptions | SqlError> => {
  if (Exit.isSuccess(exit)) return Effect.map(handle.ack, (ok) => (ok ? "acked" : "lost"))
  if (Cause.isInterruptedOnly(exit.cause)) {
    return Effect.withFiberRuntime((fiber) =>
      Cause.isEmpty(fiber.getFiberRef(FiberRef.interruptedCause))
        ? handle.retry(interruptedText)
        // Stopped: given back, though a stop waits for that only so long (patience.ts).
        : Effect.map(givingBack(handle.release, false, "a claim"), (ok) => (ok ? "released" : "lost"))
    )
  }
  return handle.retry(causeText(exit.cause))
}

/** The `lastError` of a handler that ended in its own interruption. */
const interruptedText = "interrupted"

/** A claim's span attributes. */
export const jobAttributes = (queueName: string, row: JobRow): Attributes => ({
  [attr.queue]: queueName,
  [attr.jobId]: row.id,
  [attr.attempt]: row.attempts
})

/**
 * What the handles of one queue share: the queue's own operations, one object per queue. The handle class
 * itself is one for every queue and store, so the code that reads handles (a worker, `ackAll`, a stream, a
 * handler's `handle.job`) sees one shape whatever queue they came from: a class made per queue gave each
 * queue's handles their own shape, and an application's second queue (or second store) deoptimized what V8
 * had compiled for the first.
 */
interface HandleQueue {
  readonly queueName: string
  readonly storage: QueueStorage
  readonly signal: (count: number) => Effect.Effect<void>
  readonly m: QueueMetrics
  /** After an ack or a death: wakes waiters a limited queue held back (flow control). */
  readonly freed: Effect.Effect<void, SqlError>
  /** The ack, with what it frees told. */
  readonly ackOf: (fence: Fence) => Effect.Effect<boolean, SqlError>
  /** After a heartbeat made a lease shorter: its waiters read again. */
  readonly leaseShortened: Effect.Effect<void, SqlError>
  /** A metric update of a write in the calling fiber's transaction: counted when (if) it commits. */
  readonly countOnCommit: (f: () => void) => Effect.Effect<void>
  readonly bury: (fence: Fence, error: string | undefined) => Effect.Effect<boolean, SqlError>
}

const now = Clock.currentTimeMillis

/**
 * A claim handle. Claims come by the thousand: the `Job` view is built on
 * first use (a batch acked unread never builds it), and every operation is a
 * getter, so a handle is one object (a getter's closure keeps
 * `const { retry } = handle` working, built when it is read).
 */
class Handle<A> implements ClaimHandle<A> {
  readonly fence: Fence
  readonly queueName: string
  readonly storage: QueueStorage
  jobSpan: Tracer.Span | undefined = undefined
  settledAs: Exclude<Outcome, "lost"> | undefined = undefined
  private view: Q.Job<A> | undefined = undefined
  /** The claim's lease end in the database as this handle knows it (`null`: not known; see `beat`). */
  private leaseEnd: number | null
  constructor(private readonly queue: HandleQueue, readonly row: JobRow, readonly payload: A) {
    this.fence = { id: row.id, token: row.claim_token }
    this.queueName = queue.queueName
    this.storage = queue.storage
    this.leaseEnd = row.claimed_until
  }
  get job(): Q.Job<A> {
    if (this.view === undefined) this.view = new JobView(this.row, this.payload, this.queueName)
    return this.view
  }
  get attributes() {
    return jobAttributes(this.queueName, this.row)
  }
  /** The options of an operation's span: a child of the claim's own span when a stream holds one. */
  get spanOptions() {
    return this.jobSpan === undefined ? undefined : { parent: this.jobSpan }
  }
  endJobSpan(outcome: string) {
    return this.jobSpan === undefined ? Effect.void : endSpan(this.jobSpan, outcome)
  }
  /**
   * `effect`, then what it settled the claim as (`outcomeOf` its result) kept in `settledAs` when it won,
   * and the claim's span (when it has one) ended with it.
   */
  private settling<X, E>(effect: Effect.Effect<X, E>, outcomeOf: (x: X) => Outcome): Effect.Effect<X, E> {
    return Effect.tap(effect, (x) => {
      const outcome = outcomeOf(x)
      if (outcome !== "lost") this.settledAs = outcome
      return this.endJobSpan(outcome)
    })
  }
  get withJobSpan() {
    const span = this.jobSpan
    return <X, E, R>(effect: Effect.Effect<X, E, R>) => (span === undefined ? effect : Effect.withParentSpan(effect, span))
  }
  get ack() {
    const { ackOf, countOnCommit, m, freed } = this.queue
    const acked = tellingIfCut(Effect.tap(ackOf(this.fence), (ok) => (ok ? countOnCommit(() => m.acked(1)) : Effect.void)), freed)
    return this.settling(
      traced("alkstore.queue.ack", () => this.attributes, acked, wonOrLost("acked"), this.spanOptions),
      (ok) => (ok ? "acked" : "lost")
    )
  }
  get release() {
    const { storage, signal } = this.queue
    const released = wakingAfter(Effect.flatMap(now, (at) => storage.release(this.fence, at)), signal(1))
    return this.settling(
      traced("alkstore.queue.release", () => this.attributes, released, wonOrLost("released"), this.spanOptions),
      (ok) => (ok ? "released" : "lost")
    )
  }
  get retry() {
    const { fence, row, spanOptions } = this
    const { storage, signal, countOnCommit, m, bury } = this.queue
    const attributes = () => this.attributes
    const settling = (effect: Effect.Effect<"retried" | "dead" | "lost", InvalidOptions | SqlError>) =>
      this.settling(effect, (outcome) => outcome)
    return (error?: unknown, delay?: Duration.DurationInput) => settling(traced("alkstore.queue.retry", attributes, Effect.gen(function*() {
      const explicitDelay = yield* optionalDurationMillis("delay", delay)
      const text = errorText(error)
      if (row.attempts >= row.max_attempts) {
        return (yield* bury(fence, text ?? "max attempts exceeded")) ? "dead" as const : "lost" as const
      }
      const at = yield* now
      const runAt = yield* instantAfter("delay", at, explicitDelay ?? backoffMillis(row.backoff_base, row.attempts))
      const retried = yield* wakingAfter(
        Effect.tap(storage.retry(fence, runAt, at, text), (retried) => retried ? countOnCommit(() => m.retried()) : Effect.void),
        signal(1)
      )
      return retried ? "retried" as const : "lost" as const
    }), (outcome, span) => span.attribute(attr.outcome, outcome), spanOptions))
  }
  get fail() {
    const { fence, spanOptions } = this
    const { bury } = this.queue
    const attributes = () => this.attributes
    return (error: unknown) =>
      this.settling(
        traced("alkstore.queue.fail", attributes, bury(fence, errorText(error) ?? "failed"), wonOrLost("dead"), spanOptions),
        (ok) => (ok ? "dead" : "lost")
      )
  }
  get keepAlive() {
    return this.beat(undefined, true)
  }
  get heartbeat() {
    return (extend?: Duration.DurationInput) => this.beat(extend, false)
  }
  /**
   * The lease to `extend` (its visibility timeout by default) from now; `onlyLonger`: never shorter than
   * the lease in the database, whatever this handle last set (a heartbeat of the handler's own, in a
   * transaction that rolled back, set nothing).
   */
  private beat(extend: Duration.DurationInput | undefined, onlyLonger: boolean) {
    const { fence, row, spanOptions } = this
    const { storage, leaseShortened } = this.queue
    const attributes = () => this.attributes
    const self = this
    return traced("alkstore.queue.heartbeat", attributes, Effect.gen(function*() {
      const extendMillis = yield* optionalDurationMillis("extend", extend, { positive: true })
      const claimedUntil = yield* instantAfter(
        extendMillis === undefined ? "visibilityTimeout" : "extend",
        yield* now,
        extendMillis ?? row.visibility_timeout
      )
      const extended = yield* (onlyLonger ? storage.keepAlive(fence, claimedUntil) : storage.heartbeat(fence, claimedUntil))
      if (!extended) return false
      // A lease made shorter lapses before the deadline a waiter computed: it reads again (in this
      // process, and in others where their commits do not tell them by themselves: PostgreSQL's NOTIFY).
      // The lease end in the database is known after a heartbeat that committed on its own; one made inside
      // a transaction may yet roll back, so after it the end is unknown and the next heartbeat signals.
      const shortened = !onlyLonger && (self.leaseEnd === null || claimedUntil < self.leaseEnd)
      if (yield* inTransaction) self.leaseEnd = null
      else if (!onlyLonger) self.leaseEnd = claimedUntil
      else if (self.leaseEnd !== null && claimedUntil > self.leaseEnd) self.leaseEnd = claimedUntil
      if (shortened) yield* leaseShortened
      return true
    }), wonOrLost("extended"), spanOptions)
  }
}

/** The claim handles of one queue: `toHandles` turns the rows a claim returned into handles. */
export const makeHandles = <A>(
  queueName: string,
  storage: QueueStorage,
  signal: (count: number) => Effect.Effect<void>,
  codec: PayloadCodec<A>,
  m: QueueMetrics,
  /** After an ack or a death: wakes waiters a limited queue held back (flow control). */
  freed: Effect.Effect<void, SqlError> = Effect.void,
  /** The ack, with what it frees told (by default the storage's ack, then `freed`). */
  ackOf: (fence: Fence) => Effect.Effect<boolean, SqlError> = (fence) =>
    Effect.tap(storage.ack(fence), (done) => (done ? freed : Effect.void)),
  /** After a heartbeat made a lease shorter: its waiters read again (by default this process's). */
  leaseShortened: Effect.Effect<void, SqlError> = signal(1),
  /** Counts a settle's metric once its store transaction commits (`EngineShape.afterCommit`); at once by default. */
  afterCommit: (context: Context.Context<never>, f: () => void) => void = (_, f) => f()
) => {
  /** A metric update of a write in the calling fiber's transaction: counted when (if) it commits. */
  const countOnCommit = (f: () => void) =>
    Effect.withFiberRuntime<void>((fiber) => {
      afterCommit(fiber.currentContext, f)
      return Effect.void
    })
  // A settle whose wake an interruption cut off after its write tells this process's waiters anyway
  // (patience.ts `tellingIfCut`, `wakingAfter`): `freed` for what an ack or a death frees, a signal for a job back in line.
  const bury = (fence: Fence, error: string | undefined) =>
    wakingAfter(
      Effect.tap(Effect.flatMap(now, (at) => storage.bury(fence, at, error)), (buried) =>
        buried ? countOnCommit(() => m.dead(1)) : Effect.void),
      freed
    )
  const queue: HandleQueue = { queueName, storage, signal, m, freed, ackOf, leaseShortened, countOnCommit, bury }

  /**
   * Handles for claimed rows (counted: claims, lapses, the wait since due);
   * the candidates a claim met dead are only counted. A row that fails its
   * Schema goes to dead with the decode error.
   *
   * A claim stamps its lease from the instant it read the clock, which may
   * be before it waited for the write lock (a busy SQLite file, a pool
   * connection): that wait came off the lease, and a long one left a handle
   * whose job another worker could take at once. So no claim is handed out
   * with less than half its visibility timeout left: such a row is renewed
   * first (its lease pushed to now + its visibility timeout), and one lost
   * meanwhile (`lost`: another worker took the lapsed job) is dropped. The
   * check is arithmetic on the rows; the common claim writes nothing more.
   */
  const toHandles = (
    rows: ReadonlyArray<JobRow>,
    /** The clock's time after the claim returned. */
    current: number
  ): Effect.Effect<{ handles: Array<ClaimHandle<A>>; buried: number; lost: number }, SqlError> => {
    const isStale = (row: JobRow) =>
      row.state === "claimed" && row.claimed_until !== null && row.claimed_until - current < row.visibility_timeout / 2
    if (!rows.some(isStale)) return handlesOf(rows, current, 0)
    return Effect.onError(
      Effect.flatMap(
        Effect.forEach(rows.filter(isStale), (row) => {
          const until = current + row.visibility_timeout
          return Effect.map(storage.heartbeat({ id: row.id, token: row.claim_token }, until), (kept) => [row, kept ? until : null] as const)
        }),
        (renewals) => {
          const renewed = new Map(renewals)
          const kept: Array<JobRow> = []
          for (const row of rows) {
            const until = renewed.get(row)
            if (until === undefined) kept.push(row)
            else if (until !== null) kept.push({ ...row, claimed_until: until })
          }
          return handlesOf(kept, current, rows.length - kept.length)
        }
      ),
      () => giveBack(rows, current)
    )
  }

  /**
   * The claims of `rows` given back (pending again, the attempt returned) when a step after the claim
   * failed — a renewal, or the burial of an undecodable row — so the call's error leaves no job claimed
   * without a handle (docs/guarantees.md). Best effort: a give-back that fails too (the store is down, or
   * the application's transaction is aborted and will roll the claim back) is logged, and those claims
   * return when their lease lapses.
   */
  const giveBack = (rows: ReadonlyArray<JobRow>, at: number) => {
    const claimed = rows.filter((row) => row.state === "claimed")
    if (claimed.length === 0) return Effect.void
    return Effect.forEach(claimed, (row) =>
      Effect.flatMap(storage.release({ id: row.id, token: row.claim_token }, at), (released) => (released ? signal(1) : Effect.void)), {
      discard: true
    }).pipe(
      Effect.catchAll((error) =>
        Effect.logWarning(`alkstore: giving back ${claimed.length} claims of ${queueName} after a failed claim failed; they return when their lease lapses`, error)
      )
    )
  }

  /**
   * `at`: the time after the claim returned — no earlier than the instant the claim was judged at (read
   * under its lock, after any wait), so a job that fell due during the wait never counts a negative wait.
   */
  const handlesOf = (rows: ReadonlyArray<JobRow>, at: number, lost: number) => {
    const handles: Array<ClaimHandle<A>> = []
    const undecodable: Array<[JobRow, InvalidPayload]> = []
    for (const row of rows) {
      if (row.state !== "claimed") {
        if (row.last_error === "expired") m.expired(1)
        else m.dead(1)
        continue
      }
      // An undecodable row is no claim handed out (moved to dead below): no wait, no lapse, as `claimed`.
      const payload = codec.decode(row.payload)
      if (payload instanceof InvalidPayload) {
        undecodable.push([row, payload])
        continue
      }
      m.wait(at - row.run_at)
      if (row.lapsed === true) m.leaseLapse()
      handles.push(new Handle(queue, row, payload))
    }
    if (undecodable.length === 0) {
      if (handles.length > 0) m.claimed(handles.length)
      return Effect.succeed({ handles, buried: 0, lost })
    }
    // A burial that fails gives back every claim of `rows` (renewed ones included: the same tokens).
    return Effect.as(
      Effect.onError(Effect.forEach(undecodable, ([row, error]) =>
        // The decode error's text may quote the payload (a NUL, a lone surrogate): stored as every error text is.
        Effect.map(storage.bury({ id: row.id, token: row.claim_token }, at, storableText(error.reason)), (buried) => {
          if (buried) m.dead(1)
        })).pipe(Effect.tap(() => {
          if (handles.length > 0) m.claimed(handles.length)
        })), () => giveBack(rows, at)),
      { handles, buried: undecodable.length, lost }
    )
  }

  return { toHandles }
}
