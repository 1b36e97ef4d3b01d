/**
 * vitest globalSetup: a throw-away PostgreSQL cluster for the PostgreSQL
 * engine's tests (test/support/pg-cluster.ts), unless `ALKSTORE_PG_URL` names
 * a server to use. Everything is removed afterwards. If the cluster cannot be
 * started the run fails: the PostgreSQL tests never skip silently.
 */
import type { TestProject } from "vitest/node"
import { startCluster } from "./pg-cluster.js"

export default async function setup(project: TestProject) {
  const given = process.env.ALKSTORE_PG_URL
  if (given !== undefined && given !== "") {
    project.provide("pgUrl", given)
    return
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
  }
}
