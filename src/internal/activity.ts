import { Context } from "effect"

/**
 * How many statements an engine whose driver is asynchronous has in
 * flight. Tests on `TestClock` need it: "every forked fiber waits again"
 * means, on such an engine, also "no statement is on its way to the server"
 * (a fiber awaiting I/O has not yet registered its next sleep). Offered in
 * the context of the stores of such engines (PostgreSQL); not public API.
 */
export class StoreActivity extends Context.Tag("alkstore/internal/StoreActivity")<StoreActivity, {
  readonly inFlight: () => number
}>() {}
