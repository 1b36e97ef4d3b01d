import { SqlError } from "@effect/sql/SqlError"
import { Clock, Deferred, Duration, Effect, Exit } from "effect"
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

    const connect = Effect.tryPromise({
      try: async () => {
        const client = new Pg.Client({ ...options.connection, keepAlive: true, keepAliveInitialDelayMillis: 1_000 })
        client.on("error", () => {}) // reported through `broken` below
        try {
          await client.connect()
          client.on("notification", onNotification)
          await client.query(`LISTEN ${Pg.escapeIdentifier(channel)}`)
          return client
        } catch (cause) {
          client.end().catch(() => {})
          throw cause
        }
      },
      catch: (cause) => new SqlError({ cause, message: `Failed to LISTEN on ${channel}: ${String(cause)}` })
    })

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

    const forever = (first: Pg.Client) =>
      Effect.gen(function*() {
        let client: Pg.Client | undefined = first
        let failures = 0
        while (true) {
          if (client === undefined) {
            const next = yield* Effect.either(connect)
            if (next._tag === "Left") {
              failures++
              const backoff = Math.min(5_000, 50 * 2 ** Math.min(failures, 10)) * (0.5 + Math.random() / 2)
              yield* Effect.sleep(Duration.millis(backoff))
              continue
            }
            client = next.right
            failures = 0
            // Whatever was notified while the connection was down is lost: everybody re-reads.
            wake.signalAll()
          }
          const error = yield* Effect.flip(session(client))
          client = undefined
          yield* Effect.logDebug("alkstore: the LISTEN connection was lost; reconnecting", error)
        }
      })

    const first = yield* connect
    yield* Effect.forkScoped(Effect.withClock(Effect.interruptible(forever(first)), realClock))
  })
