/**
 * The package as a user meets it, reviewed: the tarball `npm pack` makes (built
 * in a copy of the repository, so the shared dist/ is left alone), installed
 * into fresh projects outside the repository — once with npm's isolated
 * (`--install-strategy=linked`, pnpm-style) layout, where a package sees only
 * what it declares, and once hoisted over the repository's node_modules —
 * then: what the tarball holds, ESM import and a run, the shipped `.d.ts`
 * under a strict user tsconfig, every ```ts block of README.md and docs/*.md
 * compiled against the *installed* declarations (and README's example run
 * from them), the `alkstore` bin and every CLI flag the docs name, the links
 * of the shipped docs, the `Context.Tag` keys and the span names the
 * observability docs promise.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { afterAll, beforeAll } from "vitest"
import { Admin, Queues } from "../src/index.js"
import { type EngineUnderTest, pgOwned, sqliteOwned } from "./contract/harness.js"
import { collectingTracer } from "./contract/telemetry.js"
import { blockSlug, brokenLinks, collectBlocks, type DocBlock, markdownFiles } from "./support/docExamples.js"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const repoPackage = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8")) as {
  readonly version: string
  readonly dependencies: Record<string, string>
  readonly peerDependencies: Record<string, string>
}
const tscBin = path.join(root, "node_modules", "typescript", "bin", "tsc")
const publicModules = ["Admin", "EffectStores", "Locks", "Outbox", "PgStore", "Queues", "Scheduler", "SqliteStore", "StoreError", "Telemetry"]

interface Ran {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

/** Runs a command off the test worker's event loop; never rejects (the exit code is in the result). */
const run = (cmd: string, args: ReadonlyArray<string>, cwd: string, timeout = 120_000) =>
  new Promise<Ran>((resolve) =>
    execFile(cmd, args, { cwd, encoding: "utf8", timeout, maxBuffer: 64 << 20, env: { ...process.env, NO_COLOR: "1" } }, (error, stdout, stderr) =>
      resolve({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, stdout, stderr })))

const mustRun = async (cmd: string, args: ReadonlyArray<string>, cwd: string) => {
  const ran = await run(cmd, args, cwd)
  if (ran.code !== 0) throw new Error(`${cmd} ${args.join(" ")} (in ${cwd}) exited ${ran.code}\n${ran.stdout}\n${ran.stderr}`)
  return ran.stdout
}

const base = fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-package-review-"))
afterAll(() => fs.rmSync(base, { recursive: true, force: true }))

/** Everything the tests below read, made once. */
interface Prepared {
  /** `npm pack --json`'s entry for the tarball. */
  readonly packed: { readonly filename: string; readonly files: ReadonlyArray<{ readonly path: string; readonly mode: number }> }
  /** The tarball extracted: its `package/` directory. */
  readonly extracted: string
  /** A project whose node_modules holds the installed tarball beside the repository's packages (hoisted). */
  readonly app: string
  /** A project installed by npm with `--install-strategy=linked` (each package sees only what it declares). */
  readonly linked: Ran & { readonly dir: string }
  /** tsc over every docs block and a user program (below), against the installed declarations (emitting to app/out). */
  readonly tsc: Ran
  readonly slugs: ReadonlyMap<string, DocBlock>
}

let prepared: Prepared

/** A user program touching every public module, compiled strictly against dist's `.d.ts`, then run. */
const userProgram = `import { Admin, EffectStores, Locks, Outbox, PgStore, Queues, Scheduler, SqliteStore, StoreError, Telemetry } from "alkstore"
import * as PersistedQueue from "@effect/experimental/PersistedQueue"
import { Effect, Layer, Option, Schema } from "effect"

const Email = Schema.Struct({ to: Schema.String })

const program = Effect.gen(function*() {
  const emails = yield* (yield* Queues.Queues).queue("emails", { schema: Email, visibilityTimeout: "30 seconds" })
  const id: Queues.JobId = yield* emails.enqueue({ to: "ada@example.com" }, { priority: 5, delay: "0 millis" })
  const claimed: Option.Option<Queues.JobHandle<{ readonly to: string }>> = yield* emails.claim("worker-1")
  const acked = Option.isSome(claimed) ? yield* claimed.value.ack : false
  const lock = yield* (yield* Locks.Locks).withLock("nightly", "30 seconds", Effect.succeed("locked"))
  yield* (yield* Scheduler.Scheduler).schedule("sweep", "@every 5m", "housekeeping", { kind: "sweep" })
  const outbox = yield* (yield* Outbox.Outbox).outbox("webhooks")
  yield* outbox.enqueue({ hello: "world" })
  const persisted = yield* PersistedQueue.make({ name: "persisted", schema: Email })
  yield* persisted.offer({ to: "grace@example.com" })
  const queues = yield* (yield* Admin.Admin).queues
  const refused = yield* Effect.flip((yield* Queues.Queues).queue(""))
  const error: StoreError.InvalidName | StoreError.ReservedName | StoreError.InvalidOptions = refused
  return {
    id,
    acked,
    lock,
    queues: queues.map((q) => q.name),
    refused: error._tag,
    attribute: Telemetry.attributes.queue,
    pg: typeof PgStore.layer
  }
})

const Store = SqliteStore.layer({ filename: "user.db" })
const Live = Layer.mergeAll(Store, PersistedQueue.layer.pipe(Layer.provide(EffectStores.layerPersistedQueueStore()), Layer.provide(Store)))

Effect.runPromise(program.pipe(Effect.provide(Live))).then(
  (result) => console.log(JSON.stringify(result)),
  (error: unknown) => {
    console.error(error)
    throw error
  }
)
`

