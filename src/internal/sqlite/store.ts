import * as Reactivity from "@effect/experimental/Reactivity"
import type { MigrationError } from "@effect/sql/Migrator"
import * as SqlClient from "@effect/sql/SqlClient"
import { SqlError } from "@effect/sql/SqlError"
import { Context, Duration, Effect, FiberSet, Layer, type Scope } from "effect"
import * as path from "node:path"
import { DatabaseReplaced, InvalidOptions } from "../../StoreError.js"
import { fromChecked, optionalDurationMillis, waitSettingMillis } from "../duration.js"
import { checkFilename, ownOptions } from "../options.js"
import { defaultSettings, type EngineSettings, type EngineShape } from "../engine.js"
import { makeLifetime } from "../lifetime.js"
import { makeMechanisms, type Mechanisms } from "../mechanisms.js"
import { makeWakeHub, type WakeHub } from "../wake.js"
import { makeOwnedConnection } from "./connection.js"
import { type Executor, fromClient } from "./executor.js"
import { makeAdminStorage } from "./adminStorage.js"
import { makeLockStorage } from "./lockStorage.js"
import { makePersistedQueueStorage } from "./persistedQueueStorage.js"
import { makeRateLimiterStorage } from "./rateLimiterStorage.js"
import { migrate } from "./migrations.js"
import { makeQueueStorage } from "./queueStorage.js"
import { makeFlowStorage } from "./flowStorage.js"
import { makeFlowMemory } from "../flowMemory.js"
import { makeScheduleStorage } from "./scheduleStorage.js"
import { retryBusy } from "./busy.js"
import { makeCommitSignals, openTransaction } from "./transaction.js"
import { makeWalSignal, startCheckpointer } from "./checkpointer.js"
import { fileIdentity } from "./fileIdentity.js"
import { startWatcher } from "./watcher.js"
import { countHoldersBuried } from "../telemetry.js"

/**
 * Engine settings a store accepts (all optional). Those the store waits in
 * one timer (`leaderTtl`, `leaderRenewEvery`, `maintenanceEvery`,
 * `fallbackPoll`, `watchInterval`) take at most 24 days; more is an
 * `InvalidOptions` (a timer past ~24.8 days never fires).
 */
export interface StoreSettings {
  /** How long a claim of the file waits out another writer before failing with `SqlError`; default 30 s. */
  readonly busyPatience?: Duration.DurationInput
  /** Dead jobs older than this are purged by maintenance; default 7 days. */
  readonly deadRetention?: Duration.DurationInput
  /** The scheduler's leadership lease; default 10 s. */
  readonly leaderTtl?: Duration.DurationInput
  /** How often the scheduler's leader renews its lease; default 2 s. */
  readonly leaderRenewEvery?: Duration.DurationInput
  /** How long after one queue maintenance run ends the leader starts the next; default 1 minute. */
  readonly maintenanceEvery?: Duration.DurationInput
  /** The waiters' safety-net poll; default 5 s. */
  readonly fallbackPoll?: Duration.DurationInput
  /**
   * How often the cross-process watcher polls `PRAGMA data_version` while
   * anybody waits, where file-system events are unavailable; default 2 ms.
   * (With events it reads on every event, and polls every 500 ms as a safety net.)
   */
  readonly watchInterval?: Duration.DurationInput
}

/** Settings only a store that owns its connection (`SqliteStore.layer`) takes. */
export interface OwnedSettings {
  /** SQLite's own `busy_timeout`; kept short because it blocks the event loop; default 5 ms, at most 2^31 − 1 ms. */
  readonly busyTimeout?: Duration.DurationInput
  /** How long after a write the background thread checkpoints the WAL (`PASSIVE`); default 200 ms. */
  readonly checkpointInterval?: Duration.DurationInput
}

export interface ResolvedSettings extends EngineSettings {
  readonly busyPatienceMillis: number
  readonly watchIntervalMillis: number
}

export const resolveSettings = (options: StoreSettings): Effect.Effect<ResolvedSettings, InvalidOptions> =>
  Effect.gen(function*() {
    const get = (field: keyof StoreSettings, fallback: number) =>
      Effect.map(
        optionalDurationMillis(field, options[field], { positive: true }),
        (millis) => millis ?? fallback
      )
    // Settings the store waits in one timer are at most 24 days (duration.ts `maxWaitMillis`).
    const wait = (field: keyof StoreSettings, fallback: number) => waitSettingMillis(field, options[field], fallback)
    return {
      busyPatienceMillis: yield* get("busyPatience", 30_000),
      deadRetentionMillis: yield* get("deadRetention", defaultSettings.deadRetentionMillis),
      leaderTtlMillis: yield* wait("leaderTtl", defaultSettings.leaderTtlMillis),
      leaderRenewMillis: yield* wait("leaderRenewEvery", defaultSettings.leaderRenewMillis),
      maintenanceEveryMillis: yield* wait("maintenanceEvery", defaultSettings.maintenanceEveryMillis),
      fallbackPollMillis: yield* wait("fallbackPoll", defaultSettings.fallbackPollMillis),
      watchIntervalMillis: yield* wait("watchInterval", 2)
    }
  })

