/**
 * Would taking a limited queue's rows out of the plain pending/claimed indexes pay (issue 13)? A raw
 * better-sqlite3 model of the jobs table's claim-relevant indexes (the store's flow statements, simplified),
 * one claim -> ack loop over 20 000 pending jobs in G groups (env G, default 100), CPU per claim+ack:
 *
 *   V=current       the indexes of migration 3: a limited row is in the plain and the flow indexes
 *   V=splitpending  the plain pending index only for rows without a round (`AND flow_round IS NULL`)
 *   V=split         the same for the plain claimed index too (the lapsed check of a limited queue then
 *                   reads `…_flow_claimed`, whose order is per group: not flat in the number of live claims)
 *   V=nostate       `…_flow_group` without `state` in its WHERE (a claim leaves its entry alone; the ahead
 *                   count's `state <> 'dead'` then reads the table for each entry it meets)
 *   V=merged        migration 9 (SQLite): `…_flow_group` by (queue, group, state, round, id, lease end) and no
 *                   `…_flow_claimed`: a group's claims and each state's jobs are one range each
 *   R=1             also the claim's move of the queue's current round (every claim with one group)
 *   L=none          the same table and indexes, an unlimited queue (rows without a round, plain claim)
 *
 *   tsx bench/flow-indexes.ts      e.g. for V in current splitpending split; do V=$V npx tsx bench/flow-indexes.ts; done
 */
import Database from "better-sqlite3"
import * as fs from "node:fs"; import * as os from "node:os"; import * as path from "node:path"
const variant = process.env.V ?? "current" // current | splitpending | split | nostate | noflowclaimed | merged
const limited = process.env.L !== "none"
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "idx-"))
const db = new Database(path.join(dir, "x.db"))
db.pragma("journal_mode = WAL"); db.pragma("synchronous = NORMAL"); db.pragma("temp_store = MEMORY")
db.exec(`CREATE TABLE j (id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, payload TEXT NOT NULL, state TEXT NOT NULL,
 priority INTEGER NOT NULL, run_at INTEGER NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL,
 visibility_timeout INTEGER NOT NULL, expires_at INTEGER, claimed_until INTEGER, worker_id TEXT, claim_token INTEGER NOT NULL DEFAULT 0,
 group_key TEXT NOT NULL DEFAULT '', flow_round INTEGER)`)
