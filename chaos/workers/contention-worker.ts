/**
 * A process of the contention check (chaos/checks/contention.ts): waits for
 * the go file, then for `duration` ms mixes enqueue, claim + ack, claim +
 * retry, lock acquire/renew/release and schedule upserts on the shared
 * database, with `runAsStandby` running beside them, and measures its own
 * event-loop delay, raw and less its wait for a CPU (chaos/lib/loopDelay.ts).
 * With `control` as the seed it runs no store at all and only measures (the
 * machine's own scheduling noise). Every failure that reaches it is counted (busy ones
 * apart); it prints one JSON line of counts at the end.
 *
 * argv: target (JSON), go file, seed, duration (ms)
 */
import { Effect, Fiber, Option } from "effect"
import * as fs from "node:fs"
import { Locks, Queues, Scheduler } from "../../src/index.js"
import { openStore, parseTarget } from "../engine.js"
import { type LoopDelay, sampleLoopDelay } from "../lib/loopDelay.js"
import { makeRng } from "../lib/rng.js"

const [targetArg, goFile, seedArg, durationArg] = process.argv.slice(2)
const rng = makeRng(seedArg === "control" ? 1 : Number(seedArg))
const counts: Record<string, number> = {}
const failures: Array<string> = []
let busy = 0

const isBusy = (text: string) => /SQLITE_BUSY|SQLITE_LOCKED|database is locked|database table is locked/i.test(text)

const op = <A, E>(name: string, effect: Effect.Effect<A, E>) =>
  effect.pipe(
    Effect.tap(() => Effect.sync(() => (counts[name] = (counts[name] ?? 0) + 1))),
    Effect.catchAllCause((cause) =>
      Effect.sync(() => {
        const text = String(cause)
        if (isBusy(text)) busy++
        if (failures.length < 5) failures.push(`${name}: ${text.slice(0, 500)}`)
        counts[`${name}.failed`] = (counts[`${name}.failed`] ?? 0) + 1
      })
    ),
    Effect.asVoid
  )

const pause = (ms: number) => Effect.async<void>((resume) => {
  const timer = setTimeout(() => resume(Effect.void), ms)
  return Effect.sync(() => clearTimeout(timer))
})

/** The control process: the same pacing and measurement, no store. */
const control = Effect.gen(function*() {
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`)
  while (!fs.existsSync(goFile!)) yield* Effect.sleep(10)
  const until = Date.now() + Number(durationArg)
  const measureFrom = Date.now() + Math.min(1_000, Number(durationArg) / 5)
  let sampler: ReturnType<typeof sampleLoopDelay> | undefined
  while (Date.now() < until) {
    if (Date.now() >= measureFrom) sampler ??= sampleLoopDelay()
    yield* pause(rng.int(2, 12))
  }
  const delay: LoopDelay | undefined = sampler?.stop()
  process.stdout.write(`${JSON.stringify({ control: true, ...delay })}\n`)
})

const program = Effect.gen(function*() {
  const queues = yield* Queues.Queues
  const locks = yield* Locks.Locks
  const scheduler = yield* Scheduler.Scheduler
  const queue = yield* queues.queue("work", { visibilityTimeout: "5 seconds", maxAttempts: 100, backoffBase: "10 millis" })
  const me = `p${process.pid}`
  process.stdout.write(`${JSON.stringify({ ready: true })}\n`)
  while (!fs.existsSync(goFile!)) yield* Effect.sleep(10)

  const standby = yield* Effect.fork(scheduler.runAsStandby)
  const started = Date.now()
  const until = started + Number(durationArg)
  // the first second warms the JIT up; the delay is measured from then on (the counts cover it all)
  const measureFrom = started + Math.min(1_000, Number(durationArg) / 5)
  let sampler: ReturnType<typeof sampleLoopDelay> | undefined
  while (Date.now() < until) {
    if (Date.now() >= measureFrom) sampler ??= sampleLoopDelay()
    // paced, as an application's requests are (8 CPU-bound loops on a small machine would measure
    // the OS's time slicing): the delay measured is the store's own synchronous stretches, busy waits included
    yield* pause(rng.int(2, 12))
    const roll = rng.next()
    if (roll < 0.3) yield* op("enqueue", queue.enqueue({ from: me, n: rng.int(0, 1e6) }))
    else if (roll < 0.4) yield* op("enqueueBatch", queue.enqueueBatch([1, 2, 3, 4, 5].map((n) => ({ from: me, n }))))
    else if (roll < 0.65) {
      yield* op("claim+ack", Effect.flatMap(queue.claim(me), Option.match({ onNone: () => Effect.void, onSome: (h) => h.ack })))
    } else if (roll < 0.75) {
      yield* op("claim+retry", Effect.flatMap(queue.claim(me), Option.match({
        onNone: () => Effect.void,
        onSome: (h) => h.retry("contention retry", "10 millis")
      })))
    } else if (roll < 0.95) {
      yield* op("lock", Effect.flatMap(locks.acquire(`lock-${rng.int(0, 3)}`, { ttl: "2 seconds" }), Option.match({
        onNone: () => Effect.void,
        onSome: (h) => Effect.zipRight(h.renew(), h.release)
      })))
    } else {
      yield* op("schedule", scheduler.schedule(`s-${rng.int(0, 7)}`, `@every ${rng.int(1, 5)}s`, "work", { from: me }))
    }
  }
  const delay: LoopDelay | undefined = sampler?.stop()
  yield* Fiber.interrupt(standby)
  const ops = Object.entries(counts).filter(([k]) => !k.endsWith(".failed")).reduce((n, [, c]) => n + c, 0)
  process.stdout.write(`${JSON.stringify({
    result: true,
    counts,
    ops,
    busy,
    failures,
    seconds: (Date.now() - started) / 1000,
    ...delay
  })}\n`)
})

Effect.runPromise(
  seedArg === "control" ? control : Effect.provide(program, openStore(parseTarget(targetArg)))
).then(
  () => process.exit(0),
  (error: unknown) => {
    process.stderr.write(`contention worker failed: ${String(error)}\n`)
    process.exit(1)
  }
)