beforeAll(async () => {
  // 1. A copy of what `npm pack` reads, packed there (its prepack builds dist/ in the copy).
  const pkg = path.join(base, "pkg")
  fs.mkdirSync(pkg)
  for (const entry of ["package.json", "README.md", ".gitignore", "tsconfig.json", "tsconfig.build.json", "scripts", "src", "docs"]) {
    fs.cpSync(path.join(root, entry), path.join(pkg, entry), { recursive: true })
  }
  fs.symlinkSync(path.join(root, "node_modules"), path.join(pkg, "node_modules"), "dir")
  const packed = JSON.parse(await mustRun("npm", ["pack", "--json", "--pack-destination", base], pkg))[0] as Prepared["packed"]
  const tarball = path.join(base, packed.filename)
  const extractedRoot = path.join(base, "extracted")
  fs.mkdirSync(extractedRoot)
  await mustRun("tar", ["-xzf", tarball, "-C", extractedRoot], base)
  const extracted = path.join(extractedRoot, "package")

  // 2. npm's isolated layout, offline from the cache where it can: alkstore and the peers a user installs.
  const linkedDir = path.join(base, "linked")
  fs.mkdirSync(linkedDir)
  fs.writeFileSync(path.join(linkedDir, "package.json"), JSON.stringify({
    name: "alkstore-linked-consumer",
    private: true,
    type: "module",
    dependencies: { alkstore: `file:../${packed.filename}`, ...repoPackage.peerDependencies }
  }, null, 2))
  const linkedInstall = run("npm", [
    "install", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts", "--install-strategy=linked"
  ], linkedDir)

  // 3. The hoisted layout: the tarball's files as node_modules/alkstore, every other package the repository's
  // own (symlinked: one copy of Effect; better-sqlite3's native build is there). npm makes the bin executable.
  const app = path.join(base, "app")
  const modules = path.join(app, "node_modules")
  fs.mkdirSync(modules, { recursive: true })
  fs.cpSync(extracted, path.join(modules, "alkstore"), { recursive: true })
  for (const entry of fs.readdirSync(path.join(root, "node_modules"))) {
    if (entry.startsWith(".") || entry === "alkstore") continue
    fs.symlinkSync(path.join(root, "node_modules", entry), path.join(modules, entry), "dir")
  }
  fs.mkdirSync(path.join(modules, ".bin"))
  fs.symlinkSync(path.join("..", "alkstore", "dist", "bin", "alkstore.js"), path.join(modules, ".bin", "alkstore"))
  fs.chmodSync(path.join(modules, "alkstore", "dist", "bin", "alkstore.js"), 0o755)
  fs.writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "alkstore-consumer", private: true, type: "module" }))

  // Every ```ts block of the docs, compiled with what getting-started.md says users need ("module": "NodeNext",
  // "strict": true), against the installed declarations; emitted, so README's example can run from them.
  const { blocks } = collectBlocks(root)
  const slugs = new Map<string, DocBlock>()
  fs.mkdirSync(path.join(app, "blocks"))
  for (const block of blocks) {
    slugs.set(blockSlug(block), block)
    fs.writeFileSync(path.join(app, "blocks", `${blockSlug(block)}.ts`), block.code)
  }
  fs.mkdirSync(path.join(app, "user"))
  fs.writeFileSync(path.join(app, "user", "main.ts"), userProgram)
  // One program (the libraries' declarations are checked once): what getting-started.md says users need
  // ("module": "NodeNext", "strict": true), plus the stricter flags the repository's own docs check uses, and the
  // installed declarations checked too (no skipLibCheck). Emitted, so README's example and the user program run.
  fs.writeFileSync(path.join(app, "tsconfig.json"), JSON.stringify({
    compilerOptions: {
      target: "ES2022",
      module: "NodeNext",
      moduleResolution: "NodeNext",
      strict: true,
      exactOptionalPropertyTypes: true,
      noUncheckedIndexedAccess: true,
      skipLibCheck: false,
      types: ["node"],
      moduleDetection: "force",
      outDir: "out",
      rootDir: "."
    },
    include: ["blocks", "user"]
  }))
  const [linked, tsc] = await Promise.all([linkedInstall, run(process.execPath, [tscBin, "-p", "tsconfig.json"], app)])
  prepared = { packed, extracted, app, linked: { ...linked, dir: linkedDir }, tsc, slugs }
}, 240_000)

