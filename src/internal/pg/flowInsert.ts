/**
 * Flow control's part of every insert (docs/flow-control.md): the job's
 * round when its queue has limits — one more than its group's last live
 * job's, and no earlier than the round its priority's rotation has reached
 * (the lowest round among its priority's pending jobs, or the queue's
 * current round when it has none; as on SQLite, sqlite/flowInsert.ts) —
 * else NULL, which keeps the row out of every flow index. An expression
 * over the inserted row's queue, group and priority. (The pending rows as the
 * flow index's predicate says them, `COLLATE "C"`: flowStatements.ts `flowPending`.)
 */
export const flowRoundOf = (s: string, queue: string, group: string, priority: string) =>
  `(SELECT greatest(coalesce((SELECT max(x.flow_round) + 1 FROM ${s}.__alkstore_jobs AS x
      WHERE x.queue = ${queue} AND x.group_key = ${group} AND x.state <> 'dead' AND x.flow_round IS NOT NULL), 0),
      coalesce((SELECT min(p.flow_round) FROM ${s}.__alkstore_jobs AS p WHERE p.queue = ${queue}
        AND p.priority = ${priority} AND p.state COLLATE "C" = 'pending' AND p.flow_round IS NOT NULL),
        f.current_round)) FROM ${s}.__alkstore_flow_limits AS f WHERE f.queue = ${queue})`
