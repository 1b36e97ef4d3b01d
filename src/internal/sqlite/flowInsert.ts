import type { NewJob } from "../engine.js"
import type { Param } from "./executor.js"

/**
 * What every insert adds after its 11 columns: the group, and the job's
 * round when its queue has limits (else NULL: no flow index holds it). A
 * multi-row insert reads the table before it writes, so jobs of one group in
 * one statement are told apart by `offset` (their place among that group's
 * jobs in the statement).
 */
export const flowInsertColumns = "group_key, flow_round"
export const flowInsertValues = `?, (SELECT max(coalesce((SELECT max(j.flow_round) + 1 FROM __alkstore_jobs AS j
      WHERE j.queue = ? AND j.group_key = ? AND j.state <> 'dead' AND j.flow_round IS NOT NULL), 0), f.current_round) + ?
    FROM __alkstore_flow_limits AS f WHERE f.queue = ?)`
/** The parameters after `newJobValues` (whose last value is the group). */
export const flowInsertParams = (job: NewJob, offset = 0): Array<Param> => [job.queue, job.group, offset, job.queue]
