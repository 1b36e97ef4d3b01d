/**
 * Review of the promises docs/ made in the commits after b4b0e57 (docs/contract.md §2, docs/decisions.md,
 * docs/engines.md, docs/operations.md, docs/queues-and-locks.md, docs/scheduler-and-outbox.md, docs/waking.md),
 * checked against behaviour: every test here failed on the code before its fix.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Stream } from "effect"
import * as fs from "node:fs"
import { Outbox, PgStore, Queues, SqliteStore } from "../src/index.js"
import { freshFile, pgOwned, pgSchemaFor, pgServerUrl, sqliteOwned } from "./contract/harness.js"
import { jobCount, type StoreServices } from "./contract/support.js"
import { outcome } from "./support/outcome.js"

/** An options object whose `field` is an accessor that throws (what a JS caller's Proxy or getter does). */
const throwingAt = (field: string, rest: Record<string, unknown> = {}) =>
  Object.defineProperty({ ...rest }, field, {
    enumerable: true,
    get() {
      throw new Error(`reading ${field} failed`)
    }
  })

for (const engine of [sqliteOwned, pgOwned]) {
  describe(`docs promises review — ${engine.name}`, () => {
    const run = <A, E>(effect: Effect.Effect<A, E, StoreServices>) => Effect.provide(effect, engine.store())

    // docs/contract.md §2 (added after b4b0e57): "An options object is read once, before anything is written: a
    // getter that throws (an accessor, a JS caller's Proxy) is `InvalidOptions` on `options`, never a defect."
    // (docs/decisions.md "Input only a JS caller can get wrong": "options objects read once (`ownOptions` …)".)
    // `queue`, `outbox`, `enqueue(Batch)`, `dead`, `schedule`, `Locks.acquire` and `Admin.jobs` do; `stream`
    // (src/internal/stream.ts `opts?.batch`), `process` / an outbox's `run` (src/internal/worker.ts
    // `opts?.concurrency`) and `setLimits` (src/internal/options.ts `checkLimits` reads `limits.concurrency`
    // in place) read the object field by field, inside the effect: the getter's throw is a defect.
    it.live("a throwing getter in any options object is InvalidOptions on options, never a defect", () =>
      run(Effect.gen(function*() {
        const queues = yield* Queues.Queues
        const queue = yield* queues.queue("getter-q")
        const outboxes = yield* Outbox.Outbox
        const outbox = yield* outboxes.outbox("getter-o")
        const outcomes: Record<string, string> = {
          stream: yield* outcome(() => Stream.runHead(queue.stream("w", throwingAt("batch") as never)), "500 millis"),
          process: yield* outcome(() => queue.process("w", () => Effect.void, throwingAt("concurrency") as never), "500 millis"),
          "outbox.run": yield* outcome(() => outbox.run("w", () => Effect.void, throwingAt("concurrency") as never), "500 millis"),
          setLimits: yield* outcome(() => queues.setLimits("getter-q", throwingAt("concurrency") as never))
        }
        expect({ outcomes, jobs: yield* jobCount }).toEqual({
          outcomes: Object.fromEntries(Object.keys(outcomes).map((k) => [k, "InvalidOptions:options"])),
          jobs: 0
        })
      })))
  })
}

