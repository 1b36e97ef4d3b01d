/**
 * alkstore: queues, named TTL locks, an interval scheduler with leader
 * election and a transactional outbox, inside the application's own
 * database, as Effect services.
 *
 * @module
 */
export * as Admin from "./Admin.js"
export * as Locks from "./Locks.js"
export * as Outbox from "./Outbox.js"
export * as PgStore from "./PgStore.js"
export * as Queues from "./Queues.js"
export * as Scheduler from "./Scheduler.js"
export * as SqliteStore from "./SqliteStore.js"
export * as StoreError from "./StoreError.js"
export * as Telemetry from "./Telemetry.js"
