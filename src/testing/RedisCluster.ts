/**
 * A private Redis Cluster on loopback ports, for tests and benchmarks: `masters` masters (3 by default), each with
 * `replicas` replicas (1), made with `redis-cli --cluster create`, ready once every node says `cluster_state:ok` and
 * every replica is in sync with its master, and stopped with its scope. Any node can be killed (its replica takes over after the node timeout) and restarted.
 *
 * @since 0.1.0
 */
import { type ChildProcess, execFile } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Effect from "effect/Effect"
import * as Result from "effect/Result"
import type * as Scope from "effect/Scope"
import { freePort, notInstalled, spawnServer, stop } from "./RedisProcess.js"
import { RedisServerError } from "./RedisServer.js"

/**
 * One node of the cluster.
 *
 * @since 0.1.0
 * @category models
 */
export interface Node {
  readonly port: number
  /** SIGKILLs the process; its data and its view of the cluster (`nodes.conf`) stay on disk for `restart`. */
  readonly kill: Effect.Effect<void>
  /** Starts it again on the same port with the same cluster identity. */
  readonly restart: Effect.Effect<void, RedisServerError>
}

/**
 * A running private cluster.
 *
 * @since 0.1.0
 * @category models
 */
export interface Cluster {
  /** Where an ioredis `Cluster` starts: every node. */
  readonly startupNodes: ReadonlyArray<{ readonly host: string; readonly port: number }>
  readonly nodes: ReadonlyArray<Node>
  /** The ports of the nodes that are masters now (they change after a failover). */
  readonly masters: Effect.Effect<ReadonlyArray<number>, RedisServerError>
  /** Waits until every live node says the cluster is ok and `masters` masters own every slot. */
  readonly ready: Effect.Effect<void, RedisServerError>
}

/**
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** 3 or more (`redis-cli --cluster create`), or 1 without replicas (every slot on one node). Default 3. */
  readonly masters?: number | undefined
  readonly replicas?: number | undefined
  /** `cluster-node-timeout`: how long a master may be silent before its replica takes over. Default 1000 ms. */
  readonly nodeTimeoutMs?: number | undefined
}

const cli = (args: ReadonlyArray<string>) =>
  Effect.callback<string, RedisServerError>((resume) => {
    execFile(process.env.REDIS_CLI_BIN ?? "redis-cli", [...args], { timeout: 30_000 }, (error, stdout, stderr) => {
      if (error === null) resume(Effect.succeed(stdout))
      else {
        resume(
          Effect.fail(
            new RedisServerError({
              reason: `redis-cli ${args.join(" ")} failed: ${stderr || error.message}`,
              cause: error
            })
          )
        )
      }
    })
  })

// A node's own view: "<id> <ip:port@bus> <flags> <master> … <slots>" per line.
const parseNodes = (text: string) =>
  text
    .trim()
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => {
      const [, address, flags, , , , , , ...slots] = line.split(" ")
      return {
        port: Number(address!.split("@")[0]!.split(":").pop()),
        master: flags!.split(",").includes("master") && !flags!.includes("fail"),
        slots: slots.length
      }
    })

/** How long `ready` waits for the cluster (a start, a failover) on a busy machine. */
const readyLimitMs = 60_000

/**
 * Starts the cluster; every node is killed and its directory removed when the scope closes.
 *
 * @since 0.1.0
 * @category constructors
 */
