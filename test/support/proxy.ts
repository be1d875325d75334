/**
 * A TCP proxy on a free loopback port in front of a Redis, for cutting one client off: `cut` stops forwarding in
 * both directions and keeps the sockets open, as a network partition does (no FIN, no RST: the client only sees
 * silence until its own timeouts fire). `stall` holds what each side sends until `resume`, as a Redis busy in a long
 * script does: nothing is lost, every answer comes late. `lose` loses the next call's answer and closes the
 * connections, as a CLIENT KILL or a failover right after a call was written does: the call ran, or never reached Redis.
 */
import * as Net from "node:net"
import * as Effect from "effect/Effect"
import type * as Scope from "effect/Scope"

export interface Proxy {
  readonly url: string
  /** Stops forwarding; everything sent afterwards is dropped. */
  readonly cut: Effect.Effect<void>
  /** Holds everything sent in either direction until `resume`. */
  readonly stall: Effect.Effect<void>
  /** Sends what was held, in order, and forwards again. */
  readonly resume: Effect.Effect<void>
  /** Closes every connection it carries, as a restarted Redis or a failover does; new ones are carried as before. */
  readonly drop: Effect.Effect<void>
  /**
   * The next data a client sends is lost on its way: dropped before Redis reads it (`"request"`: the call never ran),
   * or carried to Redis with its answer dropped (`"reply"`: the call ran). Then every connection is closed (`drop`).
   */
  readonly lose: (what: "request" | "reply") => Effect.Effect<void>
}

export const start = (target: string): Effect.Effect<Proxy, never, Scope.Scope> =>
  Effect.gen(function*() {
    const upstream = new URL(target)
    const sockets = new Set<Net.Socket>()
    const state: { cut: boolean; stalled: boolean; lose: "request" | "reply" | "replying" | undefined } = {
      cut: false,
      stalled: false,
      lose: undefined
    }
    const dropAll = () => {
      for (const socket of sockets) socket.destroy()
    }
    const held: Array<() => void> = []
    const forward = (to: Net.Socket, data: Buffer) => {
      if (state.cut) return
      if (state.stalled) held.push(() => to.write(data))
      else to.write(data)
    }
    const server = Net.createServer((client) => {
      const redis = Net.connect({ host: upstream.hostname, port: Number(upstream.port) })
      for (const socket of [client, redis]) {
        sockets.add(socket)
        socket.on("error", () => socket.destroy())
        socket.on("close", () => sockets.delete(socket))
      }
      client.on("data", (data) => {
        if (state.lose === "request") {
          state.lose = undefined
          return dropAll()
        }
        if (state.lose === "reply") state.lose = "replying"
        forward(redis, data)
      })
      redis.on("data", (data) => {
        if (state.lose === "replying") {
          state.lose = undefined
          return dropAll()
        }
        forward(client, data)
      })
      client.on("close", () => redis.destroy())
      redis.on("close", () => client.destroy())
    })
    const port = yield* Effect.acquireRelease(
      Effect.callback<number>((resume) => {
        server.listen(0, "127.0.0.1", () => {
          const address = server.address()
          resume(Effect.succeed(typeof address === "object" && address !== null ? address.port : 0))
        })
      }),
      () =>
        Effect.callback<void>((resume) => {
          for (const socket of sockets) socket.destroy()
          server.close(() => resume(Effect.void))
        })
    )
    return {
      url: `redis://127.0.0.1:${port}`,
      cut: Effect.sync(() => {
        state.cut = true
      }),
      stall: Effect.sync(() => {
        state.stalled = true
      }),
      resume: Effect.sync(() => {
        state.stalled = false
        for (const send of held.splice(0)) send()
      }),
      drop: Effect.sync(dropAll),
      lose: (what) =>
        Effect.sync(() => {
          state.lose = what
        })
    }
  })
