import { Effect, Exit } from "effect"

/**
 * Group commit, engine-free: requests submitted while a batch is being
 * served wait, and are served together by the next batch (one call of
 * `serve`, which runs them in one transaction). The first request of an
 * idle group leads: it yields once (see `Gathering`), so the fibers ready
 * at that instant (100 concurrent takes) join its batch — on SQLite a
 * statement runs in place, so without that yield nothing would ever arrive
 * "while" a batch runs — then serves its batch in its own fiber; when that is done, the
 * oldest request still waiting leads the next batch. Each request gets its
 * own outcome (`serve` returns one `Exit` per input, in order), so an error
 * reaches the request it belongs to, typed.
 *
 * A submit is uninterruptible: a leader interrupted between its yield and
 * its batch would leave the group busy for good, and a claim served for a
 * request must reach that request (its caller releases what it no longer
 * wants, so nothing is handed to two callers nor stranded).
 */
export interface GroupCommit<I, O, E> {
  /**
   * Serves `input` with the next batch. `alone`, when given, is what a
   * request that would be served alone at once (nothing running, nobody to
   * gather) runs instead, directly, without the group's bookkeeping: the
   * one-at-a-time path pays nothing for the grouping.
   */
  readonly submit: (input: I, alone?: Effect.Effect<O, E>) => Effect.Effect<O, E>
}

/** A request's turn to serve the next batch (its outcome comes from that batch). */
const lead: unique symbol = Symbol("alkstore/groupCommit/lead")

/**
 * A lone request yields (to gather others) only when `othersAround()` says
 * other requests may come now, or on every `probeEvery`-th lone batch: a
 * one-at-a-time caller (a drain taking one element after another) then
 * rarely pays the yield, and concurrent callers that run one after another
 * without it (on SQLite a whole take runs in place) are found by the probe.
 */
export interface Gathering {
  readonly othersAround: () => boolean
  readonly probeEvery: number
}

export const makeGroupCommit = <I, O, E>(
  serve: (inputs: ReadonlyArray<I>) => Effect.Effect<ReadonlyArray<Exit.Exit<O, E>>>,
  maxBatch: number,
  gathering: Gathering
): GroupCommit<I, O, E> => {
  type Outcome = Exit.Exit<O, E> | typeof lead

  class Request {
    outcome: Outcome | undefined = undefined
    resume: ((outcome: Outcome) => void) | undefined = undefined
    constructor(readonly input: I) {}
    deliver(outcome: Outcome) {
      const resume = this.resume
      if (resume === undefined) {
        this.outcome = outcome
        return
      }
      this.resume = undefined
      resume(outcome)
    }
    /** The outcome delivered to this request, waiting for it if none was yet. */
    get next(): Effect.Effect<Outcome> {
      return Effect.async<Outcome>((resume) => {
        const ready = this.outcome
        if (ready !== undefined) {
          this.outcome = undefined
          resume(Effect.succeed(ready))
        } else this.resume = (outcome) => resume(Effect.succeed(outcome))
      })
    }
  }

  let waiting: Array<Request> = []
  let busy = false
  let lastBatch = 0
  let lone = 0
  /** Whether a new leader yields before serving (see `Gathering`). */
  const gather = () => {
    if (lastBatch > 1 || gathering.othersAround()) return true
    lone = (lone + 1) % gathering.probeEvery
    return lone === 0
  }

  /** Serves the oldest `maxBatch` waiting requests (the leader is the oldest), then hands the lead on. */
  const serveBatch = (leader: Request): Effect.Effect<Exit.Exit<O, E>> =>
    Effect.suspend(() => {
      const batch = waiting.length <= maxBatch ? waiting : waiting.slice(0, maxBatch)
      waiting = waiting.length <= maxBatch ? [] : waiting.slice(maxBatch)
      lastBatch = batch.length
      return Effect.map(Effect.exit(serve(batch.map((request) => request.input))), (served) => {
        for (let i = 0; i < batch.length; i++) {
          // A `serve` that failed or died (it should not) fails every request of its batch alike.
          batch[i]!.deliver(
            Exit.isSuccess(served)
              ? served.value[i] ?? Exit.die(new Error("alkstore: a group commit served fewer outcomes than requests"))
              : served as Exit.Exit<never, never>
          )
        }
        const next = waiting[0]
        if (next === undefined) busy = false
        else next.deliver(lead)
        const own = leader.outcome as Exit.Exit<O, E>
        leader.outcome = undefined
        return own
      })
    })

  const submit = (input: I, alone?: Effect.Effect<O, E>): Effect.Effect<O, E> =>
    Effect.suspend((): Effect.Effect<O, E> => {
      const gathering = !busy && gather()
      if (!busy && !gathering) {
        lastBatch = 1
        // The caller's own effect, in the caller's own region (no bookkeeping to protect).
        if (alone !== undefined) return alone
      }
      return Effect.uninterruptible(queued(input, gathering))
    })

  const queued = (input: I, gathering: boolean): Effect.Effect<O, E> =>
    Effect.suspend((): Effect.Effect<O, E> => {
      const request = new Request(input)
      waiting.push(request)
      if (!busy) {
        busy = true
        return Effect.flatten(gathering ? Effect.zipRight(Effect.yieldNow(), serveBatch(request)) : serveBatch(request))
      }
      return Effect.flatMap(
        request.next,
        (outcome): Effect.Effect<O, E> => (outcome === lead ? Effect.flatten(serveBatch(request)) : outcome)
      )
    })

  return { submit }
}
