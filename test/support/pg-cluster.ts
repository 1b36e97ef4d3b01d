/**
 * A throw-away PostgreSQL cluster (for the tests' global setup and the
 * benchmark). Debian's `postgresql` package keeps its server binaries off
 * PATH (/usr/lib/postgresql/<v>/bin) and `initdb`/`pg_ctl` refuse root, so as
 * root they run as user `postgres`, on a data directory in a temporary
 * directory that user owns, on a free loopback port with its unix socket in
 * the same directory. `stop` removes everything. The settings trade
 * durability for speed (fsync off): it is a scratch server.
 */
import { execFile, execFileSync, spawn, spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"

const findBin = (): string => {
  const roots = fs.existsSync("/usr/lib/postgresql") ? fs.readdirSync("/usr/lib/postgresql") : []
  const versions = roots.filter((v) => fs.existsSync(path.join("/usr/lib/postgresql", v, "bin", "initdb")))
    .sort((a, b) => Number(b) - Number(a))
  if (versions.length > 0) return path.join("/usr/lib/postgresql", versions[0]!, "bin")
  const onPath = spawnSync("sh", ["-c", "command -v initdb"], { encoding: "utf8" })
  if (onPath.status === 0 && onPath.stdout.trim() !== "") return path.dirname(onPath.stdout.trim())
  throw new Error(
    "PostgreSQL tests need a server: set ALKSTORE_PG_URL, or install PostgreSQL (apt-get install -y postgresql); " +
      "no initdb found under /usr/lib/postgresql/*/bin or on PATH"
  )
}

/** A loopback TCP port nothing listens on now. */
export const freePort = () =>
  new Promise<number>((resolve, reject) => {
    const server = net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const port = (server.address() as net.AddressInfo).port
      server.close(() => resolve(port))
    })
  })

export const isRoot = typeof process.getuid === "function" && process.getuid() === 0

/** Runs a server binary, as `postgres` when we are root. */
const run = (bin: string, args: ReadonlyArray<string>) => {
  const [file, argv] = isRoot ? ["runuser", ["-u", "postgres", "--", bin, ...args]] : [bin, [...args]]
  return execFileSync(file, argv as Array<string>, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] })
}

/** How `pg_ctl stop` shuts the server down: `fast` ends every session cleanly, `immediate` as a crash would. */
export type StopMode = "smart" | "fast" | "immediate"

export interface Cluster {
  readonly url: string
  /** Stops the server and removes its directory. */
  readonly stop: () => void
  /** Stops the server (its data kept); every connection to it ends. */
  readonly stopServer: (mode: StopMode) => Promise<void>
  /** Starts the stopped server again, on the same port. */
  readonly startServer: () => Promise<void>
  /** `pg_ctl restart` on the same port. */
  readonly restart: (mode: StopMode) => Promise<void>
}

/** `run` without blocking the event loop (the chaos driver keeps producing while the server restarts). */
const runAsync = (bin: string, args: ReadonlyArray<string>) =>
  new Promise<void>((resolve, reject) => {
    const [file, argv] = isRoot ? ["runuser", ["-u", "postgres", "--", bin, ...args]] : [bin, [...args]]
    execFile(file, argv as Array<string>, { encoding: "utf8" }, (error, _stdout, stderr) =>
      error === null ? resolve() : reject(new Error(`${bin} ${args.join(" ")}: ${String(error)} ${stderr}`)))
  })

/**
 * Starts a throw-away cluster; `stop` removes it. Throws (with the server's log) when it cannot.
 * `durableCommits`: a commit returns only once its WAL reached the operating system (the default
 * `synchronous_commit`), so a committed transaction survives the server being killed (`stop -m
 * immediate`); without it the last commits before such a kill may be lost — fine for tests that never kill it.
 */
export const startCluster = async (options: { readonly durableCommits?: boolean } = {}): Promise<Cluster> => {
  const bin = findBin()
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-pg-"))
  const data = path.join(dir, "data")
  if (isRoot) {
    const { uid, gid } = userIds("postgres")
    fs.chownSync(dir, uid, gid)
  }
  fs.chmodSync(dir, 0o700)
  const port = await freePort()
  // The server is a process of its own: a runner ended by a signal (Ctrl-C, a CI timeout's SIGTERM, SIGKILL)
  // never reaches its teardown, and the server ran on, its data directory in the temp dir, until the machine
  // restarted. A detached watchdog stops and removes it once this process is gone.
  const asPostgres = isRoot ? ["runuser", "-u", "postgres", "--"] : []
  const pgCtlStop = [...asPostgres, path.join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"]
  const quoted = (args: ReadonlyArray<string>) => args.map((a) => `'${a.replaceAll("'", "'\\''")}'`).join(" ")
  const watchdog = spawn(
    "sh",
    ["-c", `while kill -0 ${process.pid} 2>/dev/null; do sleep 1; done; ${quoted(pgCtlStop)} >/dev/null 2>&1; rm -rf ${quoted([dir])}`],
    { detached: true, stdio: "ignore" }
  )
  watchdog.unref()
  const stop = () => {
    watchdog.kill()
    try {
      run(path.join(bin, "pg_ctl"), ["-D", data, "-m", "immediate", "-w", "stop"])
    } catch {
      // not running
    }
    fs.rmSync(dir, { recursive: true, force: true })
  }
  const serverOptions = [
    "-l",
    path.join(dir, "server.log"),
    "-w",
    "-t",
    "60",
    "-o",
    `-p ${port} -c listen_addresses=127.0.0.1 -k ${dir} -c max_connections=400 -c fsync=off ` +
    `-c synchronous_commit=${options.durableCommits === true ? "on" : "off"} -c full_page_writes=off -c shared_buffers=64MB`
  ]
  const pgCtl = path.join(bin, "pg_ctl")
  try {
    run(path.join(bin, "initdb"), ["-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync"])
    run(pgCtl, ["-D", data, ...serverOptions, "start"])
  } catch (cause) {
    const log = fs.existsSync(path.join(dir, "server.log")) ? fs.readFileSync(path.join(dir, "server.log"), "utf8") : ""
    const stderr = (cause as { stderr?: string }).stderr ?? ""
    stop()
    throw new Error(`PostgreSQL could not be started: ${String(cause)}\n${stderr}\n${log}`)
  }
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    stop,
    stopServer: (mode) => runAsync(pgCtl, ["-D", data, "-m", mode, "-w", "stop"]),
    startServer: () => runAsync(pgCtl, ["-D", data, ...serverOptions, "start"]),
    restart: (mode) => runAsync(pgCtl, ["-D", data, "-m", mode, ...serverOptions, "restart"])
  }
}

export const userIds = (name: string) => {
  const line = fs.readFileSync("/etc/passwd", "utf8").split("\n").find((l) => l.startsWith(`${name}:`))
  if (line === undefined) throw new Error(`PostgreSQL tests run as root need a '${name}' user (Debian's postgresql package creates it)`)
  const [, , uid, gid] = line.split(":")
  return { uid: Number(uid), gid: Number(gid) }
}

