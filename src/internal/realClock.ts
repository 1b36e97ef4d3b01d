import { Clock } from "effect"

/**
 * Real time, whatever `Clock` the store's callers provide (`TestClock`
 * included): for the engine's own timers that pace the outside world — a
 * contended file, the LISTEN connection's heartbeat, the tables' growth —
 * which are not contract time.
 */
export const realClock: Clock.Clock = Clock.make()
