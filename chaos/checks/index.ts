/** Every chaos check, in the order `npm run chaos` runs them. */
import type { Check } from "../lib/check.js"
import { contention } from "./contention.js"
import { crash } from "./crash.js"
import { faultsCheck } from "./faults.js"
import { locks } from "./locks.js"
import { pgFaults } from "./pg-faults.js"
import { scheduler } from "./scheduler.js"

export const checks: ReadonlyArray<Check> = [crash, scheduler, locks, contention, faultsCheck, pgFaults]
