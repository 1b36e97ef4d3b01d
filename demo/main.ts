/**
 * `npm run demo`: the used-by story on an embedded SQLite file.
 *
 * - orders are written together with an outbox delivery, in one transaction
 *   (one of them rolls back and leaves no delivery behind);
 * - a worker pool processes an "emails" queue;
 * - the scheduler's leader fires a "sweep" job every second into a
 *   "maintenance" queue, and a worker handles those too;
 * - a webhook outbox delivers with retries (the first try of each fails);
 * - after a few seconds (or Ctrl-C) everything stops cleanly: interrupting
 *   the fibers is the stop, claims in flight are released, the leadership
 *   lease is handed back; then a summary is printed.
 */
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Fiber, Ref } from "effect"
import { Locks, Outbox, Queues, Scheduler, SqliteStore } from "../src/index.js"

const filename = process.env.ALKSTORE_DEMO_DB ?? "./alkstore-demo.db"
const runFor = Duration.seconds(Number(process.env.ALKSTORE_DEMO_SECONDS ?? 4))

const program = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`CREATE TABLE IF NOT EXISTS orders (id INTEGER PRIMARY KEY, customer TEXT NOT NULL, total_cents INTEGER NOT NULL)`

  const queues = yield* Queues.Queues
  const emails = yield* queues.queue("emails", { visibilityTimeout: "30 seconds" })
  const maintenance = yield* queues.queue("maintenance")
  const webhooks = yield* (yield* Outbox.Outbox).outbox("webhooks", { backoffBase: "500 millis" })
  const scheduler = yield* Scheduler.Scheduler
  const counts = yield* Ref.make({ emails: 0, sweeps: 0, delivered: 0, deliveryRetries: 0 })

  // Register a schedule, then run the leader loop as a scoped fiber: nothing fires without it.
  const sweep = yield* scheduler.schedule("sweep", "@every 1s", "maintenance", { kind: "sweep" })
  yield* Effect.log(`schedule ${sweep.name} (${sweep.spec}) next fires at ${sweep.nextFireAt}`)
  yield* Effect.forkScoped(scheduler.runSchedules)

  // Workers: success acks, failure retries on the backoff curve.
  yield* Effect.forkScoped(emails.process("mailer", (job) =>
    Effect.zipRight(
      Effect.log(`mail to ${(job.payload as { to: string }).to}`),
      Ref.update(counts, (c) => ({ ...c, emails: c.emails + 1 }))
    ), { concurrency: 2 }))
  yield* Effect.forkScoped(maintenance.process("sweeper", (job) =>
    Effect.zipRight(
      Effect.log(`sweep fired for boundary ${job.runAt}`),
      Ref.update(counts, (c) => ({ ...c, sweeps: c.sweeps + 1 }))
    )))

  // Outbox delivery is an Effect; the first attempt of each delivery fails on purpose.
  yield* Effect.forkScoped(webhooks.run("deliverer", (job) =>
    job.attempts === 1
      ? Effect.zipRight(
        Ref.update(counts, (c) => ({ ...c, deliveryRetries: c.deliveryRetries + 1 })),
        Effect.fail(new Error("webhook endpoint returned 503"))
      )
      : Effect.zipRight(
        Effect.log(`webhook delivered for order ${(job.payload as { orderId: number }).orderId}`),
        Ref.update(counts, (c) => ({ ...c, delivered: c.delivered + 1 }))
      )))

  // Orders and their side effects commit (or roll back) together.
  const placeOrder = (customer: string, totalCents: number) =>
    sql.withTransaction(Effect.gen(function*() {
      const [order] = yield* sql<{ id: number }>`INSERT INTO orders (customer, total_cents) VALUES (${customer}, ${totalCents}) RETURNING id`
      if (totalCents <= 0) return yield* Effect.fail(new Error(`order for ${customer} has no total`))
      yield* emails.enqueue({ to: customer, orderId: order!.id }, { priority: 5 })
      yield* webhooks.enqueue({ orderId: order!.id, totalCents })
      return order!.id
    }))
  for (const [customer, total] of [["ada@example.com", 4200], ["grace@example.com", 1999], ["nobody@example.com", 0]] as const) {
    yield* placeOrder(customer, total).pipe(
      Effect.tap((id) => Effect.log(`order ${id} placed for ${customer}`)),
      Effect.catchAll((error) => Effect.log(`order rolled back: ${error.message}`))
    )
  }

  // A lock held while an effect runs, renewed in a forked fiber.
  const report = yield* (yield* Locks.Locks).withLock("nightly-report", "30 seconds",
    Effect.map(sql<{ n: number }>`SELECT count(*) AS n FROM orders`, (rows) => rows[0]!.n))
  yield* Effect.log(`report built under the lock: ${report} orders on file`)

  yield* Effect.sleep(runFor)
  const summary = yield* Ref.get(counts)
  const outboxStats = yield* webhooks.stats
  return { summary, outboxStats, orders: report }
})

const main = program.pipe(Effect.scoped, Effect.provide(SqliteStore.layer({ filename })))
const fiber = Effect.runFork(main)
process.once("SIGINT", () => Effect.runFork(Fiber.interrupt(fiber)))
Effect.runPromise(Fiber.await(fiber)).then((exit) => {
  if (exit._tag === "Success") {
    const { orders, outboxStats, summary } = exit.value
    process.stdout.write(
      [
        "",
        `alkstore demo on ${filename}`,
        `  orders on file:        ${orders} (the zero-total order rolled back with its deliveries)`,
        `  emails sent:           ${summary.emails}`,
        `  scheduled sweeps:      ${summary.sweeps}`,
        `  webhooks delivered:    ${summary.delivered} (after ${summary.deliveryRetries} failed first tries)`,
        `  outbox left pending:   ${outboxStats.pending + outboxStats.scheduled}, dead: ${outboxStats.dead}`,
        ""
      ].join("\n")
    )
  } else if (exit.cause._tag === "Interrupt") {
    process.stdout.write("\nstopped (Ctrl-C): claims released, leadership handed back\n")
  } else {
    process.stderr.write(`demo failed: ${String(exit.cause)}\n`)
    process.exitCode = 1
  }
})
