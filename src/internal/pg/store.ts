import * as Reactivity from "@effect/experimental/Reactivity"
import type { MigrationError } from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import * as PgClient from "@effect/sql-pg/PgClient"
import { Clock, Context, Duration, Effect, Layer, Redacted, type Scope } from "effect"
import Pg from "pg"
import { InvalidOptions } from "../../StoreError.js"
import { StoreActivity } from "../activity.js"
import { fromChecked, optionalDurationMillis, waitSettingMillis } from "../duration.js"
import { realClock } from "../realClock.js"
import { ownOptions } from "../options.js"
import { schemaNameProblem } from "./schemaName.js"
import { defaultSettings, type EngineSettings, type EngineShape } from "../engine.js"
import { makeLifetime } from "../lifetime.js"
import { makeMechanisms, type Mechanisms } from "../mechanisms.js"
import { countHoldersBuried } from "../telemetry.js"
import { makeWakeHub } from "../wake.js"
import { makeDatabaseClock, measureOffset } from "./clock.js"
import { makeExecutor, type PgExecutor } from "./executor.js"
import { keepConnection } from "./keptConnection.js"
import { startListener } from "./listener.js"
import { makeAdminStorage } from "./adminStorage.js"
import { makeLockStorage } from "./lockStorage.js"
import { migrate } from "./migrations.js"
import { makeNotifier } from "./notify.js"
import { makePersistedQueueStorage } from "./persistedQueueStorage.js"
import { makeRateLimiterStorage } from "./rateLimiterStorage.js"
import { makeQueueStorage } from "./queueStorage.js"
import { makeFlowStorage } from "./flowStorage.js"
import { makeFlowMemory } from "../flowMemory.js"
import { followTableSizes } from "./planSize.js"
import { makeScheduleStorage } from "./scheduleStorage.js"

/**
 * Engine settings a PostgreSQL store accepts (all optional). Those the store
 * waits in one timer (`leaderTtl`, `leaderRenewEvery`, `maintenanceEvery`,
 * `fallbackPoll`, `listenHeartbeat`, `listenHeartbeatTimeout`,
 * `clockResync`, `planCheckEvery`) take at most 24 days; more is an
 * `InvalidOptions` (a timer past ~24.8 days never fires).
 */
export interface StoreSettings {
  /** The schema of the engine's tables; default `alkstore`. Lowercase letters, digits and `_`, at most 48; not `pg_…`. */
  readonly schema?: string
  /** Dead jobs older than this are purged by maintenance; default 7 days. */
  readonly deadRetention?: import("effect").Duration.DurationInput
  /** The scheduler's leadership lease; default 10 s. */
  readonly leaderTtl?: import("effect").Duration.DurationInput
  /** How often the scheduler's leader renews its lease; default 2 s. */
  readonly leaderRenewEvery?: import("effect").Duration.DurationInput
  /** How long after one queue maintenance run ends the leader starts the next; default 1 minute. */
  readonly maintenanceEvery?: import("effect").Duration.DurationInput
  /** The waiters' safety-net poll; default 5 s. */
  readonly fallbackPoll?: import("effect").Duration.DurationInput
  /**
   * Where the LISTEN connection connects, when not where the client does
   * (e.g. the server itself while the pool goes through PgBouncer in
   * transaction mode, which cannot LISTEN). The LISTEN connection's
   * heartbeat warns once when its statements run in more than one server
   * session.
   */
  readonly listenUrl?: string | Redacted.Redacted
  /** How often the LISTEN connection is checked with a heartbeat; default 5 s. */
  readonly listenHeartbeat?: import("effect").Duration.DurationInput
  /** A heartbeat slower than this marks the LISTEN connection dead (half-open) and reconnects; default 2 s. */
  readonly listenHeartbeatTimeout?: import("effect").Duration.DurationInput
  /**
   * Which clock judges leases, backoff and boundaries. `"database"`
   * (default): the host's clock corrected by its measured offset to the
   * database server's, so every host agrees; it becomes the `Clock` of the
   * program the layer is provided to. `"host"`: Effect's `Clock` as it is
   * (tests on `TestClock` use this).
   */
  readonly clock?: "database" | "host"
  /** How often the database clock's offset is re-measured; default 60 s. */
  readonly clockResync?: import("effect").Duration.DurationInput
  /**
   * Whether the engine's statements run as named prepared statements, parsed
   * and planned once per pooled connection (default `true`). Set `false`
   * behind a pooler that cannot keep them (PgBouncer in transaction mode
   * before 1.21): every statement is then parsed and planned on every call.
   * Left `true` there, the first statement a server session refuses as one
   * it does not have turns the store's statements unprepared from then on,
   * with one warning (docs/engines.md, "Behind a connection pooler").
   */
  readonly prepare?: boolean
  /**
   * How often the engine tables' sizes are read, so that the statements'
   * cached plans are made again once a table they read has doubled or halved
   * (a plan made while the table held a few pages scans it once it holds
   * thousands; see docs/engines.md); default 1 s. Not read with `prepare: false`.
   */
  readonly planCheckEvery?: import("effect").Duration.DurationInput
}

