import * as fs from "node:fs"
import * as os from "node:os"

/**
 * The WAL's live length and how much of it is copied into the database, from the wal-index header in `-shm`
 * (https://www.sqlite.org/walformat.html: `mxFrame` at byte 16, `nBackfill` at 96, native byte order). The
 * `-wal` file's size is only its high-water mark and says nothing of a restart. Used by test/checkpoint.test.ts
 * and bench/wal-stream.ts.
 */
export const walIndex = (filename: string) => {
  const header = Buffer.alloc(100)
  const fd = fs.openSync(`${filename}-shm`, "r")
  try {
    fs.readSync(fd, header, 0, 100, 0)
  } finally {
    fs.closeSync(fd)
  }
  const le = os.endianness() === "LE"
  return { frames: le ? header.readUInt32LE(16) : header.readUInt32BE(16), copied: le ? header.readUInt32LE(96) : header.readUInt32BE(96) }
}
