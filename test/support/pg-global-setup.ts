/**
 * vitest globalSetup: a throw-away PostgreSQL cluster for the PostgreSQL
 * engine's tests (test/support/pg-cluster.ts), unless `ALKSTORE_PG_URL` names
 * a server to use. Everything is removed afterwards: the cluster, or on a
 * given server the databases this run's test processes created (named with
 * the run's own prefix, `pgDatabasePrefix`). If the cluster cannot be started
 * the run fails: the PostgreSQL tests never skip silently.
 */
import Pg from "pg"
import type { TestProject } from "vitest/node"
import { startCluster } from "./pg-cluster.js"

/** Drops the databases whose names start with `prefix` (the test processes have ended by now). */
const dropDatabases = async (url: string, prefix: string) => {
  const client = new Pg.Client({ connectionString: url })
  await client.connect()
  try {
    const found = await client.query<{ datname: string }>("SELECT datname FROM pg_database WHERE starts_with(datname, $1)", [prefix])
    for (const { datname } of found.rows) await client.query(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`)
  } finally {
    await client.end()
  }
}

export default async function setup(project: TestProject) {
  const prefix = `alkstore_test_${process.pid}_${Math.random().toString(36).slice(2, 8)}_`
  project.provide("pgDatabasePrefix", prefix)
  const given = process.env.ALKSTORE_PG_URL
  if (given !== undefined && given !== "") {
    project.provide("pgUrl", given)
    return () => dropDatabases(given, prefix)
  }
  const cluster = await startCluster().catch((cause: unknown) => {
    throw new Error(`The PostgreSQL engine's tests need a server: ${String(cause)}`)
  })
  project.provide("pgUrl", cluster.url)
  return cluster.stop
}

declare module "vitest" {
  export interface ProvidedContext {
    pgUrl: string
    /** How this run's test databases are named (test/contract/harness.ts). */
    pgDatabasePrefix: string
  }
}
