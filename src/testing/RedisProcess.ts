/**
 * Private `redis-server` processes on loopback ports, for the test harnesses (`RedisServer`, `RedisCluster`): a free
 * port, a start that waits for the first PONG, a stop.
 *
 * @internal
 */
import { type ChildProcess, spawn } from "node:child_process"
import * as Net from "node:net"

export const serverBin = (): string => process.env.REDIS_SERVER_BIN ?? "redis-server"
export const notInstalled = `${serverBin()} was not found`

export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const server = Net.createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resolve(port))
    })
  })

const ping = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = Net.connect({ port, host: "127.0.0.1" })
    const done = (ok: boolean) => {
      socket.destroy()
      resolve(ok)
    }
    socket.setTimeout(500, () => done(false))
    socket.once("error", () => done(false))
    socket.once("connect", () => socket.write("PING\r\n"))
    socket.once("data", (data) => done(data.toString().startsWith("+PONG")))
  })

/** How long a starting (or restarting) redis-server may take to answer a PING. */
const startupLimitMs = 30_000

export const spawnServer = async (
  port: number,
  dir: string,
  extra: ReadonlyArray<string> = []
): Promise<ChildProcess> => {
  const child = spawn(
    serverBin(),
    [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      dir,
      "--loglevel",
      "warning",
      ...extra
    ],
    { stdio: "ignore" }
  )
  let gone = false
  const failed = new Promise<never>((_, reject) => {
    child.once("error", (error) => {
      gone = true
      reject(error)
    })
    child.once("exit", (code) => {
      gone = true
      reject(new Error(`redis-server exited with code ${code}`))
    })
  })
  // It answers within milliseconds when the machine is idle, and this returns then; the limit only bounds a start on a
  // machine busy with other work (another copy of the test suite, a CI neighbour), so it is generous.
  const ready = (async () => {
    const deadline = Date.now() + startupLimitMs
    while (!gone && Date.now() < deadline) {
      if (await ping(port)) return child
      await new Promise((r) => setTimeout(r, 25))
    }
    throw new Error(`redis-server did not answer on port ${port} within ${startupLimitMs / 1000} seconds`)
  })()
  try {
    return await Promise.race([ready, failed])
  } catch (error) {
    child.kill("SIGKILL")
    throw error
  }
}

export const stop = (child: ChildProcess): Promise<void> =>
  new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve()
    child.once("exit", () => resolve())
    child.kill("SIGKILL")
  })
