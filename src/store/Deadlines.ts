/**
 * Per-call deadlines for the ioredis store, without a timer per call.
 *
 * @internal
 */

/** A call waiting for its reply or its deadline, whichever comes first. @internal */
export interface Pending {
  /** Whether the call has its outcome already: a reply, or its deadline. */
  readonly settled: boolean
  /** True the first time: the caller settles the call; false when the deadline (or a reply) came first. */
  settle(): boolean
}

/**
 * Per-call deadlines without a timer per call. Every call waits the same time, so deadlines come in the order the
 * calls were made: a FIFO queue, and one timer for the oldest unsettled call. Replies on one connection come back
 * in order, so settled calls leave from the head and the queue stays as long as the calls in flight; the timer
 * fires about once per timeout while calls keep coming, and is cleared when none is left.
 *
 * @internal
 */
export const makeDeadlines = (timeoutMs: number) => {
  let queue: Array<Entry> = []
  let head = 0
  let timer: ReturnType<typeof setTimeout> | undefined

  const drop = () => {
    while (head < queue.length && queue[head]!.settled) head++
    if (head === queue.length) {
      queue = []
      head = 0
      if (timer !== undefined) {
        clearTimeout(timer)
        timer = undefined
      }
    } else if (head > 1024 && head * 2 > queue.length) {
      queue = queue.slice(head)
      head = 0
    }
  }

  class Entry implements Pending {
    settled = false
    constructor(readonly deadline: number, public onTimeout: (() => void) | undefined) {}
    settle(): boolean {
      if (this.settled) return false
      this.settled = true
      this.onTimeout = undefined
      if (queue[head] === this) drop()
      return true
    }
  }

  const sweep = () => {
    timer = undefined
    const now = Date.now()
    while (head < queue.length) {
      const entry = queue[head]!
      if (!entry.settled) {
        if (entry.deadline > now) break
        const onTimeout = entry.onTimeout!
        entry.settled = true
        entry.onTimeout = undefined
        onTimeout()
      }
      head++
    }
    drop()
    arm()
  }

  const arm = () => {
    if (timer === undefined && head < queue.length) {
      timer = setTimeout(sweep, Math.max(0, queue[head]!.deadline - Date.now()))
    }
  }

  return {
    /** Starts a call's clock; `onTimeout` runs if it is not settled within the timeout. */
    add: (onTimeout: () => void): Pending => {
      const entry = new Entry(Date.now() + timeoutMs, onTimeout)
      queue.push(entry)
      arm()
      return entry
    }
  }
}
