import { SqlError } from "@effect/sql/SqlError"
import { Clock, Deferred, Duration, Effect, Exit, Schedule } from "effect"
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

/** The listener's timers run on real time, whatever Clock the store's callers use (TestClock included). */
const realClock = Clock.make()

/**
 * When the LISTEN connection is lost or cannot be made, the next attempts
 * follow this: 100 ms, doubling, jittered (a fleet that lost its server
 * together does not reconnect in step), at most 5 s apart; a connection
 * that lived 5 s or more starts the curve again. The waiters' own deadlines
 * and the fallback poll cover the gap.
 */
export const reconnectBackoff = Schedule.exponential(Duration.millis(100), 2).pipe(
  Schedule.jittered,
  Schedule.union(Schedule.spaced(Duration.seconds(5))),
  Schedule.resetAfter(Duration.seconds(5))
)

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
 * The first connection is made before this returns (a failure is the
 * store's start-up `SqlError`); the rest runs in a fiber of the scope.
 */
export const startListener = (options: ListenerOptions) =>
  Effect.gen(function*() {
    const { channel, heartbeatMillis, heartbeatTimeoutMillis, wake } = options
    const pending = new Set<string>()
    let flushing = false
    const flush = () => {
      flushing = false
      const topics = [...pending]
      pending.clear()
      if (topics.includes(everything)) return wake.signalAll()
      for (const topic of topics) wake.signal(topic, 1)
    }
    const onNotification = (message: Pg.Notification) => {
      if (message.channel !== channel) return
      pending.add(message.payload === undefined || message.payload === "" ? everything : message.payload)
      if (!flushing) {
        flushing = true
        setImmediate(flush)
      }
    }

    /**
     * Connects and LISTENs, within the heartbeat's deadline: a server that
     * accepts and never answers (a partition, a half-open path) would
     * otherwise hold the attempt for as long as TCP retries — minutes.
     */
    const connect = Effect.async<Pg.Client, SqlError>((resume) => {
      const client = new Pg.Client({ ...options.connection, keepAlive: true, keepAliveInitialDelayMillis: 1_000 })
      client.on("error", () => {}) // reported through `broken` below
      let settled = false
      client.connect()
        .then(() => {
          client.on("notification", onNotification)
          return client.query(`LISTEN ${Pg.escapeIdentifier(channel)}`)
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
    }).pipe(
      Effect.timeoutFail({
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
        const heartbeat = Effect.tryPromise({
          try: () => client.query("SELECT 1"),
          catch: (cause) => new SqlError({ cause, message: "LISTEN heartbeat failed" })
        }).pipe(
          Effect.timeoutFail({
            duration: Duration.millis(heartbeatTimeoutMillis),
            onTimeout: () => new SqlError({ cause: new Error("timeout"), message: "LISTEN heartbeat timed out (half-open connection?)" })
          }),
          Effect.zipRight(Effect.sleep(Duration.millis(heartbeatMillis))),
          Effect.forever
        )
        return yield* Effect.raceFirst(Deferred.await(broken), Effect.delay(heartbeat, Duration.millis(heartbeatMillis)))
      }).pipe(Effect.ensuring(destroy(client)))

    /**
     * Connect, wake everyone (whatever was notified while no connection
     * listened is lost: every waiter re-reads), watch the connection until it
     * is lost; on `reconnectBackoff`, forever.
     */
    const reconnect = Effect.flatMap(connect, (client) => Effect.zipRight(Effect.sync(() => wake.signalAll()), session(client))).pipe(
      Effect.tapError((error) => Effect.logDebug("alkstore: the LISTEN connection failed or was lost; reconnecting", error)),
      Effect.retry(reconnectBackoff)
    )
    const forever = (first: Pg.Client) =>
      session(first).pipe(
        Effect.catchAll((lost) => Effect.logDebug("alkstore: the LISTEN connection was lost; reconnecting", lost)),
        Effect.zipRight(reconnect)
      )

    const first = yield* connect
    yield* Effect.forkScoped(Effect.withClock(Effect.interruptible(forever(first)), realClock))
  })