export type { Mechanisms }

/**
 * Migrates, then builds the engine and every mechanism over `executor`.
 * `filename` is the file the cross-process watcher follows ("" for none);
 * `identity` is that file's when the store's connection opened it, if known.
 */
export const buildMechanisms = (
  executor: Executor,
  file: {
    readonly filename: string
    readonly identity?: string | undefined
    /** the store's own connection's `data_version`, where it owns one (see `WatcherOptions`) */
    readonly ownDataVersion?: (() => number | undefined) | undefined
  },
  settings: ResolvedSettings,
  wake: WakeHub = makeWakeHub()
): Effect.Effect<Context.Context<Mechanisms>, SqlError | MigrationError, Scope.Scope | SqlClient.SqlClient> =>
  Effect.gen(function*() {
    yield* migrate(executor)
    const { filename } = file
    if (isFile(filename)) {
      yield* startWatcher(wake, {
        filename,
        pollMillis: settings.watchIntervalMillis,
        eventFallbackMillis: 500,
        identityEveryMillis: 500,
        identity: file.identity,
        ownDataVersion: file.ownDataVersion
      })
    }
    // Without a watcher nothing sees the commits of the application's own transactions (a memory database
    // over its client): the end of one that wrote work wakes the waiters to re-read.
    const foreign = isFile(filename) ? undefined : yield* wakeAfterForeignTransactions(wake)
    const flowMemory = makeFlowMemory()
    const engine: EngineShape = {
      queues: makeQueueStorage(executor, flowMemory, countHoldersBuried),
      flow: makeFlowStorage(executor, flowMemory),
      locks: makeLockStorage(executor),
      schedules: makeScheduleStorage(executor),
      admin: makeAdminStorage(executor),
      persistedQueue: makePersistedQueueStorage(executor),
      rateLimiter: makeRateLimiterStorage(executor),
      transaction: executor.transaction,
      signal: makeCommitSignals(wake.signal, foreign),
      afterCommit: (context, f) => {
        const open = openTransaction(context)
        if (open === undefined || open === "foreign") f()
        else open.push(f)
      },
      wake,
      lifetime: makeLifetime(wake),
      instanceId: crypto.randomUUID(),
      settings,
      gaugedQueues: new Set()
    }
    return yield* makeMechanisms(engine)
  })

/**
 * Tells, once a transaction of the application's client ends, every topic's
 * waiters to re-read (`changed`: whether it committed is not known here, so
 * a rollback costs each one read, never a write). The end is when the
 * client's connection is free again: a SQLite client has one.
 */
const wakeAfterForeignTransactions = (wake: WakeHub) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const runFork = yield* FiberSet.makeRuntime<never>()
    let waiting = false
    return () => {
      if (waiting) return
      waiting = true
      runFork(Effect.ignore(Effect.scoped(sql.reserve)).pipe(
        Effect.ensuring(Effect.sync(() => {
          waiting = false
          wake.signalAll()
        }))
      ))
    }
  })

export interface SqliteStoreOptions extends StoreSettings, OwnedSettings {
  /** The database file (created when missing). */
  readonly filename: string
}

/** The longest `busy_timeout` SQLite (and better-sqlite3's `timeout`) takes: a signed 32-bit count of ms. */
const maxBusyTimeoutMillis = 2_147_483_647

const isFile = (filename: string) => filename !== "" && filename !== ":memory:"

