import * as fs from "node:fs"
import * as os from "node:os"

/**
 * Reads the WAL's live length and how much of it is copied into the database from the wal-index header in
 * `-shm` (https://www.sqlite.org/walformat.html: `mxFrame` at byte 16, `nBackfill` at 96, native byte order).
 * The `-wal` file's size is only its high-water mark and says nothing of a restart. Used by
 * test/checkpoint.test.ts, test/fixtures/wal-stream.ts and bench/wal-stream.ts.
 *
 * The file is opened once, on the first read, and stays open until `close`: closing any descriptor of a file
 * drops every POSIX lock the process holds on it, the SQLite connections' included, after which another
 * process's checkpoint can overwrite frames this process is still reading ("How To Corrupt An SQLite Database
 * File", §2.2). A reader opened and closed per read in a process whose store shares the file with a second
 * process corrupted an index within seconds (`SQLITE_CORRUPT_INDEX`). So in a process with a connection to the
 * file, `close` only after that connection is closed.
 */
export const walIndexReader = (filename: string) => {
  const header = Buffer.alloc(100)
  const le = os.endianness() === "LE"
  let fd: number | undefined
  return {
    read: () => {
      fd ??= fs.openSync(`${filename}-shm`, "r")
      fs.readSync(fd, header, 0, 100, 0)
      return {
        frames: le ? header.readUInt32LE(16) : header.readUInt32BE(16),
        copied: le ? header.readUInt32LE(96) : header.readUInt32BE(96)
      }
    },
    close: () => {
      if (fd !== undefined) fs.closeSync(fd)
      fd = undefined
    }
  }
}

/**
 * Counts a stream's WAL restarts from readings of its live length taken every so often: a reading below the
 * one before is a restart. `written` is the frames written over the stream as the readings see them.
 */
export const restartCounter = () => {
  let last = 0
  let restarts = 0
  let written = 0
  let longest = 0
  return {
    add: (frames: number) => {
      if (frames < last) restarts++
      written += frames < last ? frames : frames - last
      longest = Math.max(longest, frames)
      last = frames
    },
    report: () => ({ restarts, written, longest })
  }
}
