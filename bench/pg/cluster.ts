/**
 * The PostgreSQL server the PostgreSQL benchmark runs on.
 *
 * With `ALKSTORE_PG_URL` set, that server is used as it is (the bench creates
 * and drops one database per sample on it, so the URL's user needs CREATEDB).
 * Otherwise a throw-away PostgreSQL 15 cluster is booted: Debian's server
 * binaries (off PATH, /usr/lib/postgresql/15/bin, or $ALKSTORE_PG_BIN), run as
 * user `postgres` when we are root (initdb and pg_ctl refuse root), a data
 * directory in a fresh temp dir, a free loopback port, and everything removed
 * afterwards. The settings are in `BENCH_SETTINGS` below and printed into
 * docs/benchmarks.md.
 */
import { execFileSync, spawnSync } from "node:child_process"
import { chownSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import net from "node:net"
import os from "node:os"
import path from "node:path"

/**
 * Server settings for benchmarking, with the reason for each. Durability
 * stays as shipped (fsync, synchronous_commit, full_page_writes all on): a
 * job queue's commit cost is part of what is measured.
 */
export const BENCH_SETTINGS: ReadonlyArray<readonly [string, string, string]> = [
  ["shared_buffers", "512MB", "the 1M-row preloads and their indexes stay in memory (default 128MB)"],
  ["max_wal_size", "4GB", "no forced checkpoints in the middle of a preload or a timed loop (default 1GB)"],
  ["checkpoint_timeout", "30min", "same reason (default 5min)"],
  ["max_connections", "200", "4 worker processes × each library's pool, plus the orchestrator"],
  ["fsync", "on", "unchanged: durable commits, as in production"],
  ["synchronous_commit", "on", "unchanged: every commit waits for its WAL flush"],
  ["full_page_writes", "on", "unchanged"],
  ["autovacuum", "on", "unchanged (the SKIP LOCKED queues churn dead tuples; vacuum is part of their cost)"],
  ["jit", "off", "no JIT compilation of the short queue statements (planning noise only)"],
  ["log_min_messages", "warning", "quiet server log"]
]

export interface PgServer {
  /** a URL of the maintenance database (`postgres`) on this server */
  readonly adminUrl: string
  /** a URL of database `db` on this server */
  readonly urlFor: (db: string) => string
  /** the server's `version()` string */
  readonly version: string
  /** how it was obtained, for the report */
  readonly origin: string
  readonly stop: () => void
}

const PG_BIN = process.env.ALKSTORE_PG_BIN ?? "/usr/lib/postgresql/15/bin"

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const srv = net.createServer()
    srv.unref()
    srv.on("error", reject)
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address()
      srv.close(() => (typeof addr === "object" && addr ? resolve(addr.port) : reject(new Error("no port"))))
    })
  })

const asPostgres = (cmd: string, args: ReadonlyArray<string>): { cmd: string; args: Array<string> } =>
  process.getuid?.() === 0
    ? { cmd: "runuser", args: ["-u", "postgres", "--", cmd, ...args] }
    : { cmd, args: [...args] }

const run = (cmd: string, args: ReadonlyArray<string>, what: string) => {
  const c = asPostgres(cmd, args)
  const r = spawnSync(c.cmd, c.args, { encoding: "utf8" })
  if (r.status !== 0) throw new Error(`${what} failed (exit ${r.status}): ${(r.stderr || r.stdout || "").trim().slice(0, 500)}`)
}

const withDb = (url: string, db: string): string => {
  const u = new URL(url)
  u.pathname = `/${db}`
  return u.toString()
}

/** Boots (or connects to) the server; `stop` removes a booted cluster. */
export const startServer = async (): Promise<PgServer> => {
  const given = process.env.ALKSTORE_PG_URL
  if (given) {
    const version = await serverVersion(given)
    return { adminUrl: given, urlFor: (db) => withDb(given, db), version, origin: "ALKSTORE_PG_URL", stop: () => {} }
  }
  const initdb = path.join(PG_BIN, "initdb")
  const pgCtl = path.join(PG_BIN, "pg_ctl")
  if (!existsSync(initdb)) {
    throw new Error(
      `PostgreSQL server binaries not found at ${PG_BIN} (apt-get install -y postgresql, or set ALKSTORE_PG_BIN / ALKSTORE_PG_URL)`
    )
  }
  const dir = mkdtempSync(path.join(os.tmpdir(), "alkstore-pgbench-"))
  const data = path.join(dir, "data")
  const asRoot = process.getuid?.() === 0
  if (asRoot) chownSync(dir, uidOf("postgres"), gidOf("postgres"))
  const port = await freePort()
  const stop = () => {
    const c = asPostgres(pgCtl, ["-D", data, "-m", "immediate", "-w", "stop"])
    spawnSync(c.cmd, c.args)
    rmSync(dir, { recursive: true, force: true })
  }
  try {
    run(initdb, ["-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-instructions"], "initdb")
    const conf = [
      `listen_addresses = '127.0.0.1'`,
      `port = ${port}`,
      `unix_socket_directories = '${dir}'`,
      ...BENCH_SETTINGS.map(([k, v]) => `${k} = '${v}'`)
    ].join("\n")
    writeFileSync(path.join(data, "postgresql.auto.conf"), `${conf}\n`)
    if (asRoot) chownSync(path.join(data, "postgresql.auto.conf"), uidOf("postgres"), gidOf("postgres"))
    run(pgCtl, ["-D", data, "-l", path.join(dir, "server.log"), "-w", "-t", "60", "start"], "pg_ctl start")
  } catch (e) {
    stop()
    throw e
  }
  const adminUrl = `postgres://postgres@127.0.0.1:${port}/postgres`
  const version = await serverVersion(adminUrl)
  return {
    adminUrl,
    urlFor: (db) => withDb(adminUrl, db),
    version,
    origin: `throw-away cluster (${PG_BIN}, initdb as ${asRoot ? "user postgres" : "this user"}, port ${port}, removed afterwards)`,
    stop
  }
}

const uidOf = (user: string) => Number(execFileSync("id", ["-u", user], { encoding: "utf8" }).trim())
const gidOf = (user: string) => Number(execFileSync("id", ["-g", user], { encoding: "utf8" }).trim())

const serverVersion = async (url: string): Promise<string> => {
  const { default: pg } = await import("pg")
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  try {
    return (await c.query<{ v: string }>("SELECT version() AS v")).rows[0]!.v
  } finally {
    await c.end()
  }
}

/** Runs statements on the maintenance database (CREATE/DROP DATABASE …). */
export const admin = async (url: string, statements: ReadonlyArray<string>): Promise<void> => {
  const { default: pg } = await import("pg")
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  try {
    for (const s of statements) await c.query(s)
  } finally {
    await c.end()
  }
}

/** The settings as the server reports them (read back for the report). */
export const readSettings = async (url: string): Promise<Record<string, string>> => {
  const { default: pg } = await import("pg")
  const c = new pg.Client({ connectionString: url })
  await c.connect()
  try {
    const names = BENCH_SETTINGS.map(([k]) => k)
    const r = await c.query<{ name: string; setting: string; unit: string | null }>(
      "SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1)",
      [names]
    )
    return Object.fromEntries(r.rows.map((x) => [x.name, x.unit ? `${x.setting} (${x.unit})` : x.setting]))
  } finally {
    await c.end()
  }
}
