import type { NewJob } from "../engine.js"
import type { Param } from "./executor.js"

/**
 * What every insert adds after its 11 columns: the group, and the job's
 * round when its queue has limits (else NULL: no flow index holds it). A
 * multi-row insert reads the table before it writes, so jobs of one group in
 * one statement are told apart by `offset` (their place among that group's
 * jobs in the statement).
 *
 * The round: one more than its group's last live job's, and no earlier than
 * the round its priority's rotation has reached — the lowest round among its
 * priority's pending jobs (the flow index's first entry of that priority), or
 * the queue's current round when it has none. Not the queue's current round
 * alone: claims at another priority move that one, and a new group would
 * start behind every round of this priority's backlog that those claims
 * passed (docs/flow-control.md, "Rounds").
 */
export const flowInsertColumns = "group_key, flow_round"

/**
 * `__alkstore_jobs_flow_group` (migration 9) holds a limited queue's live jobs by (queue, group, state, round,
 * id, lease end): a claim moves its entry within its group's range, and its ack deletes it — one index for
 * the group's claims and for its jobs in order (two before, each written by every claim and ack). Named, and
 * its predicate said in full, so the planner takes it whatever statistics an application's `ANALYZE` left.
 */
export const flowGroupIndex = "__alkstore_jobs_flow_group"
export const byGroupState = `__alkstore_jobs INDEXED BY ${flowGroupIndex}`
/** The index's predicate, of the jobs table named `alias` (`"j."`) or unnamed. */
export const liveInFlowOf = (alias = "") => `${alias}state <> 'dead' AND ${alias}flow_round IS NOT NULL`
export const liveInFlow = liveInFlowOf()
export const liveStates = ["claimed", "pending", "scheduled"] as const

// The group's last live round, one index seek per state (the queue from the row of `f`, the group from `g`).
const lastRoundOf = (state: string) =>
  `coalesce((SELECT max(j.flow_round) FROM __alkstore_jobs AS j INDEXED BY ${flowGroupIndex}
      WHERE j.queue = f.queue AND j.group_key = (SELECT key FROM g) AND j.state = '${state}'
        AND ${liveInFlowOf("j.")}), -1)`
// Its group bound once (`g`), the queue once (`f`): each bound value costs an insert a call into SQLite. The
// limits row is read by its key alone (a join there let the planner scan the table after an `ANALYZE`).
export const flowInsertValues = `?, (WITH g(key) AS (SELECT ?) SELECT max(max(${liveStates.map(lastRoundOf).join(", ")}) + 1,
      coalesce((SELECT min(p.flow_round) FROM __alkstore_jobs AS p WHERE p.queue = f.queue AND p.priority = ?
        AND p.state = 'pending' AND p.flow_round IS NOT NULL), f.current_round)) + ?
    FROM __alkstore_flow_limits AS f WHERE f.queue = ?)`
/** The parameters after `newJobValues` (whose last value is the group). */
export const flowInsertParams = (job: NewJob, offset = 0): Array<Param> => [job.group, job.priority, offset, job.queue]
