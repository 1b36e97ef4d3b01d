/**
 * The `alkstore` command as shipped: src/bin/alkstore.ts bundled with everything it imports into
 * `<outdir>/alkstore.js` and `<outdir>/chunks/`, better-sqlite3 excepted (a native addon, resolved from the
 * installed package as before).
 *
 * Why a bundle: a command's start was mostly Node resolving and linking the ~1,000 modules of Effect,
 * @effect/cli and the library, one file each — `alkstore stats --db file.db` took 1.3–1.4 s on a 2-core
 * machine, 0.65–0.7 s bundled. The PostgreSQL engine (with `pg`) stays a chunk of its own, loaded for a
 * `postgres://` target only (src/internal/cli/database.ts imports it dynamically); so does the dashboard's
 * server. The library (`dist/index.js`) is not bundled: an application imports it beside its own Effect.
 *
 * `npm run build` runs this after tsc (replacing tsc's `dist/bin/alkstore.js`); the CLI's tests run a bundle
 * made by the same function (test/ops-support.ts), so they run what users run.
 */
import * as esbuild from "esbuild"
import * as fs from "node:fs"
import * as path from "node:path"
import { fileURLToPath } from "node:url"

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

/** Bundles the CLI into `outdir` (replacing what is there); returns the entry point's path. */
export const bundleCli = (outdir: string): string => {
  fs.rmSync(path.join(outdir, "chunks"), { recursive: true, force: true })
  esbuild.buildSync({
    entryPoints: { alkstore: path.join(root, "src", "bin", "alkstore.ts") },
    outdir,
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "node",
    target: "node20",
    // `pg` and a few others are CommonJS: their `require` of Node's built-ins needs a real one in an ES module.
    banner: { js: `import { createRequire as __alkstoreRequire } from "node:module";\nconst require = __alkstoreRequire(import.meta.url);` },
    external: ["better-sqlite3", "pg-native"],
    chunkNames: "chunks/[name]-[hash]",
    // Whitespace and syntax only: names stay, so a defect's stack trace still reads.
    minifyWhitespace: true,
    minifySyntax: true,
    legalComments: "eof",
    logLevel: "error"
  })
  const entry = path.join(outdir, "alkstore.js")
  fs.chmodSync(entry, 0o755)
  // tsc's source map of the module this replaces would map the bundle wrongly.
  fs.rmSync(`${entry}.map`, { force: true })
  return entry
}

if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  bundleCli(path.resolve(process.argv[2] ?? path.join(root, "dist", "bin")))
}