// docs/contract.md §2: "Options given as `null` are no options, everywhere (… `PgStore.importSqlite` and
// `SqliteStore.layer` included …). An options object is read once, before anything is written: a getter that
// throws (an accessor, a JS caller's Proxy) is `InvalidOptions` on `options`, never a defect." The store layers
// and importSqlite read their options field by field (src/internal/sqlite/store.ts `given ?? {}`,
// src/internal/pg/store.ts `resolveSettings(options)`, src/PgStore.ts importSqlite `options ?? {}`), not through
// `ownOptions`: a throwing getter dies.
describe("docs promises review — store options", () => {
  const building = <ROut, E>(layer: Layer.Layer<ROut, E>) => Effect.scoped(Layer.build(layer))
  it.live("a throwing getter in a store layer's or importSqlite's options is InvalidOptions on options", () =>
    Effect.gen(function*() {
      const outcomes = {
        "SqliteStore.layer": yield* outcome(() =>
          building(SqliteStore.layer(throwingAt("busyTimeout", { filename: freshFile() }) as never))
        ),
        "SqliteStore.layerFromClient": yield* outcome(() =>
          building(SqliteStore.layerFromClient(throwingAt("fallbackPoll") as never).pipe(
            Layer.provide(SqliteStore.layer({ filename: freshFile() }))
          ) as never)
        ),
        "PgStore.layer": yield* outcome(() => building(PgStore.layer(throwingAt("fallbackPoll", { url: pgServerUrl }) as never))),
        "PgStore.importSqlite": yield* outcome(() =>
          PgStore.importSqlite(throwingAt("schema", { filename: freshFile() }) as never).pipe(
            Effect.provide(pgOwned.store())
          )
        )
      }
      expect(outcomes).toEqual(Object.fromEntries(Object.keys(outcomes).map((k) => [k, "InvalidOptions:options"])))
    }))
})

// docs/contract.md §2: "a SQLite `filename` with a NUL (SQLite would open the path cut at it) or a lone surrogate
// is `InvalidOptions` (`filename`)"; docs/decisions.md "Input only a JS caller can get wrong": "… a SQLite filename
// with a NUL". `PgStore.importSqlite` names a SQLite file too, but checks only that it is a non-empty string
// (src/PgStore.ts importSqlite): better-sqlite3 opens the path cut at the NUL, so the import copies a different
// file than the one named (here: the file before the NUL), and a lone surrogate reaches the driver.
describe("docs promises review — importSqlite's filename", () => {
  it.live("importSqlite refuses a filename with a NUL or a lone surrogate (InvalidOptions on filename), importing nothing", () =>
    Effect.gen(function*() {
      const source = freshFile("source")
      yield* Effect.provide(
        Effect.flatMap(Queues.Queues, (q) => Effect.flatMap(q.queue("copied"), (queue) => queue.enqueue({ n: 1 }))),
        SqliteStore.layer({ filename: source })
      )
      const target = freshFile("target")
      const outcomes = yield* Effect.provide(
        Effect.gen(function*() {
          const withNul = yield* outcome(() => PgStore.importSqlite({ filename: `${source}\u0000.bak`, schema: pgSchemaFor(target) }))
          const loneSurrogate = yield* outcome(() => PgStore.importSqlite({ filename: `${source}\ud800`, schema: pgSchemaFor(target) }))
          return { withNul, loneSurrogate, jobs: yield* jobCount }
        }),
        pgOwned.store({ filename: target })
      )
      expect(outcomes).toEqual({ withNul: "InvalidOptions:filename", loneSurrogate: "InvalidOptions:filename", jobs: 0 })
    }))
})

// docs/decisions.md is one table of three columns (Topic | Decision | Why). The row "Stopping on a busy SQLite
// file", rewritten after b4b0e57, has four cells: its old "Why" cell was kept after the new one (the row ends with
// "… A release is best effort anyway: the lease lapses. | Interrupting a standby … the lease lapses. |"), so the
// rendered table shows the old reason in an unheaded fourth column. The fix is the doc's: drop the last cell.
describe("docs promises review — docs/decisions.md", () => {
  it("every row of a table has as many cells as its header", () => {
    const lines = fs.readFileSync(new URL("../docs/decisions.md", import.meta.url), "utf8").split("\n")
    const cells = (line: string) => line.replace(/\\\|/g, "").replace(/`[^`]*`/g, "").split("|").length - 2
    const uneven: Array<string> = []
    let header: number | undefined
    for (const line of lines) {
      if (!line.startsWith("|")) {
        header = undefined
        continue
      }
      header ??= cells(line)
      if (cells(line) !== header) uneven.push(`${cells(line)} cells (header ${header}): ${line.slice(0, 60)}`)
    }
    expect(uneven).toEqual([])
  })
})
