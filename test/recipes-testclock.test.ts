import { it } from "@effect/vitest"
import { Effect, Fiber, Option, Ref, TestClock } from "effect"
import { expect } from "vitest"
import { Queues, SqliteStore } from "alkstore"

/** The handler under test: sends an email, failing while the mail server is down. */
const makeSender = (serverUp: Ref.Ref<boolean>, sent: Ref.Ref<ReadonlyArray<string>>) => (payload: { to: string }) =>
  Effect.gen(function*() {
    if (!(yield* Ref.get(serverUp))) return yield* Effect.fail(new Error("mail server down"))
    yield* Ref.update(sent, (all) => [...all, payload.to])
  })

/** Lets the forked worker run until it waits again (on SQLite the store's work is synchronous). */
const settle = TestClock.adjust("0 millis").pipe(Effect.repeatN(3))

it.effect("a send that fails is retried after the backoff, then succeeds", () =>
  Effect.gen(function*() {
    const emails = yield* (yield* Queues.Queues).queue("emails", { backoffBase: "30 seconds" })
    const serverUp = yield* Ref.make(false)
    const sent = yield* Ref.make<ReadonlyArray<string>>([])
    const send = makeSender(serverUp, sent)
    const id = yield* emails.enqueue({ to: "ada@example.com" })

    const worker = yield* Effect.fork(emails.process("test-worker", (job) => send(job.payload as { to: string })))
    yield* settle
    const failed = Option.getOrThrow(yield* emails.getJob(id)) // the first attempt failed...
    expect(failed.attempts).toBe(1)
    expect(failed.lastError).toEqual(Option.some("mail server down"))

    yield* Ref.set(serverUp, true)
    yield* TestClock.adjust("29 seconds")
    yield* settle
    expect(yield* Ref.get(sent)).toEqual([]) // ...and is not retried before its backoff

    yield* TestClock.adjust("1 second")
    yield* settle
    expect(yield* Ref.get(sent)).toEqual(["ada@example.com"]) // retried at 30 s, and acked
    expect(yield* emails.getJob(id)).toEqual(Option.none())
    yield* Fiber.interrupt(worker)
  }).pipe(Effect.provide(SqliteStore.layer({ filename: ":memory:" }))))
