/**
 * A worker of the crash check (chaos/checks/crash.ts): runs `process` on the
 * shared queue until the driver kills it, with the handler of
 * chaos/lib/crash-handler.ts (a fsync'd ledger record at each step of each
 * handler run).
 *
 * argv: target (JSON), ledger file, worker id, seed, concurrency, visibility timeout (ms)
 */
import { Effect } from "effect"
import { Queues } from "../../src/index.js"
import { openStore, parseTarget } from "../engine.js"
import { crashHandler } from "../lib/crash-handler.js"
import { openLedger } from "../lib/ledger.js"
import { makeRng } from "../lib/rng.js"

const [targetArg, ledgerFile, workerId, seedArg, concurrencyArg, vtArg] = process.argv.slice(2)
const target = parseTarget(targetArg)
const ledger = openLedger(ledgerFile!)
const rng = makeRng(Number(seedArg))

const program = Effect.gen(function*() {
  const queue = yield* (yield* Queues.Queues).queue("chaos", { visibilityTimeout: Number(vtArg) })
  ledger.append({ e: "ready", worker: workerId })
  return yield* queue.process(workerId!, crashHandler(ledger, rng, workerId!), { concurrency: Number(concurrencyArg) })
})

Effect.runPromise(Effect.provide(program, openStore(target))).catch((error: unknown) => {
  process.stderr.write(`crash worker ${workerId} failed: ${String(error)}\n`)
  process.exit(1)
})
