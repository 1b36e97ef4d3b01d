import { SqlError } from "@effect/sql/SqlError"
import { Clock, Deferred, Duration, Effect, Exit, Schedule } from "effect"
import { raceFirst, timeoutFail } from "../race.js"
import { realClock } from "../realClock.js"
import Pg from "pg"
import type { WakeHub } from "../wake.js"
import { everything } from "./notify.js"

export interface ListenerOptions {
  /** How to reach the server (its own connection, outside every pool: LISTEN needs a session). */
  readonly connection: Pg.ClientConfig
  readonly channel: string
  readonly wake: WakeHub
  /** A heartbeat query runs this often ... */
  readonly heartbeatMillis: number
  /** ... and a connection whose heartbeat takes longer than this is dead (a half-open TCP connection). */
  readonly heartbeatTimeoutMillis: number
}

/**
 * When the LISTEN connection cannot be made, the next attempts follow this:
 * 100 ms, doubling, jittered (a fleet that lost its server together does not
 * reconnect in step), at most 5 s apart. The waiters' own deadlines and the
 * fallback poll cover the gap.
 */
export const reconnectBackoff = Schedule.exponential(Duration.millis(100), 2).pipe(
  Schedule.jittered,
  Schedule.union(Schedule.spaced(Duration.seconds(5)))
)

/**
 * A connection that stayed up this long was healthy: when it is lost, the
 * next connection is made at once and, failing, the backoff starts again
 * from its shortest wait (a loss long after an outage must not inherit the
 * outage's grown waits). One lost sooner continues the curve, so a server
 * that accepts and drops at once is not hammered.
 */
export const healthyAfterMillis = 1_000

/** Tears a connection down without waiting for a server that may never answer. */
const destroy = (client: Pg.Client) =>
  Effect.sync(() => {
    const stream = (client as unknown as { connection?: { stream?: { destroy?: () => void } } }).connection?.stream
    stream?.destroy?.()
    client.end().catch(() => {})
  })

/**
 * The store's one LISTEN connection in this process. Notifications are
 * coalesced per event-loop turn and wake one waiter of each topic they name
 * (the woken waiter re-reads and passes the baton). The connection is
 * watched: an `error` or `end` event, or a heartbeat that does not come back
 * within its deadline (a silently dead, half-open connection: TCP keepalive
 * alone takes minutes), ends it, and it is re-established with backoff.
 * Notifications sent while it was down are lost, so every reconnect wakes
 * one waiter of every topic; the waiters' own deadlines and the fallback
 * poll cover the gap meanwhile.
 *
 * The connection LISTENs only once somebody in this process has waited
 * (`onWaiting`), and from then on for good: a process that only enqueues
 * would otherwise receive, parse and dispatch the NOTIFY of every one of its
 * own commits, and the server would signal its listening backend for each
 * (docs/performance-pg.md, "Enqueue: a producer does not listen"). A waiter
 * registered its ticket and read before the LISTEN took effect, so a commit
 * in between would go unannounced: once the LISTEN is in, every topic's
 * waiter is woken to read again — the reconnect's rule.
 *
 * The heartbeat reads the connection's server session (`pg_backend_pid()`):
 * one that moved is a pooler in transaction mode, which cannot deliver the
 * notifications, and is said once (`listenUrl` is the remedy).
 *
 * The first connection is made before this returns (a failure is the
 * store's start-up `SqlError`); the rest runs in a fiber of the scope.
 */
