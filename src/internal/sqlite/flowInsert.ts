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
export const flowInsertValues = `?, (SELECT max(coalesce((SELECT max(j.flow_round) + 1 FROM __alkstore_jobs AS j
      WHERE j.queue = ? AND j.group_key = ? AND j.state <> 'dead' AND j.flow_round IS NOT NULL), 0),
      coalesce((SELECT min(p.flow_round) FROM __alkstore_jobs AS p WHERE p.queue = f.queue AND p.priority = ?
        AND p.state = 'pending' AND p.flow_round IS NOT NULL), f.current_round)) + ?
    FROM __alkstore_flow_limits AS f WHERE f.queue = ?)`
/** The parameters after `newJobValues` (whose last value is the group). */
export const flowInsertParams = (job: NewJob, offset = 0): Array<Param> =>
  [job.queue, job.group, job.priority, offset, job.queue]
