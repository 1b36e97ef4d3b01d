/**
 * Flow control's part of every insert (docs/flow-control.md): the job's
 * round when its queue has limits — one more than its group's last live
 * job's, or the queue's current round when the group has none — else NULL,
 * which keeps the row out of every flow index. An expression over the
 * inserted row's queue and group.
 */
export const flowRoundOf = (s: string, queue: string, group: string) =>
  `(SELECT greatest(coalesce((SELECT max(x.flow_round) + 1 FROM ${s}.__alkstore_jobs AS x
      WHERE x.queue = ${queue} AND x.group_key = ${group} AND x.state <> 'dead' AND x.flow_round IS NOT NULL), 0),
      f.current_round) FROM ${s}.__alkstore_flow_limits AS f WHERE f.queue = ${queue})`
