/**
 * The raw baseline (the ceiling): the `pg` driver, a minimal jobs table with a
 * partial index of pending work, named prepared statements.
 *
 * enqueue = one INSERT that also sends `pg_notify` (one statement: the NOTIFY
 * is delivered at its commit, as a library that wakes workers must do);
 * claim = one `UPDATE … WHERE id = (SELECT … FOR UPDATE SKIP LOCKED LIMIT 1)
 * RETURNING *` (autocommit); ack = one `DELETE` by id (autocommit). The worker
 * acks and claims the next job in one statement, one commit per job (the
 * ceiling a library's worker can reach); it LISTENs on one channel and waits
 * for a notification (or a 1 s fallback poll) when nothing is claimable.
 */
import type pg from "pg"
import type { OnJob, PgContender, Session } from "../workloads.js"
import { payload, QUEUE, supportsAll } from "../workloads.js"

const CHANNEL = "raw_jobs"

const SCHEMA = `
  CREATE TABLE jobs (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,
    payload json NOT NULL,
    priority int NOT NULL DEFAULT 0,
    run_at timestamptz NOT NULL DEFAULT now(),
    state text NOT NULL DEFAULT 'pending',
    attempts int NOT NULL DEFAULT 0,
    claimed_until timestamptz,
    worker_id text
  );
  CREATE INDEX jobs_claim ON jobs (queue, priority DESC, run_at, id) WHERE state = 'pending';
`

/** The enqueue's statement ($1 queue, $2 payload): also the Effect floor's (effectFloor.ts). */
export const INSERT_TEXT = `WITH j AS (INSERT INTO jobs (queue, payload) VALUES ($1, $2) RETURNING id)
         SELECT pg_notify('${CHANNEL}', '') FROM j`
const INSERT = { name: "raw_insert", text: INSERT_TEXT }
const CLAIM = {
  name: "raw_claim",
  text: `UPDATE jobs SET state = 'claimed', attempts = attempts + 1,
                claimed_until = now() + interval '5 minutes', worker_id = $2
         WHERE id = (SELECT id FROM jobs WHERE queue = $1 AND state = 'pending' AND run_at <= now()
                     ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)
         RETURNING *`
}
const INSERT_MANY = {
  name: "raw_insert_many",
  text: `WITH j AS (INSERT INTO jobs (queue, payload) SELECT $1, p FROM unnest($2::json[]) AS p RETURNING id)
         SELECT pg_notify('${CHANNEL}', '') FROM (SELECT 1 FROM j LIMIT 1) AS any_row`
}
const ACK = { name: "raw_ack", text: "DELETE FROM jobs WHERE id = $1" }
/**
 * The worker's ack of job $3 and claim of the next, one statement (one
 * commit): the acked row is claimed, not pending, so the claim's sub-select
 * cannot see it.
 */
const ACK_AND_CLAIM = {
  name: "raw_ack_claim",
  text: `WITH done AS (DELETE FROM jobs WHERE id = $3)
         ${CLAIM.text}`
}

const connect = async (url: string): Promise<pg.Client> => {
  const { default: pgm } = await import("pg")
  const c = new pgm.Client({ connectionString: url })
  await c.connect()
  return c
}

const open = async (url: string): Promise<Session> => {
  const c = await connect(url)
  const worker = `w${process.pid}`
  const enqueue = async (n: number) => {
    await c.query({ ...INSERT, values: [QUEUE, JSON.stringify(payload(n))] })
  }
  const claimOn = async (on: pg.Client): Promise<{ id: string; payload: { n: number } } | undefined> =>
    (await on.query({ ...CLAIM, values: [QUEUE, worker] })).rows[0]
  const claim = () => claimOn(c)
  const ack = async (id: string) => {
    await c.query({ ...ACK, values: [id] })
  }
  const startWorker = async (onJob: OnJob) => {
    // the worker's own connection (as a library's pool gives it one): an enqueue in the same process never
    // waits behind the worker's ack
    const wc = await connect(url)
    const listener = await connect(url)
    let wake: (() => void) | undefined
    let notified = false
    listener.on("notification", () => {
      notified = true
      wake?.()
    })
    await listener.query(`LISTEN ${CHANNEL}`)
    let stopping = false
    const loop = (async () => {
      while (!stopping) {
        notified = false
        let job = await claimOn(wc)
        while (job) {
          onJob(job.payload.n)
          job = (await wc.query({ ...ACK_AND_CLAIM, values: [QUEUE, worker, job.id] })).rows[0]
        }
        if (notified || stopping) continue
        await new Promise<void>((resolve) => {
          const t = setTimeout(resolve, 1_000)
          wake = () => {
            clearTimeout(t)
            resolve()
          }
        })
        wake = undefined
      }
    })()
    return async () => {
      stopping = true
      wake?.()
      await loop
      await listener.end()
      await wc.end()
    }
  }
  return {
    enqueue,
    enqueueInTx: async (ns) => {
      await c.query("BEGIN")
      for (const n of ns) await enqueue(n)
      await c.query("COMMIT")
    },
    enqueueBatch: async (ns) => {
      await c.query({ ...INSERT_MANY, values: [QUEUE, ns.map((n) => JSON.stringify(payload(n)))] })
    },
    preload: async (count, from) => {
      await c.query(
        `INSERT INTO jobs (queue, payload)
         SELECT $1, json_build_object('n', i, 'to', 'user@example.com') FROM generate_series($2::int, $3::int) i`,
        [QUEUE, from, from + count - 1]
      )
    },
    startWorker,
    claimAck: async () => {
      const job = await claim()
      if (!job) return false
      void job.payload.n
      await ack(job.id)
      return true
    },
    live: async () => Number((await c.query<{ c: string }>("SELECT count(*) AS c FROM jobs")).rows[0]!.c),
    close: () => c.end()
  }
}

export const contender: PgContender = {
  name: "raw",
  label: "raw pg (SKIP LOCKED)",
  packages: ["bench/node_modules/pg/package.json"],
  supports: supportsAll(),
  setup: async (url) => {
    const c = await connect(url)
    try {
      await c.query(SCHEMA)
    } finally {
      await c.end()
    }
  },
  open,
  notes: [
    "`pg` 8 driver, named prepared statements; one connection for enqueues and set-up, and a worker has its own connection plus a LISTEN connection",
    "enqueue = `WITH j AS (INSERT … RETURNING id) SELECT pg_notify(…) FROM j` (one statement, autocommit)",
    "claim = `UPDATE jobs … WHERE id = (SELECT id … ORDER BY priority DESC, run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING *` on a partial index `WHERE state = 'pending'`; ack = `DELETE` by id",
    "worker (drain and latency rows): claim, then after each handler one statement that acks the job and claims the next (`WITH done AS (DELETE …) UPDATE … RETURNING *`, one commit per job) until nothing is claimable, then it waits on LISTEN/NOTIFY (1 s fallback poll)",
    "claim rows: claim and ack as two autocommit statements (a pull API's claim + ack)",
    "batch of 100 = one `INSERT … SELECT … FROM unnest($2::json[])` with one `pg_notify`",
    "preload = one `INSERT … SELECT generate_series`"
  ]
}
