/**
 * The package as users install it: `npm pack` (which builds dist/), the
 * tarball installed into a fresh project outside the repository with its
 * peers from the registry (cache first), one copy of Effect, an example
 * type-checked against the shipped declarations and run as ESM, and the CLI
 * through `npx alkstore`.
 */
import { execFile } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { fileURLToPath } from "node:url"
import { afterAll, describe, expect, it } from "vitest"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")
const project = fs.mkdtempSync(path.join(os.tmpdir(), "alkstore-package-"))
afterAll(() => fs.rmSync(project, { recursive: true, force: true }))

/** Runs a command without blocking the test worker; its output is in the failure message. */
const run = (cmd: string, args: ReadonlyArray<string>, cwd: string) =>
  new Promise<string>((resolve, reject) =>
    execFile(cmd, args, { cwd, encoding: "utf8", maxBuffer: 64 << 20, env: { ...process.env, NO_COLOR: "1" } }, (error, stdout, stderr) =>
      error ? reject(new Error(`${cmd} ${args.join(" ")} failed: ${error.message}\n${stdout}\n${stderr}`)) : resolve(stdout)))

const repoPackage = JSON.parse(fs.readFileSync(path.join(root, "package.json"), "utf8"))
const installedVersion = (dir: string, name: string) =>
  JSON.parse(fs.readFileSync(path.join(dir, "node_modules", name, "package.json"), "utf8")).version as string

/** Every copy of `name` under node_modules (nested ones too). */
const copiesOf = (name: string): Array<string> => {
  const found: Array<string> = []
  const walk = (dir: string) => {
    const modules = path.join(dir, "node_modules")
    if (!fs.existsSync(modules)) return
    for (const entry of fs.readdirSync(modules)) {
      const scoped = entry.startsWith("@") ? fs.readdirSync(path.join(modules, entry)).map((e) => `${entry}/${e}`) : [entry]
      for (const pkg of scoped) {
        if (pkg === name) found.push(path.join(modules, pkg))
        walk(path.join(modules, pkg))
      }
    }
  }
  walk(project)
  return found
}

describe("the packed package", () => {
  it("installs from its tarball into a fresh project, imports and runs as ESM with types, and runs the CLI via npx", async () => {
    const packed = JSON.parse(await run("npm", ["pack", "--json", "--pack-destination", project], root))[0]
    const files: Array<string> = packed.files.map((f: { path: string }) => f.path)
    expect(files).toContain("dist/index.js")
    expect(files).toContain("dist/index.d.ts")
    expect(files).toContain("dist/bin/alkstore.js")
    expect(files.filter((f) => f.startsWith("test/") || f.startsWith("bench/") || f.startsWith("node_modules/"))).toEqual([])

    const peers = repoPackage.peerDependencies as Record<string, string>
    fs.writeFileSync(path.join(project, "package.json"), JSON.stringify({
      name: "alkstore-consumer",
      private: true,
      type: "module",
      dependencies: { alkstore: `file:./${packed.filename}`, ...peers }
    }, null, 2))
    // Install scripts off: better-sqlite3's native build is the repository's own (same version, same node).
    await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--ignore-scripts"], project)
    const addon = path.join("node_modules", "better-sqlite3", "build", "Release", "better_sqlite3.node")
    if (installedVersion(project, "better-sqlite3") === installedVersion(root, "better-sqlite3")) {
      fs.mkdirSync(path.dirname(path.join(project, addon)), { recursive: true })
      fs.copyFileSync(path.join(root, addon), path.join(project, addon))
    } else {
      await run("npm", ["rebuild", "better-sqlite3"], project)
    }
    for (const name of ["effect", "@effect/platform", "@effect/sql"]) expect(copiesOf(name), name).toHaveLength(1)

    fs.copyFileSync(path.join(root, "test", "fixtures", "package-example.ts"), path.join(project, "example.ts"))
    fs.writeFileSync(path.join(project, "tsconfig.json"), JSON.stringify({
      compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, outDir: "out", skipLibCheck: false, types: [] },
      files: ["example.ts"]
    }))
    await run(process.execPath, [path.join(root, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json"], project)
    const result = JSON.parse(await run(process.execPath, ["out/example.js"], project))
    expect(result).toEqual({ acked: true, kept: 2, queues: [["emails", 1]] })

    const help = await run("npx", ["--no-install", "alkstore", "--help"], project)
    expect(help).toContain("- requeue [--db text]")
    const stats = JSON.parse(await run("npx", ["--no-install", "alkstore", "stats", "--db", "example.db", "--json"], project))
    expect(stats.queues).toEqual([{ name: "emails", pending: 1, scheduled: 0, claimed: 0, dead: 0, oldestPendingAgeMs: expect.any(Number) }])
  }, 600_000)
})