export interface ResolvedSettings extends EngineSettings {
  readonly schema: string
  readonly prepare: boolean
  readonly listenHeartbeatMillis: number
  readonly listenHeartbeatTimeoutMillis: number
  readonly clockResyncMillis: number
  readonly planCheckMillis: number
}

export const resolveSettings = (options: StoreSettings): Effect.Effect<ResolvedSettings, InvalidOptions> =>
  Effect.gen(function*() {
    const get = (field: keyof StoreSettings, fallback: number) =>
      Effect.map(
        optionalDurationMillis(field, options[field] as never, { positive: true }),
        (millis) => millis ?? fallback
      )
    const wait = (field: keyof StoreSettings, fallback: number) =>
      waitSettingMillis(field, options[field] as never, fallback)
    const schema = options.schema ?? "alkstore"
    const problem = schemaNameProblem(schema)
    if (problem !== undefined) return yield* problem
    if (options.clock !== undefined && options.clock !== "database" && options.clock !== "host") {
      return yield* new InvalidOptions({ field: "clock", reason: `must be "database" or "host"` })
    }
    if (options.prepare !== undefined && typeof options.prepare !== "boolean") {
      return yield* new InvalidOptions({ field: "prepare", reason: "must be a boolean" })
    }
    if (options.listenUrl !== undefined && !isConnectionString(options.listenUrl)) {
      return yield* new InvalidOptions({ field: "listenUrl", reason: "must be a PostgreSQL connection string the pg driver parses" })
    }
    return {
      schema,
      prepare: options.prepare ?? true,
      deadRetentionMillis: yield* get("deadRetention", defaultSettings.deadRetentionMillis),
      // Settings the store waits in one timer are at most 24 days (duration.ts `maxWaitMillis`).
      leaderTtlMillis: yield* wait("leaderTtl", defaultSettings.leaderTtlMillis),
      leaderRenewMillis: yield* wait("leaderRenewEvery", defaultSettings.leaderRenewMillis),
      maintenanceEveryMillis: yield* wait("maintenanceEvery", defaultSettings.maintenanceEveryMillis),
      fallbackPollMillis: yield* wait("fallbackPoll", defaultSettings.fallbackPollMillis),
      listenHeartbeatMillis: yield* wait("listenHeartbeat", 5_000),
      listenHeartbeatTimeoutMillis: yield* wait("listenHeartbeatTimeout", 2_000),
      clockResyncMillis: yield* wait("clockResync", 60_000),
      planCheckMillis: yield* wait("planCheckEvery", 1_000)
    }
  })

/** Whether the driver takes `url` (plain or `Redacted`) as a connection string: parsed here, not at the first LISTEN. */
const isConnectionString = (url: unknown): boolean => {
  const text = Redacted.isRedacted(url) ? Redacted.value(url) : url
  if (typeof text !== "string") return false
  try {
    new Pg.Client({ connectionString: text }) // parses only; connects on `connect()`
    return true
  } catch {
    return false
  }
}

export type { Mechanisms }

/**
 * The LISTEN connection's settings, from the client's: the fields `@effect/sql-pg`'s pool connects with,
 * its `stream` included (a connector or tunnel that hands the driver its socket), and not `path`, which
 * the pool ignores — the LISTEN goes where the pool's connections go.
 */
const listenConnection = (config: PgClient.PgClientConfig, listenUrl: StoreSettings["listenUrl"]): Pg.ClientConfig => {
  if (listenUrl !== undefined) {
    return {
      connectionString: Redacted.isRedacted(listenUrl) ? Redacted.value(listenUrl) : listenUrl,
      application_name: "alkstore-listen"
    }
  }
  return {
    connectionString: config.url === undefined ? undefined : Redacted.value(config.url),
    host: config.host,
    port: config.port,
    ...(config.stream === undefined ? {} : { stream: config.stream as NonNullable<Pg.ClientConfig["stream"]> }),
    database: config.database,
    user: config.username,
    password: config.password === undefined ? undefined : Redacted.value(config.password),
    ssl: config.ssl,
    application_name: "alkstore-listen"
  }
}

