import { Effect } from "effect"
import { InvalidName, ReservedName } from "../StoreError.js"

/** Every storage object and engine-derived name carries this prefix. */
export const reservedPrefix = "__alkstore"

/** The namespace rule shared by queue, lock, schedule and outbox names (CONTRACT §2). */
export const checkName = (name: string): InvalidName | ReservedName | undefined => {
  if (typeof name !== "string") return new InvalidName({ name: String(name), reason: "must be a string" })
  if (name.length === 0) return new InvalidName({ name, reason: "must not be empty" })
  if (name.startsWith(reservedPrefix)) return new ReservedName({ name })
  return undefined
}

export const validateName = (name: string): Effect.Effect<string, InvalidName | ReservedName> => {
  const error = checkName(name)
  return error === undefined ? Effect.succeed(name) : Effect.fail(error)
}

/** The backing queue of an outbox: unreachable through `Queues` because of the prefix. */
export const outboxQueueName = (name: string) => `${reservedPrefix}_outbox:${name}`

/** The leadership lock of the scheduler. */
export const schedulerLockName = `${reservedPrefix}_scheduler`