export const layer = (
  given: SqliteStoreOptions
): Layer.Layer<Mechanisms | SqlClient.SqlClient, SqlError | MigrationError | InvalidOptions> =>
  Layer.scopedContext(Effect.gen(function*() {
    // `null` is no options (CONTRACT §2): the filename is missing. Read once (`ownOptions`).
    const options: SqliteStoreOptions = (yield* fromChecked(ownOptions(given))) ?? ({} as SqliteStoreOptions)
    yield* checkFilename(options.filename)
    const settings = yield* resolveSettings(options)
    const busyTimeout = (yield* optionalDurationMillis("busyTimeout", options.busyTimeout)) ?? 5
    if (busyTimeout > maxBusyTimeoutMillis) {
      return yield* new InvalidOptions({
        field: "busyTimeout",
        reason: `must be at most ${maxBusyTimeoutMillis} ms (SQLite counts its busy timeout in a 32-bit integer)`
      })
    }
    const checkpointInterval =
      (yield* optionalDurationMillis("checkpointInterval", options.checkpointInterval, { positive: true })) ?? 200
    const walSignal = makeWalSignal()
    const owned = yield* makeOwnedConnection({
      filename: options.filename,
      busyTimeoutMillis: busyTimeout,
      retryBusy: retryBusy(Duration.millis(settings.busyPatienceMillis)),
      wal: walSignal
    })
    // The file as SQLite opened it (`""` for a memory or temporary database): better-sqlite3 takes no URIs
    // (it is built without SQLITE_USE_URI), so a name such as `file:app.db` is a file of that name, shared
    // with other processes, and gets the checkpointer and the watcher as any other.
    const filename = mainFileIn(owned.db.pragma("database_list") as ReadonlyArray<{ name: string; file: string }>)
    const wake = makeWakeHub()
    const identity = isFile(filename) ? fileIdentity(path.resolve(filename)) : undefined
    if (isFile(filename)) {
      yield* Effect.try({
        try: () => owned.db.pragma("wal_autocheckpoint = 0"),
        catch: (cause) => new SqlError({ cause, message: `Failed to turn off automatic checkpoints: ${String(cause)}` })
      })
      yield* startCheckpointer({
        filename,
        everyMillis: checkpointInterval,
        signal: walSignal,
        identity,
        onFailure: (cause) => checkpointerFailed(owned.db, wake, filename, identity, cause)
      })
    }
    const ownVersion = owned.db.prepare("PRAGMA data_version").pluck()
    const ownDataVersion = () => {
      if (owned.db.inTransaction) return undefined
      try {
        return ownVersion.get() as number
      } catch {
        return undefined
      }
    }
    const mechanisms = yield* buildMechanisms(owned.executor, { filename, identity, ownDataVersion }, settings, wake).pipe(
      Effect.provideService(SqlClient.SqlClient, owned.client)
    )
    return Context.add(mechanisms, SqlClient.SqlClient, owned.client)
  })).pipe(Layer.provide(Reactivity.layer))

/** The main database's file in `PRAGMA database_list`'s rows (`""`: in memory, or temporary). */
const mainFileIn = (databases: ReadonlyArray<{ name: string; file: string }>) =>
  databases.find((row) => row.name === "main")?.file ?? ""

/**
 * The checkpointer thread failed (or ended early): SQLite's own automatic
 * checkpoint (its default threshold, 1000 pages) keeps the WAL bounded from
 * here, inside commits. When the file is no longer the store's, waiters fail
 * with `DatabaseReplaced` at once: nobody could wake them.
 */
const checkpointerFailed = (
  db: { readonly pragma: (source: string) => unknown },
  wake: WakeHub,
  filename: string,
  opened: string | undefined,
  cause: unknown
) =>
  Effect.gen(function*() {
    const now = fileIdentity(path.resolve(filename))
    if (now !== opened) wake.fail(new DatabaseReplaced({ filename, reason: now === undefined ? "deleted" : "replaced" }))
    const restored = yield* Effect.exit(Effect.try(() => db.pragma("wal_autocheckpoint = 1000")))
    yield* Effect.logWarning(
      `alkstore: the WAL checkpointer thread failed for ${filename}; SQLite's automatic checkpoint takes over`
    ).pipe(Effect.annotateLogs({ cause: threadErrorText(cause), restored: restored._tag === "Success" }))
  })

// A thread's error arrives structured-cloned: better-sqlite3's keeps its `code`, not always its message.
const threadErrorText = (cause: unknown): string => {
  const { code, message } = (typeof cause === "object" && cause !== null ? cause : {}) as Record<string, unknown>
  const parts = [code, message].filter((part): part is string => typeof part === "string" && part !== "")
  return parts.length > 0 ? parts.join(": ") : String(cause)
}

export const layerFromClient = (
  given: StoreSettings = {}
): Layer.Layer<Mechanisms, SqlError | MigrationError | InvalidOptions, SqlClient.SqlClient> =>
  Layer.scopedContext(Effect.gen(function*() {
    const settings = yield* resolveSettings((yield* fromChecked(ownOptions(given))) ?? {}) // `null` is no options (CONTRACT §2)
    const client = yield* SqlClient.SqlClient
    const executor = yield* fromClient(client, retryBusy(Duration.millis(settings.busyPatienceMillis)))
    const main = mainFileIn(yield* executor.all<{ name: string; file: string }>("PRAGMA database_list", []))
    return yield* buildMechanisms(executor, { filename: main }, settings)
  }))
