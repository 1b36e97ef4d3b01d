import { Channel, Chunk, Deferred, Effect, Exit, FiberId, type Scope, Stream } from "effect"
import type * as Q from "../Queues.js"
import type { InvalidOptions } from "../StoreError.js"
import { type ClaimHandle, jobAttributes } from "./handle.js"
import { eventLoopTurn, turnEveryMillis } from "./eventLoop.js"
import { storeClosedError } from "./lifetime.js"
import { fromChecked } from "./duration.js"
import { ownOptions, positiveCount, validateText } from "./options.js"
import { realClock } from "./realClock.js"
import { attr, linkOf, tracing } from "./telemetry.js"

/** What a queue's stream is built from (src/internal/queue.ts). */
export interface StreamParts<A> {
  readonly name: string
  /** The per-job consumer span (`process`'s), and attributes every span of it carries. */
  readonly processSpan: { readonly name: string; readonly attributes: Record<string, unknown> }
  /** Waits for and claims up to `n` jobs, the wait interruptible through `restore`. */
  readonly takeUpTo: (
    workerId: string,
    n: number,
    restore: <X, E, R>(effect: Effect.Effect<X, E, R>) => Effect.Effect<X, E, R>
  ) => Effect.Effect<ReadonlyArray<ClaimHandle<A>>, Q.WaitError>
  /** Registers what the store's close must run while the stream's scope lasts (`Lifetime.onClose`). */
  readonly onStoreClose: (cleanup: Effect.Effect<void>) => Effect.Effect<void, never, Scope.Scope>
  /** Gives claims back (no attempt spent). */
  readonly releaseUnhanded: (handles: ReadonlyArray<ClaimHandle<A>>) => Effect.Effect<void>
  /** A claim in its `alkstore.queue.claim` span when the fiber traces. */
  readonly claimTraced: <X, E>(
    workerId: string,
    effect: Effect.Effect<X, E>,
    handlesOf: (x: X) => ReadonlyArray<ClaimHandle<A>>
  ) => Effect.Effect<X, E>
}

/**
 * A queue's `stream`. A batch is claimed in one round trip but handed on one
 * handle at a time: whatever ends the stream (a `Stream.take`, interruption,
 * a failure downstream), the claims it never handed on are released. So does
 * the store's close, while its connection still works — a stream run in a
 * forked fiber ends only after the store closed — once a claim in flight is
 * answered; the stream's next pull then fails with the closed store's error.
 *
 * Traced (a tracer installed when the stream starts), each round is an
 * `alkstore.queue.claim` span, and each handle is handed on with a consumer
 * span of its own, as `process` gives each job: a root span linked to the
 * span that enqueued the job, the parent of the handle's operations' spans,
 * ended by the operation that settles the claim — or, for a claim still
 * unsettled, when the stream ends (`alkstore.outcome` `"unsettled"`).
 *
 * A held claim ages while it waits its turn, unrenewed: before it is handed
 * on, its lease end (the claim's `claimed_until`) is compared with the clock,
 * read synchronously (no statement, no effect). With at least half its
 * visibility timeout left it is handed on as it is — the common case, a batch
 * handed on quickly. Otherwise it is renewed first with its heartbeat (the
 * lease pushed to now + its visibility timeout): a claim lost meanwhile
 * (another worker took the lapsed job) is skipped, never handed on, and the
 * next one is looked at; a storage failure fails the stream, and the claims
 * not handed on, that one included, are released as when anything ends it.
 */
