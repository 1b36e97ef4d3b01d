/**
 * The typed outcomes of alkstore (docs/contract.md §2). Every one lives in the error
 * channel; storage failures stay `SqlError` from `@effect/sql`.
 *
 * @module
 */
import { Data } from "effect"

/** A name argument is empty. */
export class InvalidName extends Data.TaggedError("InvalidName")<{
  readonly name: string
  readonly reason: string
}> {
  override get message() {
    return `invalid name ${JSON.stringify(this.name)}: ${this.reason}`
  }
}

/** A name argument starts with the reserved prefix `__alkstore`. */
export class ReservedName extends Data.TaggedError("ReservedName")<{
  readonly name: string
}> {
  override get message() {
    return `name ${JSON.stringify(this.name)} uses the reserved prefix __alkstore`
  }
}

/** A schedule spec outside the v1 grammar `@every <n><s|m|h|d>`. */
export class InvalidSpec extends Data.TaggedError("InvalidSpec")<{
  readonly spec: string
  readonly reason: string
}> {
  override get message() {
    return `invalid schedule spec ${JSON.stringify(this.spec)}: ${this.reason}`
  }
}

/** An option or parameter is out of range; `field` is its own name. */
export class InvalidOptions extends Data.TaggedError("InvalidOptions")<{
  readonly field: string
  readonly reason: string
}> {
  override get message() {
    return `invalid option ${this.field}: ${this.reason}`
  }
}

/** A payload that JSON cannot carry faithfully, or that fails its queue's Schema. */
export class InvalidPayload extends Data.TaggedError("InvalidPayload")<{
  readonly reason: string
}> {
  override get message() {
    return `invalid payload: ${this.reason}`
  }
}

/** `runSchedules` could not take, or lost, the leadership lease. */
export class LeadershipLost extends Data.TaggedError("LeadershipLost")<{
  readonly owner: string
}> {
  override get message() {
    return `scheduler leadership lost by ${this.owner}`
  }
}

/** `withLock` found the lock held by another owner. */
export class LockUnavailable extends Data.TaggedError("LockUnavailable")<{
  readonly name: string
}> {
  override get message() {
    return `lock ${JSON.stringify(this.name)} is held by another owner`
  }
}

/** `withLock` held the lock and its renewal failed. */
export class LockLost extends Data.TaggedError("LockLost")<{
  readonly name: string
}> {
  override get message() {
    return `lock ${JSON.stringify(this.name)} was lost`
  }
}

/**
 * The database file a waiter watches was deleted or replaced (renamed over)
 * while the store was running: the store's connection now points at a file
 * nobody else sees, so waiting on it would stall forever.
 */
export class DatabaseReplaced extends Data.TaggedError("DatabaseReplaced")<{
  readonly filename: string
  readonly reason: string
}> {
  override get message() {
    return `database file ${this.filename} was ${this.reason} under a running store`
  }
}

/** Either way a name can be refused. */
export type NameError = InvalidName | ReservedName