/** `pkg` of a bare specifier (`@effect/sql/SqlClient` → `@effect/sql`); undefined for relative and `node:` ones. */
const packageOf = (specifier: string) => {
  if (specifier.startsWith(".") || specifier.startsWith("/") || specifier.startsWith("node:")) return undefined
  const parts = specifier.split("/")
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]
}

const filesUnder = (dir: string): Array<string> =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? filesUnder(path.join(dir, e.name)) : [path.join(dir, e.name)])

/** The module specifiers a compiled file loads at run time (static, dynamic, and `createRequire(...).resolve`). */
const specifiersOf = (code: string) =>
  [...code.matchAll(/(?:^|[\s;])(?:import|export)\s[^"';]*?from\s*["']([^"']+)["']|import\s*\(\s*["']([^"']+)["']\s*\)|^import\s*["']([^"']+)["']|\.resolve\(\s*["']([^"']+)["']\s*\)/gm)]
    .map((m) => m[1] ?? m[2] ?? m[3] ?? m[4]!)

/**
 * tsc's errors in the consumer's own files and in alkstore's installed declarations, a block's placed at its
 * markdown line (`README.md:52 (column 3): error TS…`). Errors inside other libraries' declarations are theirs
 * (`@effect/platform-node`'s want `@types/ws`, which a user importing it installs).
 */
const diagnostics = () =>
  (prepared.tsc.stdout + prepared.tsc.stderr).split("\n").filter((l) => / error TS\d+/.test(l))
    .filter((l) => /^(blocks|user|node_modules\/alkstore)\/|^error/.test(l))
    .map((l) => {
      const at = /^blocks\/(.+)\.ts\((\d+),(\d+)\): (.*)$/.exec(l)
      const block = at === null ? undefined : prepared.slugs.get(at[1]!)
      return block === undefined || at === null ? l : `${block.file}:${block.line + Number(at[2]) - 1} (column ${at[3]}): ${at[4]}`
    })

describe("the packed tarball", () => {
  it("holds dist (JS, declarations, the bin with its shebang), README and package.json, and nothing private", () => {
    const files = prepared.packed.files.map((f) => f.path)
    for (const m of publicModules) {
      expect(files).toContain(`dist/${m}.js`)
      expect(files).toContain(`dist/${m}.d.ts`)
    }
    expect(files).toEqual(expect.arrayContaining(["dist/index.js", "dist/index.d.ts", "dist/bin/alkstore.js", "README.md", "package.json"]))
    const privateFiles = files.filter((f) =>
      /^(test|bench|chaos|demo|node_modules|\.scratch|\.ci|\.docs-examples|\.git)\//.test(f) || /\.db(-wal|-shm)?$/.test(f) ||
      f === "package-lock.json" || f.startsWith("docs/benchmarks-") && f.endsWith(".json"))
    expect(privateFiles).toEqual([])
    expect(fs.readFileSync(path.join(prepared.extracted, "dist", "bin", "alkstore.js"), "utf8").startsWith("#!/usr/bin/env node\n")).toBe(true)
  })

  it("every relative import of dist's JavaScript and declarations is a file of the tarball", () => {
    const shipped = new Set(prepared.packed.files.map((f) => f.path))
    const dangling: Array<string> = []
    for (const file of filesUnder(path.join(prepared.extracted, "dist")).filter((f) => /\.(js|d\.ts)$/.test(f))) {
      for (const spec of specifiersOf(fs.readFileSync(file, "utf8"))) {
        if (!spec.startsWith(".")) continue
        const target = path.relative(prepared.extracted, path.resolve(path.dirname(file), spec))
        const candidates = file.endsWith(".d.ts") ? [target.replace(/\.js$/, ".d.ts"), target] : [target]
        if (!candidates.some((c) => shipped.has(c))) dangling.push(`${path.relative(prepared.extracted, file)} → ${spec}`)
      }
    }
    expect(dangling).toEqual([])
  })

  it("every package dist's JavaScript loads at run time is one package.json declares (dependencies or peerDependencies)", () => {
    const declared = new Set([...Object.keys(repoPackage.dependencies), ...Object.keys(repoPackage.peerDependencies)])
    const undeclared: Array<string> = []
    for (const file of filesUnder(path.join(prepared.extracted, "dist")).filter((f) => f.endsWith(".js"))) {
      for (const spec of specifiersOf(fs.readFileSync(file, "utf8"))) {
        const pkg = packageOf(spec)
        if (pkg !== undefined && !declared.has(pkg)) undeclared.push(`${path.relative(prepared.extracted, file)} imports "${spec}"`)
      }
    }
    expect(undeclared, "a package a dependency happens to bring is not there under pnpm, Yarn PnP or npm's linked layout").toEqual([])
  })

  it("the links of the shipped README.md and docs/*.md lead to files of the tarball", () => {
    expect(brokenLinks(prepared.extracted).map((p) => `${p.file}:${p.line}: ${p.reason}`)).toEqual([])
  })
})

describe("the installed package", () => {
  it("imports as ESM under npm's isolated (linked) layout, where a package sees only what it declares", async () => {
    expect(prepared.linked.code, `npm install --install-strategy=linked failed:\n${prepared.linked.stderr}`).toBe(0)
    const ran = await run(process.execPath, ["--input-type=module", "-e", `const m = await import("alkstore"); console.log(JSON.stringify(Object.keys(m).sort()))`], prepared.linked.dir)
    const firstError = ran.stderr.split("\n").find((l) => /Error|Cannot find/.test(l)) ?? ran.stderr
    expect({ code: ran.code, error: ran.code === 0 ? "" : firstError.trim() }).toEqual({ code: 0, error: "" })
    expect(JSON.parse(ran.stdout)).toEqual(publicModules)
  })

  it("imports as ESM (the README's modules, tags keyed alkstore/…, its own package.json) and runs a program", async () => {
    const probe = `
      const m = await import("alkstore")
      const own = (await import("alkstore/package.json", { with: { type: "json" } })).default
      console.log(JSON.stringify({
        modules: Object.keys(m).sort(),
        tags: [m.Queues.Queues, m.Locks.Locks, m.Scheduler.Scheduler, m.Outbox.Outbox, m.Admin.Admin, m.EffectStores.Backing].map((t) => t.key),
        version: own.version
      }))`
    const found = JSON.parse(await mustRun(process.execPath, ["--input-type=module", "-e", probe], prepared.app))
    expect(found).toEqual({
      modules: publicModules,
      tags: ["alkstore/Queues", "alkstore/Locks", "alkstore/Scheduler", "alkstore/Outbox", "alkstore/Admin", "alkstore/EffectStores/Backing"],
      version: repoPackage.version
    })
  })

  it("its declarations compile a strict user program (exactOptionalPropertyTypes, noUncheckedIndexedAccess, no skipLibCheck), which runs", async () => {
    expect(diagnostics().filter((d) => !d.startsWith("blocks/") && !/\.md:\d+/.test(d))).toEqual([])
    const dir = path.join(prepared.app, "run-user")
    fs.mkdirSync(dir)
    const result = JSON.parse(await mustRun(process.execPath, [path.join(prepared.app, "out", "user", "main.js")], dir))
    expect(result).toEqual({
      id: expect.any(Number),
      acked: true,
      lock: "locked",
      queues: ["__alkstore_outbox:webhooks", "housekeeping", "persisted"], // "emails" is empty: its one job was acked
      refused: "InvalidName",
      attribute: "alkstore.queue",
      pg: "function"
    })
  })

  it("every ts block of README.md and docs/*.md compiles against the installed declarations (module NodeNext, strict)", () => {
    expect(diagnostics().filter((d) => d.startsWith("blocks/") || /\.md:\d+/.test(d))).toEqual([])
    expect(prepared.slugs.size).toBeGreaterThan(10)
  })

  it("README's runnable example runs against the installed package", async () => {
    const readme = [...prepared.slugs].find(([, b]) => b.file === "README.md" && b.runnable)
    expect(readme).toBeDefined()
    const dir = path.join(prepared.app, "run-readme")
    fs.mkdirSync(dir)
    const ran = await run(process.execPath, [path.join(prepared.app, "out", "blocks", `${readme![0]}.js`)], dir, 30_000)
    expect({ code: ran.code, stderr: ran.stderr }).toEqual({ code: 0, stderr: "" })
    expect(ran.stdout).toContain("sending to")
  })

  it("the alkstore bin runs (its version is the package's), and every command and flag the docs name is in its usage", async () => {
    const bin = path.join(prepared.app, "node_modules", ".bin", "alkstore")
    expect((await mustRun(bin, ["--version"], prepared.app)).trim()).toBe(repoPackage.version)
    const help = await mustRun(bin, ["--help"], prepared.app)
    // "  - schedule add [--db text] … <name>    registers …": a command, its flags.
    const usage = new Map<string, Set<string>>()
    for (const m of help.matchAll(/^\s*- ([a-z]+(?: (?:add|remove))?)((?: \S.*?)?)\s{2,}\S/gm)) {
      usage.set(m[1]!, new Set(m[2]!.match(/--[a-z][a-z-]*/g) ?? []))
    }
    expect(usage.size).toBeGreaterThan(10)
    const wrong: Array<string> = []
    for (const file of markdownFiles(root)) {
      let fence: string | undefined
      fs.readFileSync(path.join(root, file), "utf8").split("\n").forEach((line, i) => {
        const open = /^ *`{3,}(\w*)/.exec(line)
        if (open !== null) {
          fence = fence === undefined ? open[1] : undefined
          return
        }
        // Command lines of ```sh blocks (comments cut), and inline code outside blocks.
        const snippets = fence === "sh" ? [line.replace(/#.*$/, "")] : fence !== undefined ? [] : [...line.matchAll(/`([^`]+)`/g)].map((m) => m[1]!)
        for (const snippet of snippets) {
          for (const m of snippet.trim().matchAll(/(?:^|npx )alkstore ([a-z][a-z-]*)(?: (add|remove)\b)?([^;&|]*)/g)) {
            const command = m[2] !== undefined ? `${m[1]} ${m[2]}` : m[1]!
            const flags = usage.get(command)
            if (flags === undefined) wrong.push(`${file}:${i + 1}: no command "${command}"`)
            else for (const flag of m[3]!.match(/--[a-z][a-z-]*/g) ?? []) if (!flags.has(flag)) wrong.push(`${file}:${i + 1}: ${command} has no ${flag}`)
          }
        }
      })
    }
    expect(wrong).toEqual([])
  })
})


let queueCounter = 0

// docs/observability.md: alkstore's spans are `alkstore.<area>.<operation>` (its table lists them all), and their
// attributes the `alkstore.*` keys `Telemetry.attributes` names. Engine-free code names them: each engine's own layer.
for (const engine of [sqliteOwned, pgOwned] satisfies ReadonlyArray<EngineUnderTest>) {
  describe(`span names — ${engine.name}`, () => {
    it.effect("every span alkstore makes for the Queues and Admin services is named alkstore.… with alkstore.* attributes", () => {
      const { spans, tracer } = collectingTracer()
      return Effect.gen(function*() {
        const name = `review-spans-${++queueCounter}`
        const queues = yield* Queues.Queues
        const admin = yield* Admin.Admin
        const queue = yield* queues.queue(name)
        const id = yield* queue.enqueue({ n: 1 })
        yield* queues.setLimits(name, { concurrency: 2 })
        yield* queues.limits(name)
        yield* queues.clearLimits(name)
        yield* queue.stats
        yield* admin.queues
        yield* admin.totals
        yield* admin.jobs({ queue: name })
        yield* admin.job(id)
        yield* admin.requeue(id)
        yield* admin.cancel(id)
        yield* admin.purgeDead(name)
        yield* admin.schedules
        yield* admin.locks
        yield* admin.migrations
        const made = spans.filter((s) => !s.name.startsWith("sql."))
        expect(made.map((s) => s.name)).toContain("alkstore.queue.enqueue") // the tracer is seen as installed
        const offNaming = made
          .filter((s) => !/^alkstore\.[a-z_]+\.[a-z_]+$/.test(s.name) || [...s.attributes.keys()].some((k) => !k.startsWith("alkstore.")))
          .map((s) => `${s.name} {${[...s.attributes.keys()].join(", ")}}`)
        expect([...new Set(offNaming)]).toEqual([])
      }).pipe(Effect.provide(engine.store()), Effect.withTracer(tracer))
    })
  })
}