/** Wakes after the store's own transactions commit; an application's transaction wakes by its NOTIFY. */
const makeSignal = (executor: PgExecutor, wake: EngineShape["wake"]): EngineShape["signal"] => {
  const pending = new WeakMap<Array<() => void>, Map<string, number>>()
  return (context, topic, count) => {
    const open = executor.openTransaction(context)
    if (open === "none") return wake.signal(topic, count)
    if (open === "application") return
    const hooks = executor.commitHooks(context)!
    let counts = pending.get(hooks)
    if (counts === undefined) {
      const topics = new Map<string, number>()
      counts = topics
      pending.set(hooks, topics)
      hooks.push(() => {
        for (const [name, n] of topics) wake.signal(name, n)
      })
    }
    counts.set(topic, (counts.get(topic) ?? 0) + count)
  }
}

export interface Built {
  readonly mechanisms: Context.Context<Mechanisms>
  readonly clock: Clock.Clock | undefined
  /** The store's transactions on its client (`PgStore.layer` gives its own client's `withTransaction` them). */
  readonly transaction: PgExecutor["transaction"]
}

/**
 * Until no statement of the store's is on its way, for at most a second of real time: an operation in flight
 * takes a round trip or two; a give-back left to the background by a stop (`givingBack`) may never end.
 */
const untilIdle = (executor: PgExecutor) =>
  Effect.suspend(() => (executor.inFlight() === 0 ? Effect.void : Effect.sleep(Duration.millis(5)))).pipe(
    Effect.repeat({ until: () => executor.inFlight() === 0 }),
    // Interruptible, or the bound would not hold: this runs as a finalizer, where the timeout's race
    // cannot interrupt the wait and so waits for it (for good, were a count never to come down).
    Effect.interruptible,
    Effect.timeout(Duration.millis(1_000)),
    Effect.ignore,
    Effect.withClock(realClock)
  )

/**
 * Migrates, then builds the engine and every mechanism over `client`.
 * `keep`: keep one connection of the pool for the statements outside a
 * transaction (keptConnection.ts) — only in a pool the store owns.
 */
export const buildMechanisms = (
  client: PgClient.PgClient,
  settings: ResolvedSettings,
  options: StoreSettings,
  keep = false
): Effect.Effect<Built, SqlError | MigrationError, Scope.Scope> =>
  Effect.gen(function*() {
    const instanceId = crypto.randomUUID()
    // Given back after `untilIdle` below (finalizers run in reverse): a statement still on it is let finish first.
    const kept = keep ? yield* keepConnection(client) : undefined
    const executor = yield* makeExecutor(client, instanceId.replaceAll("-", ""), { prepare: settings.prepare, kept })
    // Closed after the store's own work stopped (registered before it), and before a pool the store owns ends:
    // `pg-pool` drops the requests still waiting for a connection when it ends, never answering them, so an
    // operation in flight as the store closed (a consume, an enqueue) waited for ever. Bounded (real time).
    yield* Effect.addFinalizer(() => untilIdle(executor))
    const { schema } = settings
    yield* migrate(executor, schema)
    if (settings.prepare) yield* followTableSizes(executor, schema, settings.planCheckMillis)
    const notifier = makeNotifier(schema)
    const wake = makeWakeHub()
    yield* startListener({
      connection: listenConnection(client.config, options.listenUrl),
      channel: notifier.channel,
      wake,
      heartbeatMillis: settings.listenHeartbeatMillis,
      heartbeatTimeoutMillis: settings.listenHeartbeatTimeoutMillis
    })
    const flowMemory = makeFlowMemory()
    const flow = makeFlowStorage(executor, schema, notifier, flowMemory)
    const engine: EngineShape = {
      queues: makeQueueStorage(executor, schema, notifier, flowMemory, flow.claim, countHoldersBuried),
      flow: flow.storage,
      locks: makeLockStorage(executor, schema, notifier),
      schedules: makeScheduleStorage(executor, schema, notifier),
      admin: makeAdminStorage(executor, schema),
      persistedQueue: makePersistedQueueStorage(executor, schema),
      rateLimiter: makeRateLimiterStorage(executor, schema),
      transaction: executor.transaction,
      signal: makeSignal(executor, wake),
      afterCommit: (context, f) => {
        if (executor.openTransaction(context) === "store") executor.commitHooks(context)!.push(f)
        else f()
      },
      wake,
      lifetime: makeLifetime(wake),
      instanceId,
      settings,
      gaugedQueues: new Set()
    }
    const mechanisms = Context.add(yield* makeMechanisms(engine), StoreActivity, { inFlight: executor.inFlight }) as Context.Context<
      Mechanisms
    >
    if (options.clock === "host") return { mechanisms, clock: undefined, transaction: executor.transaction }
    const host = yield* Clock.clockWith(Effect.succeed)
    const aligned = yield* makeDatabaseClock(measureOffset(executor, host), host, settings.clockResyncMillis)
    return { mechanisms, clock: aligned.clock, transaction: executor.transaction }
  })