export const makeStream = <A>(
  { claimTraced, name, onStoreClose, processSpan, releaseUnhanded, takeUpTo }: StreamParts<A>
): Q.Queue<A>["stream"] =>
(workerId, opts) =>
  Stream.unwrapScoped(Effect.gen(function*() {
    yield* validateText("workerId", workerId)
    const batch = yield* positiveCount("batch", (yield* fromChecked(ownOptions(opts)))?.batch ?? 1)
    const traces = yield* Effect.withFiberRuntime((fiber) => Effect.succeed(tracing(fiber)))
    const clock = yield* Effect.clock
    let held: ReadonlyArray<ClaimHandle<A>> = []
    let handed = 0
    // When this stream last gave the event loop a turn (real time: it is the event loop's).
    let turnAt = realClock.unsafeCurrentTimeMillis()
    // Traced only: the handles handed on whose span may still be open.
    let spanned: Array<ClaimHandle<A>> = []
    yield* Effect.addFinalizer(() =>
      Effect.zipRight(
        releaseUnhanded(held.slice(handed)),
        Effect.forEach(spanned, (handle) => handle.endJobSpan("unsettled"), { discard: true })
      )
    )
    // The store's close: once a claim round in flight has its answer, the claims not handed on go back.
    let storeClosed = false
    let inRound = false
    let roundEnded: Deferred.Deferred<void> | undefined
    const releaseRest = Effect.suspend(() => {
      const rest = held.slice(handed)
      handed = held.length
      return releaseUnhanded(rest)
    })
    yield* onStoreClose(Effect.suspend(() => {
      storeClosed = true
      if (!inRound) return releaseRest
      roundEnded = Deferred.unsafeMake<void>(FiberId.none)
      return Effect.zipRight(Deferred.await(roundEnded), releaseRest)
    }))
    const claimRound = Effect.uninterruptibleMask((restore) =>
      Effect.suspend(() => {
        if (storeClosed) return Effect.fail(storeClosedError())
        inRound = true
        return Effect.map(takeUpTo(workerId, batch, restore), (handles) => {
          held = handles
          handed = 0
          return handles
        }).pipe(Effect.ensuring(Effect.sync(() => {
          inRound = false
          if (roundEnded !== undefined) Deferred.unsafeDone(roundEnded, Exit.void)
        })))
      })
    )
    const claimBatch: Effect.Effect<unknown, Q.WaitError> = traces
      ? Effect.suspend(() => {
        spanned = spanned.filter((handle) => handle.jobSpan?.status._tag !== "Ended")
        return claimTraced(workerId, claimRound, (handles) => handles)
      })
      : claimRound
    const openSpan = (handle: ClaimHandle<A>) => {
      const link = linkOf(handle.row.trace_context)
      return Effect.map(
        Effect.makeSpan(processSpan.name, {
          attributes: { ...processSpan.attributes, ...jobAttributes(name, handle.row), [attr.workerId]: workerId },
          kind: "consumer",
          root: true,
          captureStackTrace: false,
          ...(link === undefined ? {} : { links: [link] })
        }),
        (span) => {
          handle.jobSpan = span
          spanned.push(handle)
        }
      )
    }
    const handOn = (handle: ClaimHandle<A>) =>
      traces ? Channel.zipRight(Channel.fromEffect(openSpan(handle)), Channel.write(Chunk.of(handle))) : Channel.write(Chunk.of(handle))
    /** At least half the claim's visibility timeout left on its lease: handed on without a renewal. */
    const fresh = (handle: ClaimHandle<A>) => {
      const until = handle.row.claimed_until
      return until !== null && until - clock.unsafeCurrentTimeMillis() >= handle.row.visibility_timeout / 2
    }
    // One handle per write, straight from the channel (cheaper per handle than an effect per pull).
    // A held claim near or past its lease end is renewed before it is handed on, and skipped when lost:
    // its job may be another worker's by now (fencing, CONTRACT §8). `handed` counts it only once the
    // renewal is over, so a stream ended during one still releases it.
    const emit = (): Channel.Channel<
      Chunk.Chunk<ClaimHandle<A>>,
      unknown,
      InvalidOptions | Q.WaitError,
      unknown,
      void,
      unknown
    > =>
      Channel.suspend(() => {
        if (handed >= held.length) {
          // A drain of claims handed on and acked in place gives the event loop a turn every
          // `turnEveryMillis`, as a `process` worker does (eventLoop.ts).
          const now = realClock.unsafeCurrentTimeMillis()
          if (now - turnAt < turnEveryMillis) return Channel.flatMap(claimBatch, emit)
          turnAt = now
          return Channel.zipRight(Channel.fromEffect(eventLoopTurn), Channel.flatMap(claimBatch, emit))
        }
        const handle = held[handed]!
        // Its expiry passed while it was held: never delivered now (CONTRACT §3). Given back, no attempt
        // spent; the next claim or maintenance moves it to dead as expired.
        const expiresAt = handle.row.expires_at
        if (expiresAt !== null && expiresAt <= clock.unsafeCurrentTimeMillis()) {
          handed++
          return Channel.flatMap(Channel.fromEffect(Effect.ignore(handle.release)), emit)
        }
        if (fresh(handle)) {
          handed++
          return Channel.flatMap(handOn(handle), emit)
        }
        return Channel.flatMap(Channel.fromEffect(handle.heartbeat()), (kept) => {
          // The store's close gave it back meanwhile (it moved `handed` on): never handed on now.
          if (storeClosed) return Channel.fromEffect(Effect.fail(storeClosedError()))
          handed++
          return kept ? Channel.flatMap(handOn(handle), emit) : emit()
        })
      })
    return Stream.fromChannel(emit())
  }))