const plainWhere = variant.startsWith("split") ? " AND flow_round IS NULL" : ""
const claimedWhere = variant === "split" ? plainWhere : ""
db.exec(`CREATE INDEX j_pending ON j (queue, priority DESC, run_at, id) WHERE state = 'pending'${plainWhere}`)
db.exec(`CREATE INDEX j_scheduled ON j (queue, run_at) WHERE state = 'scheduled'`)
db.exec(`CREATE INDEX j_claimed ON j (queue, claimed_until) WHERE state = 'claimed'${claimedWhere}`)
db.exec(`CREATE INDEX j_flow ON j (queue, priority DESC, flow_round, run_at, id, group_key) WHERE state = 'pending' AND flow_round IS NOT NULL`)
if (variant === "merged") db.exec(`CREATE INDEX j_flow_group ON j (queue, group_key, state, flow_round, id, claimed_until) WHERE state <> 'dead' AND flow_round IS NOT NULL`)
else db.exec(`CREATE INDEX j_flow_group ON j (queue, group_key, flow_round, id) WHERE ${variant === "nostate" ? "" : "state <> 'dead' AND "}flow_round IS NOT NULL`)
if (variant !== "noflowclaimed" && variant !== "merged") db.exec(`CREATE INDEX j_flow_claimed ON j (queue, group_key, claimed_until) WHERE state = 'claimed' AND flow_round IS NOT NULL`)
db.exec(`CREATE TABLE lim (queue TEXT PRIMARY KEY, concurrency INTEGER, current_round INTEGER NOT NULL DEFAULT 0)`)
const G = Number(process.env.G ?? 100), J = 20000
const ins = db.prepare(`INSERT INTO j (queue, payload, state, priority, run_at, max_attempts, visibility_timeout, group_key, flow_round) VALUES ('q', '{"g":1}', 'pending', 0, 0, 3, 30000, ?, ?)`)
db.transaction(() => { for (let i = 0; i < J; i++) ins.run(limited ? `t${i % G}` : "", limited ? Math.floor(i / G) : null) })()
if (limited) db.exec(`INSERT INTO lim VALUES ('q', 10, 0)`)
const lapsedClaimed = variant === "split" && limited ? `SELECT 1 FROM j WHERE queue = @q AND state = 'claimed' AND flow_round IS NOT NULL AND claimed_until <= @now` : `SELECT 1 FROM j WHERE queue = @q AND state = 'claimed'${claimedWhere} AND claimed_until <= @now`
const readiness = db.prepare(`SELECT EXISTS (SELECT 1 FROM j WHERE queue = @q AND state = 'scheduled' AND run_at <= @now) AS due, EXISTS (${lapsedClaimed}) AS lapsed, l.concurrency, l.current_round FROM (SELECT 1) LEFT JOIN lim AS l ON l.queue = @q`)
const inFlight = db.prepare(`SELECT count(*) AS n FROM j WHERE queue = ? AND state = 'claimed' ${claimedWhere === "" ? "" : "AND flow_round IS NOT NULL"} AND claimed_until > ?`)
const page = db.prepare(`SELECT id, priority, flow_round AS round, run_at AS runAt, group_key AS "group" FROM j WHERE queue = ? AND state = 'pending' AND flow_round IS NOT NULL ORDER BY priority DESC, flow_round, run_at, id LIMIT 1`)
const aheadIn = (st: string) => `(SELECT count(*) FROM (SELECT 1 FROM j INDEXED BY j_flow_group WHERE queue = @q AND group_key = @g AND state = '${st}' AND state <> 'dead' AND flow_round IS NOT NULL AND (flow_round, id) < (@r, @id) LIMIT 1))`
const groupStart = variant === "merged" ? db.prepare(`SELECT (SELECT count(*) FROM j INDEXED BY j_flow_group WHERE queue = @q AND group_key = @g AND state = 'claimed' AND state <> 'dead' AND flow_round IS NOT NULL AND claimed_until > @now) AS inFlight,
 ${aheadIn("claimed")} + ${aheadIn("pending")} + ${aheadIn("scheduled")} AS ahead`) : db.prepare(`SELECT (SELECT count(*) FROM j WHERE queue = @q AND group_key = @g AND state = 'claimed' AND flow_round IS NOT NULL AND claimed_until > @now) AS inFlight,
 (SELECT count(*) FROM (SELECT 1 FROM j WHERE queue = @q AND group_key = @g AND state <> 'dead' AND flow_round IS NOT NULL AND (flow_round, id) < (@r, @id) LIMIT 1)) AS ahead`)
const set = `UPDATE j SET state = 'claimed', claimed_until = @now + visibility_timeout, worker_id = 'w', attempts = attempts + 1, claim_token = claim_token + 1`
const claimId = db.prepare(`${set} WHERE id = @id AND state = 'pending' RETURNING *`)
const claimPlain = db.prepare(`${set} WHERE id = (SELECT id FROM j WHERE queue = 'q' AND state = 'pending'${plainWhere} ORDER BY priority DESC, run_at, id LIMIT 1) RETURNING *`)
const ack = db.prepare(`DELETE FROM j WHERE id = ? AND claim_token = ? AND state = 'claimed'`)
const advance = db.prepare(`UPDATE lim SET current_round = @r WHERE queue = 'q' AND current_round < @r`)
const begin = db.prepare("BEGIN IMMEDIATE"), commit = db.prepare("COMMIT")
const one = (now: number) => {
  let row: { id: number; claim_token: number }
  if (!limited) { readiness.get({ q: "q", now }); row = claimPlain.get({ now }) as typeof row }
  else {
    begin.run()
    readiness.get({ q: "q", now }); inFlight.get("q", now)
    const c: any = page.get("q")
    groupStart.get({ q: "q", g: c.group, r: c.round, id: c.id, now })
    row = claimId.get({ now, id: c.id }) as typeof row
    if (process.env.R === "1") advance.run({ r: c.round })
    commit.run()
  }
  ack.run(row.id, row.claim_token)
}
for (let i = 0; i < 500; i++) one(1000 + i)
const N = 5000, c0 = process.cpuUsage()
for (let i = 0; i < N; i++) one(2000 + i)
const u = process.cpuUsage(c0)
console.log(`${variant} limited=${limited} G=${G}: ${((u.user + u.system) / N).toFixed(1)} µs CPU per claim+ack`)
db.close(); fs.rmSync(dir, { recursive: true })