/** The layer's context, and the aligned clock set for the program it is provided to. */
const withClock = <E, R>(
  built: Effect.Effect<{ readonly context: Context.Context<any>; readonly clock: Clock.Clock | undefined }, E, R | Scope.Scope>
) =>
  Layer.unwrapScoped(Effect.map(built, ({ clock, context }) => {
    const provided = Layer.succeedContext(context)
    // `provideMerge`, not `merge`: a `setClock` merged beside the context is not undone when the layer's scope
    // closes — the caller kept the closed store's clock (and through it the store's pool) for good.
    return clock === undefined ? provided : Layer.provideMerge(Layer.setClock(clock), provided)
  }))

export interface PgStoreOptions extends StoreSettings, PgClient.PgClientConfig {}

/** `pg-pool`'s own pool size when `maxConnections` is not given. */
const defaultPoolSize = 10

/** `PgStore.layer`'s pool's connect timeout when none is given. */
const defaultConnectTimeout = Duration.seconds(5)

export const layer = (
  given: PgStoreOptions
): Layer.Layer<Mechanisms | SqlClient.SqlClient | PgClient.PgClient, SqlError | MigrationError | InvalidOptions> =>
  withClock(Effect.gen(function*() {
    // Read once; `null` is no options. The client's settings may be functions its class gives (`transformQueryNames`).
    const options: PgStoreOptions = (yield* fromChecked(ownOptions(given, true))) ?? {}
    const settings = yield* resolveSettings(options)
    // A pool of no connection never answers `PgClient.make`'s first query, and its wait cannot be interrupted.
    const max = options.maxConnections
    if (max !== undefined && !(Number.isSafeInteger(max) && max >= 1)) {
      return yield* new InvalidOptions({ field: "maxConnections", reason: "must be a whole number of at least 1" })
    }
    // A default connect timeout: without one a server that accepts a connection and never answers held the
    // start for ever (`PgClient.make`'s own 5 s timeout wraps an uninterruptible first query).
    const client = yield* PgClient.make({ ...options, connectTimeout: options.connectTimeout ?? defaultConnectTimeout })
    // While the kept connection runs a statement, a transaction that starts takes one of the others: not in a
    // pool of one or two, and not when connections are to be replaced after `connectionTTL` (a kept one never is).
    const keep = (max ?? defaultPoolSize) >= 3 && options.connectionTTL === undefined
    const built = yield* buildMechanisms(client, settings, options, keep)
    // The pool is the store's: the application's `sql.withTransaction` on it is the store's transaction, as
    // on `SqliteStore.layer` — refused inside another client's transaction (`@effect/sql`'s own would send a
    // SAVEPOINT to that client's connection), a failed COMMIT a typed `SqlError`, wakes after the commit.
    Object.assign(client, { withTransaction: built.transaction })
    return {
      context: built.mechanisms.pipe(Context.add(SqlClient.SqlClient, client), Context.add(PgClient.PgClient, client)),
      clock: built.clock
    }
  })).pipe(Layer.provide(Reactivity.layer)) as Layer.Layer<
    Mechanisms | SqlClient.SqlClient | PgClient.PgClient,
    SqlError | MigrationError | InvalidOptions
  >

export const layerFromClient = (
  given: StoreSettings = {}
): Layer.Layer<Mechanisms, SqlError | MigrationError | InvalidOptions, PgClient.PgClient> =>
  withClock(Effect.gen(function*() {
    const options: StoreSettings = (yield* fromChecked(ownOptions(given))) ?? {} // read once; `null` is no options
    const settings = yield* resolveSettings(options)
    const client = yield* PgClient.PgClient
    const built = yield* buildMechanisms(client, settings, options)
    return { context: built.mechanisms, clock: built.clock }
  })) as Layer.Layer<Mechanisms, SqlError | MigrationError | InvalidOptions, PgClient.PgClient>
