/**
 * A throw-away PgBouncer (Debian's `pgbouncer` package) in front of the
 * tests' PostgreSQL server, in transaction pooling mode: each transaction,
 * or each statement outside one, runs on whichever server connection is free,
 * so nothing a session holds (named prepared statements, LISTEN, SET, session
 * advisory locks) outlives it.
 *
 * PgBouncer 1.18 passes no `search_path`, so each schema a store uses is its
 * own PgBouncer database (named after the schema) whose server connections
 * start with `SET search_path TO <schema>, public`: the tests read engine
 * tables unqualified, as on the server. PgBouncer refuses to run as root; as
 * root it runs as user `postgres`.
 */
import { spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { freePort, isRoot, userIds } from "./pg-cluster.js"

export interface Bouncer {
  /** A URL through PgBouncer to the database, its search_path starting at `schema`. */
  readonly urlFor: (schema: string) => string
  readonly stop: () => Promise<void>
}

const findBouncer = () => {
  for (const candidate of ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]) if (fs.existsSync(candidate)) return candidate
  const onPath = spawnSync("sh", ["-c", "command -v pgbouncer"], { encoding: "utf8" })
  if (onPath.status === 0 && onPath.stdout.trim() !== "") return onPath.stdout.trim()
  throw new Error("These tests need PgBouncer: apt-get install -y pgbouncer (.ci/run installs it when missing)")
}

const accepts = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = net.connect(port, "127.0.0.1")
    socket.once("connect", () => {
      socket.destroy()
      resolve(true)
    })
    socket.once("error", () => resolve(false))
  })

/**
 * Starts PgBouncer for the server `serverUrl` names (its host, port and
 * user), with one PgBouncer database per schema `schemas` lists, each on the
 * server's database `database`.
 */
export const startBouncer = async (options: {
  readonly serverUrl: string
  readonly database: string
  readonly schemas: ReadonlyArray<string>
  readonly poolSize?: number
}): Promise<Bouncer> => {
  const bin = findBouncer()
  const server = new URL(options.serverUrl)
  const user = decodeURIComponent(server.username)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-bouncer-"))
  const port = await freePort()
  const databases = options.schemas.map((schema) =>
    `${schema} = host=${server.hostname} port=${server.port} dbname=${options.database} ` +
    `connect_query='SET search_path TO ${schema}, public'`
  )
  fs.writeFileSync(path.join(dir, "users.txt"), `"${user}" ""\n`)
  fs.writeFileSync(
    path.join(dir, "pgbouncer.ini"),
    [
      "[databases]",
      ...databases,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      "unix_socket_dir =",
      "auth_type = trust",
      `auth_file = ${path.join(dir, "users.txt")}`,
      "pool_mode = transaction",
      `default_pool_size = ${options.poolSize ?? 10}`,
      "max_client_conn = 1000",
      // node-postgres sends `options` when a URL carries it; PgBouncer 1.18 refuses unknown startup parameters.
      "ignore_startup_parameters = options, extra_float_digits",
      `logfile = ${path.join(dir, "pgbouncer.log")}`,
      ""
    ].join("\n")
  )
  if (isRoot) {
    // PgBouncer refuses root: it drops to `postgres`, which must read its files and write its log
    const { uid, gid } = userIds("postgres")
    for (const file of [dir, ...fs.readdirSync(dir).map((f) => path.join(dir, f))]) fs.chownSync(file, uid, gid)
  }
  // `-u`: PgBouncer drops to that user itself, so the child is PgBouncer and a signal reaches it.
  const argv = [...(isRoot ? ["-u", "postgres"] : []), path.join(dir, "pgbouncer.ini")]
  const child = spawn(bin, argv, { stdio: ["ignore", "ignore", "pipe"] })
  let stderr = ""
  child.stderr.on("data", (chunk: Buffer) => {
    stderr += chunk.toString()
  })
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()))
  const log = () => {
    const file = path.join(dir, "pgbouncer.log")
    return fs.existsSync(file) ? fs.readFileSync(file, "utf8") : ""
  }
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      // SIGTERM: shut down at once (SIGINT would wait for every client to leave).
      child.kill("SIGTERM")
      await exited
    }
    fs.rmSync(dir, { recursive: true, force: true })
  }
  for (let attempt = 0; ; attempt++) {
    if (await accepts(port)) break
    if (child.exitCode !== null || attempt > 200) {
      const reason = `PgBouncer could not be started (exit ${child.exitCode}): ${stderr}\n${log()}`
      await stop()
      throw new Error(reason)
    }
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  return {
    urlFor: (schema) => `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/${schema}`,
    stop
  }
}
