/**
 * A worker of the PostgreSQL faults check (chaos/checks/pg-faults.ts): the
 * crash check's handler (chaos/lib/crash-handler.ts) on the shared queue, and a second `process` on a queue
 * of its own, `probe-<worker id>`, whose handler records `probe` when it
 * starts: the driver enqueues there to see whether this very process wakes
 * (by NOTIFY: its fallback poll is set far out). Every log line that carries
 * an error is recorded too (`log`, with the errors' tags and any defects):
 * the check proves that what the store met during the faults was a typed
 * `SqlError`, never a defect.
 *
 * argv: target (JSON), ledger file, worker id, seed, concurrency, visibility timeout (ms), fallback poll (ms)
 */
import { Cause, Effect, Logger } from "effect"
import { Queues } from "../../src/index.js"
import { openStore, parseTarget } from "../engine.js"
import { crashHandler } from "../lib/crash-handler.js"
import { openLedger } from "../lib/ledger.js"
import { makeRng } from "../lib/rng.js"

const [targetArg, ledgerFile, workerId, seedArg, concurrencyArg, vtArg, pollArg] = process.argv.slice(2)
const target = parseTarget(targetArg)
const ledger = openLedger(ledgerFile!)
const rng = makeRng(Number(seedArg))

/** The `_tag`s of the errors a log line carries (as message parts or as its cause), and its defects. */
const recordingLogger = Logger.make(({ cause, logLevel, message }) => {
  const parts = Array.isArray(message) ? message : [message]
  const tags = parts.flatMap((part) =>
    typeof part === "object" && part !== null && "_tag" in part ? [String((part as { _tag: unknown })._tag)] : []
  )
  const failures = Cause.failures(cause)
  for (const failure of failures) tags.push(String((failure as { _tag?: unknown })?._tag))
  const defects = Cause.defects(cause).length
  if (tags.length > 0 || defects > 0) {
    ledger.append({ e: "log", level: logLevel.label, tags, defects, text: String(parts[0]).slice(0, 200) })
  }
})

const program = Effect.gen(function*() {
  const queues = yield* Queues.Queues
  const queue = yield* queues.queue("chaos", { visibilityTimeout: Number(vtArg) })
  const probes = yield* queues.queue(`probe-${workerId}`)
  ledger.append({ e: "ready", worker: workerId })
  const work = queue.process(workerId!, crashHandler(ledger, rng, workerId!), { concurrency: Number(concurrencyArg) })
  const probe = probes.process(`${workerId}-probe`, (job) =>
    Effect.sync(() => ledger.append({ e: "probe", job: job.id, worker: workerId, round: (job.payload as { round: number }).round })))
  return yield* Effect.all([work, probe], { concurrency: "unbounded", discard: true })
})

Effect.runPromise(
  Effect.provide(program, openStore(target, { fallbackPoll: Number(pollArg) })).pipe(
    Effect.provide(Logger.replace(Logger.defaultLogger, Logger.zip(Logger.defaultLogger, recordingLogger)))
  )
).catch((error: unknown) => {
  process.stderr.write(`pg fault worker ${workerId} failed: ${String(error)}\n`)
  process.exit(1)
})