export const start = (options: Options = {}): Effect.Effect<Cluster, RedisServerError, Scope.Scope> =>
  Effect.gen(function*() {
    const masters = options.masters ?? 3
    const replicas = options.replicas ?? 1
    const timeout = options.nodeTimeoutMs ?? 1000
    // One master (a benchmark's baseline) has every slot added by hand: `redis-cli --cluster create` wants three.
    if (
      !Number.isSafeInteger(masters) || !(masters === 1 || masters >= 3) || !Number.isSafeInteger(replicas) ||
      replicas < 0 || (masters === 1 && replicas > 0)
    ) {
      return yield* Effect.fail(
        new RedisServerError({
          reason: "a cluster takes 3 or more masters with 0 or more replicas each, or 1 master without replicas"
        })
      )
    }
    const dir = mkdtempSync(join(tmpdir(), "unique-jobs-cluster-"))
    const children = new Map<number, ChildProcess>()
    yield* Effect.addFinalizer(() =>
      Effect.promise(() => Promise.all([...children.values()].map(stop))).pipe(
        Effect.ensuring(Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
      )
    )
    const launch = (port: number) =>
      Effect.tryPromise({
        try: () =>
          spawnServer(port, dir, [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            `nodes-${port}.conf`,
            "--cluster-node-timeout",
            String(timeout),
            "--dbfilename",
            `dump-${port}.rdb`,
            // A lone node has never learnt its own address from a peer: it would answer CLUSTER SLOTS without it.
            "--cluster-announce-ip",
            "127.0.0.1"
          ]),
        catch: (cause) =>
          new RedisServerError({
            reason:
              (cause as NodeJS.ErrnoException).code === "ENOENT"
                ? notInstalled
                : `redis-server did not start: ${String(cause)}`,
            cause
          })
      }).pipe(
        Effect.map((child) => {
          children.set(port, child)
        })
      )
    const ports: Array<number> = []
    for (let i = 0; i < masters * (1 + replicas); i++) {
      // A port another process took between freePort and the start is tried again with another.
      const port = yield* Effect.gen(function*() {
        const port = yield* Effect.promise(freePort)
        yield* launch(port)
        return port
      }).pipe(Effect.retry({ times: 2, while: (e) => e.reason !== notInstalled }))
      ports.push(port)
    }
    yield* masters === 1
      ? cli(["-p", String(ports[0]), "cluster", "addslotsrange", "0", "16383"])
      : cli([
        "--cluster",
        "create",
        ...ports.map((port) => `127.0.0.1:${port}`),
        "--cluster-replicas",
        String(replicas),
        "--cluster-yes"
      ])
    const kill = (port: number) =>
      Effect.promise(async () => {
        const child = children.get(port)
        if (child !== undefined) await stop(child)
        children.delete(port)
      })
    const mastersNow = Effect.gen(function*() {
      const live = [...children.keys()]
      for (const port of live) {
        const text = yield* Effect.result(cli(["-p", String(port), "cluster", "nodes"]))
        // A master this harness killed counts no more, even before the others have marked it failed.
        if (Result.isSuccess(text)) {
          return parseNodes(text.success)
            .filter((n) => n.master && n.slots > 0 && children.has(n.port))
            .map((n) => n.port)
        }
      }
      return yield* Effect.fail(new RedisServerError({ reason: "no node of the cluster answers" }))
    })
    const ready = Effect.gen(function*() {
      const deadline = Date.now() + readyLimitMs
      for (;;) {
        const states = yield* Effect.forEach([...children.keys()], (port) =>
          Effect.result(cli(["-p", String(port), "cluster", "info"]))
        )
        const ok = states.every((s) => Result.isSuccess(s) && s.success.includes("cluster_state:ok"))
        const owners = ok ? yield* Effect.result(mastersNow) : undefined
        if (ok && owners !== undefined && Result.isSuccess(owners) && owners.success.length === masters) return
        if (Date.now() > deadline) {
          return yield* Effect.fail(
            new RedisServerError({ reason: `the cluster was not ok within ${readyLimitMs / 1000} s` })
          )
        }
        // A timer of its own, not the Clock: a test's TestClock would never move it.
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 100)))
      }
    })
    yield* ready
    // And every replica in sync with its master: one that never synced cannot take over (its data's age is unknown),
    // so a master killed before its replica's first sync (diskless, after Redis' 5 s delay, later on a busy machine)
    // would leave its slots without an owner for good.
    const synced = Effect.gen(function*() {
      const deadline = Date.now() + readyLimitMs
      for (;;) {
        const links = yield* Effect.forEach([...children.keys()], (port) =>
          Effect.result(cli(["-p", String(port), "info", "replication"]))
        )
        if (
          links.every((l) => Result.isSuccess(l) && (!l.success.includes("role:slave") || l.success.includes("master_link_status:up")))
        ) return
        if (Date.now() > deadline) {
          return yield* Effect.fail(
            new RedisServerError({ reason: `the cluster's replicas were not in sync within ${readyLimitMs / 1000} s` })
          )
        }
        yield* Effect.promise(() => new Promise((resolve) => setTimeout(resolve, 100)))
      }
    })
    if (replicas > 0) yield* synced
    return {
      startupNodes: ports.map((port) => ({ host: "127.0.0.1", port })),
      nodes: ports.map((port): Node => ({
        port,
        kill: kill(port),
        restart: Effect.flatMap(kill(port), () => launch(port))
      })),
      masters: mastersNow,
      ready
    }
  })
