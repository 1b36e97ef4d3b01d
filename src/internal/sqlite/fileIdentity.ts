import * as fs from "node:fs"

/**
 * A file's identity (device and inode), or `undefined` when nothing is at
 * `filename`: how the store tells "the file it opened" from a file deleted
 * or renamed over under it.
 */
export const fileIdentity = (filename: string): string | undefined => {
  try {
    const stat = fs.statSync(filename)
    return `${stat.dev}:${stat.ino}`
  } catch {
    return undefined
  }
}
