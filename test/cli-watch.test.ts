/**
 * `alkstore watch` under a real pseudo-terminal (tmux, on a private socket):
 * the view draws, redraws in place as the store changes, and stops cleanly
 * on Ctrl-C; and its JSON lines for scripts.
 */
import { type ChildProcess, execFileSync } from "node:child_process"
import * as fs from "node:fs"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { cli, cliEntry, nodeArgv, seed, type Seeded, tempDir, watchJsonReadings } from "./ops-support.js"

const dir = tempDir("watch")
const socket = `alkstore-watch-${process.pid}`
const tmux = (...args: ReadonlyArray<string>) => execFileSync("tmux", ["-L", socket, ...args], { encoding: "utf8" })
const quote = (arg: string) => `'${arg.replace(/'/g, "'\\''")}'`

const children: Array<ChildProcess> = []

afterAll(() => {
  for (const child of children) child.kill("SIGTERM")
  try {
    tmux("kill-server")
  } catch {
    // already gone
  }
  fs.rmSync(dir, { recursive: true, force: true })
})

let file = ""
let ids: Seeded
beforeAll(async () => {
  file = path.join(dir, "watched.db")
  ids = await seed(file)
})

/** The visible screen, polled until `ready` holds (or the deadline passes). */
const screenUntil = async (ready: (screen: string) => boolean, timeoutMs = 30_000) => {
  const deadline = Date.now() + timeoutMs
  let screen = ""
  while (Date.now() < deadline) {
    screen = tmux("capture-pane", "-p", "-t", "watch")
    if (ready(screen)) return screen
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
  throw new Error(`the screen never got ready:\n${screen}`)
}

describe("alkstore watch", () => {
  it("draws depths and rates in a terminal, redraws in place as the store changes, and stops on Ctrl-C", async () => {
    const command = nodeArgv(cliEntry(), ["watch", "--db", file, "--interval", "500ms"]).map(quote).join(" ")
    tmux("new-session", "-d", "-s", "watch", "-x", "150", "-y", "30", `${command}; echo "watch exited with $?"; sleep 60`)
    const first = await screenUntil((s) => /emails\s+2\s+\S+\s+1\s+1\s+1/.test(s))
    expect(first).toMatch(/QUEUE\s+PENDING\s+Δ\/s\s+SCHEDULED\s+CLAIMED\s+DEAD\s+OLDEST\s+PENDING TREND/)
    expect(first).toMatch(/reports\s+0\s+\S+\s+0\s+0\s+1/)
    expect(first).toMatch(/enqueued \S+\/s\s+completed \S+\/s\s+jobs in store 6/)

    expect((await cli(["requeue", String(ids.deadEmail), "--db", file])).code).toBe(0)
    const after = await screenUntil((s) => /emails\s+3\s+\S+\s+1\s+1\s+0/.test(s))
    // Redrawn in place: one frame on the screen, not a scroll of them.
    expect(after.match(/alkstore watch/g)).toHaveLength(1)
    expect(after).toMatch(/reports\s+0\s+\S+\s+0\s+0\s+1/)

    tmux("send-keys", "-t", "watch", "C-c")
    const stopped = await screenUntil((s) => s.includes("watch exited with"))
    expect(stopped).toContain("watch exited with 0")
  })

  it("--json prints one reading per line (rates from the second on) and SIGINT ends it with exit 0", async () => {
    const { code, readings: [first, second] } = await watchJsonReadings(file, children)
    expect(code).toBe(0)
    expect(first.rates).toBeNull()
    expect(second.rates).toEqual({ enqueuedPerSec: 0, completedPerSec: 0 })
    expect(second.queues.map((q: { name: string }) => q.name)).toEqual(["emails", "reports"])
    expect(second.totals.live).toBe(6)
  })
})
