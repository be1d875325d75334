// A free loopback port for a private redis-server of a script (check:docs, check:package): the OS picks one, the
// listener closes, and redis-server then binds it.
import { createServer } from "node:net"

export const freePort = () =>
  new Promise((resolve, reject) => {
    const server = createServer()
    server.once("error", reject)
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
  })
