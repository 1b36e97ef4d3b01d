import { Context, Effect, type Scope } from "effect"
import * as Admin from "../Admin.js"
import * as Locks from "../Locks.js"
import * as Outbox from "../Outbox.js"
import * as Queues from "../Queues.js"
import * as Scheduler from "../Scheduler.js"
import { Backing, backingOf } from "./effectStores/backing.js"
import { Engine, type EngineShape } from "./engine.js"

/** The services every store layer provides, whatever its engine. */
export type Mechanisms = Queues.Queues | Locks.Locks | Scheduler.Scheduler | Outbox.Outbox | Admin.Admin | Backing

/**
 * Every mechanism over one engine: the contract's services are built once,
 * engine-free. Built after the engine's connection, so the store's close stops
 * their long-lived work while that connection still works (`lifetime.ts`).
 */
export const makeMechanisms = (engine: EngineShape): Effect.Effect<Context.Context<Mechanisms>, never, Scope.Scope> =>
  Effect.gen(function*() {
    yield* Effect.addFinalizer(() => engine.lifetime.close)
    const build = <I, S>(tag: Context.Tag<I, S>, make: Effect.Effect<S, never, Engine>) =>
      Effect.map(Effect.provideService(make, Engine, engine), (service) => Context.make(tag, service))
    const queues = yield* build(Queues.Queues, Queues.make)
    const locks = yield* build(Locks.Locks, Locks.make)
    const scheduler = yield* build(Scheduler.Scheduler, Scheduler.make)
    const outbox = yield* build(Outbox.Outbox, Outbox.make)
    const admin = yield* build(Admin.Admin, Admin.make)
    return Context.merge(Context.merge(Context.merge(queues, locks), Context.merge(scheduler, outbox)), admin).pipe(
      Context.add(Backing, backingOf(engine))
    )
  })
