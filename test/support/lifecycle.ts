/**
 * What the lifecycle properties share: the lock types, a fresh memory store on a TestClock of its own per case, and
 * the commands each store gets.
 */
import type * as Context from "effect/Context"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Scope from "effect/Scope"
import * as TestClock from "effect/testing/TestClock"
import * as LockType from "../../src/LockType.js"
import * as Memory from "../../src/store/Memory.js"
import * as Model from "./model.js"
import { uniquePrefix } from "./redis.js"

export const lockTypes: ReadonlyArray<LockType.LockType> = [
  "until_executing",
  "until_executed",
  "until_expired",
  "while_executing",
  "while_executing_reject",
  "until_and_while_executing"
]

/** A fresh memory store on a TestClock of its own. */
const memorySystem = async (config: Model.Config, scopes: Array<Scope.Closeable>) => {
  const scope = Effect.runSync(Scope.make())
  scopes.push(scope)
  const services = await Effect.runPromise(Scope.provide(Layer.build(TestClock.layer()), scope))
  return new Model.System(
    config,
    Memory.make(),
    services as Context.Context<never>,
    (ms) => TestClock.adjust(ms),
    uniquePrefix("pm")
  )
}

const closeAll = (scopes: Array<Scope.Closeable>) =>
  Effect.runPromise(Effect.forEach(scopes.splice(0), (s) => Scope.close(s, Exit.void), { discard: true }))

/** Memory systems for one property: each case's TestClock scope closes when the next case starts, the last after. */
export const withMemory = <A>(use: (memory: (config: Model.Config) => Promise<Model.System>) => Promise<A>) => {
  const scopes: Array<Scope.Closeable> = []
  return Effect.acquireUseRelease(
    Effect.succeed((config: Model.Config) => closeAll(scopes).then(() => memorySystem(config, scopes))),
    (memory) => Effect.promise(() => use(memory)),
    () => Effect.promise(() => closeAll(scopes))
  )
}

/**
 * Redelivered and stalled workers change what run locks do: on the memory store, the types that hold one get longer
 * sequences (fast-check's "medium": up to 30 commands, against "small"'s 10), where those paths come up often.
 */
export const commandsFor = (lock: LockType.LockType, maxCommands: number, store: "memory" | "redis") =>
  Model.commandsArbitrary(maxCommands, {
    runLock: LockType.phases(lock).run,
    size: store === "memory" ? "medium" : "small",
    virtualTime: store === "memory"
  })

