/**
 * An in-memory model of one queue as the contract states it (docs/contract.md
 * §3): states, attempts, claim order, fencing tokens, leases, keys, expiry,
 * retry and backoff, release, cancel, requeue. Written from the contract, not
 * from the engines' SQL, so the model-based test compares two independent
 * readings of it.
 */

export interface ModelJob {
  readonly id: number
  state: "pending" | "claimed" | "dead"
  readonly priority: number
  runAt: number
  attempts: number
  readonly maxAttempts: number
  readonly visibilityMs: number
  readonly backoffMs: number
  expiresAt: number | null
  claimedUntil: number | null
  token: number
  readonly key: string | null
  lastError: string | null
}

export interface Fence {
  readonly id: number
  readonly token: number
}

export interface EnqueueSpec {
  readonly priority: number
  readonly delayMs: number
  readonly maxAttempts: number
  readonly expiresMs: number | null
  readonly key: string | null
}

export const visibilityMs = 2_000
export const backoffBaseMs = 1_000
const hourMs = 3_600_000

export const backoff = (attempts: number) => Math.min(backoffBaseMs * 2 ** (attempts - 1), hourMs)

export class QueueModel {
  readonly jobs = new Map<number, ModelJob>()

  private expired(job: ModelJob, now: number) {
    return job.expiresAt !== null && job.expiresAt <= now
  }

  /**
   * Whether a job holds its key: pending and not expired, or claimed unless
   * its lease passed and it expired or spent its attempts (a claim in flight
   * keeps its key until its lease ends; a lapsed one on its last attempt
   * could never run again).
   */
  private live(job: ModelJob, now: number) {
    if (job.state === "pending") return !this.expired(job, now)
    if (job.state === "claimed") {
      const lapsed = job.claimedUntil !== null && now >= job.claimedUntil
      return !(lapsed && (this.expired(job, now) || job.attempts >= job.maxAttempts))
    }
    return false
  }

  /**
   * The live holder of a key; a holder no longer live is moved to dead by the enqueue wanting it (`"expired"`,
   * or `"max attempts exceeded"` for a lapsed claim on its last attempt).
   */
  holder(key: string, now: number): ModelJob | undefined {
    for (const job of this.jobs.values()) {
      if (job.key !== key || job.state === "dead") continue
      if (this.live(job, now)) return job
      job.lastError = this.expired(job, now) ? "expired" : "max attempts exceeded"
      job.state = "dead"
      job.claimedUntil = null
    }
    return undefined
  }

  /** `undefined`: a new row is written (its id comes from the engine). */
  enqueue(spec: EnqueueSpec, now: number): { existing: number } | { invalid: string } | undefined {
    // a job that would expire before it is ever due is refused (InvalidOptions)
    if (spec.expiresMs !== null && spec.expiresMs <= spec.delayMs) return { invalid: "expires" }
    if (spec.key !== null) {
      const holder = this.holder(spec.key, now)
      if (holder !== undefined) return { existing: holder.id }
    }
    return undefined
  }

  insert(id: number, spec: EnqueueSpec, now: number) {
    this.jobs.set(id, {
      id,
      state: "pending",
      priority: spec.priority,
      runAt: now + spec.delayMs,
      attempts: 0,
      maxAttempts: spec.maxAttempts,
      visibilityMs,
      backoffMs: backoffBaseMs,
      expiresAt: spec.expiresMs === null ? null : now + spec.expiresMs,
      claimedUntil: null,
      token: 0,
      key: spec.key,
      lastError: null
    })
  }

  private claimable(job: ModelJob, now: number) {
    return (job.state === "pending" && job.runAt <= now) ||
      (job.state === "claimed" && job.claimedUntil !== null && now >= job.claimedUntil)
  }

  /** The claim: candidates in order; an expired or spent one dies on the way. */
  claim(now: number): ModelJob | undefined {
    const candidates = [...this.jobs.values()].filter((j) => this.claimable(j, now)).sort((a, b) =>
      b.priority - a.priority || a.runAt - b.runAt || a.id - b.id
    )
    for (const job of candidates) {
      if (this.expired(job, now) || job.attempts >= job.maxAttempts) {
        job.lastError = this.expired(job, now) ? "expired" : "max attempts exceeded"
        job.state = "dead"
        job.claimedUntil = null
        continue
      }
      job.state = "claimed"
      job.attempts++
      job.token++
      job.claimedUntil = now + job.visibilityMs
      return job
    }
    return undefined
  }

  private owned(fence: Fence) {
    const job = this.jobs.get(fence.id)
    return job !== undefined && job.state === "claimed" && job.token === fence.token ? job : undefined
  }

  ack(fence: Fence) {
    const job = this.owned(fence)
    if (job !== undefined) this.jobs.delete(job.id)
    return job !== undefined
  }

  /** `attemptsAtClaim`: the handle's view (retry decides on the attempts its claim saw). */
  retry(fence: Fence, attemptsAtClaim: number, maxAttempts: number, delayMs: number | null, now: number) {
    const job = this.owned(fence)
    if (job === undefined) return "lost" as const
    job.claimedUntil = null
    job.lastError = "model retry"
    if (attemptsAtClaim >= maxAttempts) {
      job.state = "dead"
      return "dead" as const
    }
    job.state = "pending"
    job.runAt = now + (delayMs ?? backoff(attemptsAtClaim))
    return "retried" as const
  }

  fail(fence: Fence) {
    const job = this.owned(fence)
    if (job === undefined) return false
    job.state = "dead"
    job.claimedUntil = null
    return true
  }

  heartbeat(fence: Fence, now: number) {
    const job = this.owned(fence)
    if (job !== undefined) job.claimedUntil = now + job.visibilityMs
    return job !== undefined
  }

  release(fence: Fence) {
    const job = this.owned(fence)
    if (job === undefined) return false
    job.state = "pending"
    job.attempts = Math.max(job.attempts - 1, 0)
    job.claimedUntil = null
    return true
  }

  cancel(id: number) {
    const job = this.jobs.get(id)
    if (job === undefined || job.state === "dead") return false
    this.jobs.delete(id)
    return true
  }

  /** Pending now, attempts 0, expiry cleared; refused while another live job holds its key. */
  requeueDead(id: number, now: number) {
    const job = this.jobs.get(id)
    if (job === undefined || job.state !== "dead") return false
    if (job.key !== null && [...this.jobs.values()].some((j) => j !== job && j.key === job.key && j.state !== "dead")) {
      return false
    }
    job.state = "pending"
    job.runAt = now
    job.attempts = 0
    job.expiresAt = null
    return true
  }

  counts() {
    const count = (state: ModelJob["state"]) => [...this.jobs.values()].filter((j) => j.state === state).length
    return { waiting: count("pending"), claimed: count("claimed"), dead: count("dead") }
  }
}
