import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { Redis } from "../src/index.js"
import { RedisServer } from "../src/testing.js"

// A RedisService over a private redis-server, stopped with the layer.
const RedisLive = Layer.unwrapScoped(Effect.map(RedisServer.start, (server) => Redis.layer({ url: server.url })))

export { RedisLive }