export const startListener = (options: ListenerOptions) =>
  Effect.gen(function*() {
    const { channel, heartbeatMillis, heartbeatTimeoutMillis, wake } = options
    // A topic's first notification of an event-loop turn wakes at once; the rest of the turn's are folded into
    // it. (Collected and sent on the next turn, `setImmediate`, a wake took ~40 µs more on a warm process.)
    const signalled = new Set<string>()
    let clearing = false
    const endOfTurn = () => {
      clearing = false
      signalled.clear()
    }
    const onNotification = (message: Pg.Notification) => {
      if (message.channel !== channel) return
      const topic = message.payload === undefined || message.payload === "" ? everything : message.payload
      if (signalled.has(topic) || signalled.has(everything)) return
      signalled.add(topic)
      if (!clearing) {
        clearing = true
        setImmediate(endOfTurn)
      }
      if (topic === everything) wake.signalAll()
      else wake.signal(topic, 1)
    }
    const listenStatement = `LISTEN ${Pg.escapeIdentifier(channel)}`

    // The server session each connection's statements ran in when it connected. A heartbeat that runs
    // in another is a pooler in transaction mode handing the connection's statements to whichever
    // server connection is free: the LISTEN holds in a session nobody watches, and its notifications
    // reach another client or nobody (waiters wake at their fallback poll). Nothing here can mend
    // that; it is said once, with the setting that does.
    const sessionQuery = "SELECT pg_backend_pid() AS pid"
    const sessions = new WeakMap<Pg.Client, number>()
    let warned = false
    const sharedSession = (client: Pg.Client, pid: number) =>
      warned || sessions.get(client) === pid
        ? Effect.void
        : Effect.suspend(() => {
          warned = true
          return Effect.logWarning(
            `alkstore: the LISTEN connection's statements ran in server sessions ${sessions.get(client)} and ${pid}: ` +
              "behind a pooler in transaction mode its notifications reach another client or none, and waiters " +
              "wake at their fallback poll; " +
              "point listenUrl at the server (or a session-mode pool)"
          )
        })

    // Whether anybody in this process has waited yet; the connections that have LISTENed.
    let wanted = false
    const listened = new WeakSet<Pg.Client>()
    // The connection being watched now (none while reconnecting).
    let live: Pg.Client | undefined
    /** LISTENs on `client` once wanted, then wakes every waiter to read again (a commit before it went unannounced). */
    const listenLate = (client: Pg.Client) => {
      if (!wanted || listened.has(client)) return
      listened.add(client)
      client.query(listenStatement).then(
        () => wake.signalAll(),
        // The session sees the connection end and reconnects, LISTENing as it connects.
        () => Effect.runSync(destroy(client))
      )
    }
    wake.onWaiting((waiting) => {
      if (!waiting || wanted) return
      wanted = true
      if (live !== undefined) listenLate(live)
    })

    /**
     * Connects and LISTENs, within the heartbeat's deadline: a server that
     * accepts and never answers (a partition, a half-open path) would
     * otherwise hold the attempt for as long as TCP retries — minutes.
     */
    const connect = Effect.async<Pg.Client, SqlError>((resume) => {
      let client: Pg.Client
      try {
        client = new Pg.Client({ ...options.connection, keepAlive: true, keepAliveInitialDelayMillis: 1_000 })
      } catch (cause) {
        // The driver parses the connection string here: a storage error, never a defect.
        return resume(Effect.fail(new SqlError({ cause, message: `Failed to make the LISTEN connection: ${String(cause)}` })))
      }
      client.on("error", () => {}) // reported through `broken` below
      let settled = false
      client.connect()
        .then(() => client.query<{ pid: number }>(sessionQuery))
        .then((result) => {
          sessions.set(client, result.rows[0]!.pid)
          client.on("notification", onNotification)
          if (!wanted) return
          listened.add(client)
          return client.query(listenStatement)
        })
        .then(
          () => {
            settled = true
            resume(Effect.succeed(client))
          },
          (cause: unknown) => {
            settled = true
            Effect.runSync(destroy(client))
            resume(Effect.fail(new SqlError({ cause, message: `Failed to LISTEN on ${channel}: ${String(cause)}` })))
          }
        )
      return Effect.suspend(() => (settled ? Effect.void : destroy(client)))
    }).pipe((effect) =>
      timeoutFail(effect, {
        duration: Duration.millis(heartbeatTimeoutMillis),
        onTimeout: () =>
          new SqlError({ cause: new Error("timeout"), message: `Connecting to LISTEN on ${channel} timed out` })
      })
    )

    /** Runs until the connection is found dead, then tears it down; always fails. */
    const session = (client: Pg.Client) =>
      Effect.gen(function*() {
        const broken = yield* Deferred.make<never, SqlError>()
        const fail = (cause: unknown) => Deferred.unsafeDone(broken, Exit.fail(new SqlError({ cause, message: "LISTEN connection lost" })))
        client.on("error", fail)
        client.on("end", () => fail(new Error("connection ended")))
        live = client
        listenLate(client) // somebody began waiting while it connected
        const heartbeat = Effect.tryPromise({
          try: () => client.query<{ pid: number }>(sessionQuery),
          catch: (cause) => new SqlError({ cause, message: "LISTEN heartbeat failed" })
        }).pipe(
          Effect.tap((result) => sharedSession(client, result.rows[0]!.pid)),
          (effect) =>
            timeoutFail(effect, {
              duration: Duration.millis(heartbeatTimeoutMillis),
              onTimeout: () => new SqlError({ cause: new Error("timeout"), message: "LISTEN heartbeat timed out (half-open connection?)" })
            }),
          Effect.zipRight(Effect.sleep(Duration.millis(heartbeatMillis))),
          Effect.forever
        )
        return yield* raceFirst(Deferred.await(broken), Effect.delay(heartbeat, Duration.millis(heartbeatMillis)))
      }).pipe(Effect.ensuring(Effect.zipRight(Effect.sync(() => {
        if (live === client) live = undefined
      }), destroy(client))))

    /**
     * Watch a connection until it is lost, then make the next one, forever:
     * connect, wake everyone (whatever was notified while no connection
     * listened is lost: every waiter re-reads), watch it. A failed attempt,
     * or the loss of a connection that was not yet healthy, waits on
     * `reconnectBackoff`; a healthy connection's loss starts it again.
     */
    const forever = (first: Pg.Client) =>
      Effect.gen(function*() {
        const backoff = yield* Schedule.driver(reconnectBackoff)
        // the schedule never ends (its `spaced` half recurs forever): `next` only ever sleeps
        const wait = Effect.ignore(backoff.next(undefined))
        const watch = (client: Pg.Client) =>
          Effect.gen(function*() {
            const since = yield* Clock.currentTimeMillis
            const lost = yield* Effect.flip(session(client))
            yield* Effect.logDebug("alkstore: the LISTEN connection was lost; reconnecting", lost)
            if ((yield* Clock.currentTimeMillis) - since >= healthyAfterMillis) yield* backoff.reset
            else yield* wait
          })
        const attempt = connect.pipe(
          Effect.matchEffect({
            onFailure: (error) =>
              Effect.zipRight(Effect.logDebug("alkstore: the LISTEN connection could not be made; retrying", error), wait),
            onSuccess: (client) => Effect.zipRight(Effect.sync(() => wake.signalAll()), watch(client))
          })
        )
        yield* watch(first)
        return yield* Effect.forever(attempt)
      })

    const first = yield* connect
    // Ended with the scope too: a store closed before the watching fiber started (interrupted before its
    // `session` put its own teardown in place) left this session open, and its socket kept the process alive.
    yield* Effect.addFinalizer(() => destroy(first))
    yield* Effect.forkScoped(Effect.withClock(Effect.interruptible(forever(first)), realClock))
  })
