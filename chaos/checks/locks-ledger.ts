/**
 * The lock check's checker: from the contenders' ledger and the driver's
 * kills and freezes, proves that no two live, in-lease tenures overlap,
 * that each new tenure's token exceeds all before it, and that the
 * resource refused every write of a tenure older than one already begun.
 */
import { violations as collect } from "../lib/check.js"

export type LockRecord =
  | { readonly e: "ready"; readonly pid: number; readonly at: number }
  | { readonly e: "acq"; readonly token: number; readonly start: number; readonly via: string; readonly pid: number; readonly at: number }
  | { readonly e: "proof"; readonly token: number; readonly t: number; readonly pid: number; readonly at: number }
  | {
    readonly e: "write"
    readonly token: number
    readonly ok: boolean
    readonly before: number
    readonly pid: number
    readonly at: number
  }
  /** A write about to be made: one with no `write` after it from its process was cut off (killed). */
  | { readonly e: "writing"; readonly token: number; readonly pid: number; readonly at: number }
  | { readonly e: "end"; readonly token?: number; readonly how: "released" | "lost"; readonly pid: number; readonly at: number }
  | { readonly e: "kill" | "freeze" | "thaw"; readonly target: number; readonly pid: number; readonly at: number }

interface Tenure {
  readonly token: number
  readonly pid: number
  readonly via: string
  readonly start: number
  proofs: Array<number>
  end?: { how: string; at: number }
}

export const checkLockLedger = (records: ReadonlyArray<LockRecord>) => {
  const v = collect()
  const tenures = new Map<number, Tenure>()
  const frozen: Array<{ pid: number; from: number; to: number }> = []
  const open = new Map<number, Tenure>() // pid → its tenure in progress
  for (const r of records) {
    if (r.e === "acq") {
      if (tenures.has(r.token)) v.add("token reused", `token ${r.token} began two tenures`)
      const t: Tenure = { token: r.token, pid: r.pid, via: r.via, start: r.start, proofs: [] }
      tenures.set(r.token, t)
      open.set(r.pid, t)
    } else if (r.e === "proof") tenures.get(r.token)?.proofs.push(r.t)
    else if (r.e === "end") {
      const t = r.token !== undefined ? tenures.get(r.token) : open.get(r.pid)
      if (t !== undefined) t.end = { how: r.how, at: r.at }
      open.delete(r.pid)
    } else if (r.e === "freeze") frozen.push({ pid: r.target, from: r.at, to: Infinity })
    else if (r.e === "thaw") {
      const span = frozen.find((f) => f.pid === r.target && f.to === Infinity)
      if (span !== undefined) span.to = r.at
    }
  }
  const frozenDuring = (t: Tenure, until: number) => frozen.some((f) => f.pid === t.pid && f.from < until && f.to > t.start)

  // what each tenure provably held: renew successes always; withLock's own instants only when
  // it ended released and was never frozen (a frozen holder's effect may run on before its renewal fails)
  const provenEnd = (t: Tenure) => {
    const trusted = t.via === "acquire" ||
      (t.end?.how === "released" && !frozenDuring(t, t.end.at))
    return trusted && t.proofs.length > 0 ? Math.max(...t.proofs) : t.start
  }

  const ordered = [...tenures.values()].sort((a, b) => a.start - b.start)
  let overlapsChecked = 0
  for (let i = 0; i < ordered.length; i++) {
    const a = ordered[i]!
    const end = provenEnd(a)
    for (let j = i + 1; j < ordered.length && ordered[j]!.start < end; j++) {
      v.add("overlap", `tenure ${ordered[j]!.token} began at ${ordered[j]!.start} while ${a.token} held (proven to ${end})`)
    }
    overlapsChecked++
    const next = ordered[i + 1]
    if (next !== undefined && next.token <= a.token) v.add("token order", `tenure ${next.token} began after ${a.token}`)
  }

  // the resource: a write with token t begun after a tenure with a greater token had written
  // (its `acq` record follows its first write) must be refused; a refusal needs such a tenure
  const firstWrite = new Map<number, number>()
  for (const r of records) if (r.e === "acq") firstWrite.set(r.token, r.at)
  let lateWritesRejected = 0
  let accepted = 0
  // writes whose outcome went unrecorded (the writer was killed mid-write): each may have committed
  const writing = new Set<number>()
  let unrecorded = 0
  for (const r of records) {
    if (r.e === "writing") {
      if (writing.has(r.pid)) unrecorded++
      writing.add(r.pid)
    } else if (r.e === "write") writing.delete(r.pid)
  }
  unrecorded += writing.size
  for (const r of records) {
    if (r.e !== "write") continue
    const newer = ordered.find((t) => t.token > r.token && (firstWrite.get(t.token) ?? Infinity) < r.before)
    if (r.ok) {
      accepted++
      if (newer !== undefined) v.add("late write", `token ${r.token} accepted after tenure ${newer.token} began`)
    } else {
      if (!ordered.some((t) => t.token > r.token && t.start < r.at)) {
        v.add("refused", `token ${r.token} refused with no newer tenure`)
      } else lateWritesRejected++
    }
  }
  const byHow = (how: string) => ordered.filter((t) => t.end?.how === how).length
  return {
    accepted,
    unrecorded,
    facts: {
      unrecordedWrites: unrecorded,
      tenures: ordered.length,
      "tenures.withLock": ordered.filter((t) => t.via === "withLock").length,
      "tenures.acquire": ordered.filter((t) => t.via === "acquire").length,
      released: byHow("released"),
      lost: byHow("lost"),
      unfinished: ordered.filter((t) => t.end === undefined).length,
      frozenTenures: ordered.filter((t) => frozenDuring(t, t.end?.at ?? Infinity)).length,
      lateWritesRejected,
      maxToken: ordered.length === 0 ? 0 : ordered[ordered.length - 1]!.token,
      overlapsChecked
    },
    violations: v.list
  }
}
