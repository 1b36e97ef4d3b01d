/**
 * The append-only ledger the chaos processes write: one JSON object per line,
 * each appended on an O_APPEND descriptor and fsync'd before the writer goes
 * on, so a record written before a SIGKILL survives it.
 */
import * as fs from "node:fs"

export interface Ledger {
  readonly append: (record: Record<string, unknown>) => void
  readonly close: () => void
}

export const openLedger = (file: string): Ledger => {
  const fd = fs.openSync(file, "a")
  return {
    append: (record) => {
      // one write(2) per line on O_APPEND: lines of different processes never interleave
      fs.writeSync(fd, `${JSON.stringify({ ...record, pid: process.pid, at: Date.now() })}\n`)
      fs.fdatasyncSync(fd)
    },
    close: () => fs.closeSync(fd)
  }
}

export const readLedger = <R>(file: string): Array<R> =>
  fs.existsSync(file)
    ? fs.readFileSync(file, "utf8").split("\n").filter((line) => line.length > 0).map((line) => JSON.parse(line) as R)
    : []
