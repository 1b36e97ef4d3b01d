#!/usr/bin/env node
/** The `alkstore` command: inspect and repair a store from the terminal (docs/operations.md). */
import { main } from "../internal/cli/main.js"

main(process.argv.slice(2))
