#!/usr/bin/env node
/**
 * The `unique-jobs` executable.
 *
 * @since 0.1.0
 */
import * as NodeContext from "@effect/platform-node/NodeContext"
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import * as Console from "effect/Console"
import * as Effect from "effect/Effect"
import * as Cli from "../Cli.js"

// A failure is one line on stderr and exit code 1. The command line's own errors (an unknown option, a missing
// argument) are printed by @effect/cli before they reach here.
Cli.run(process.argv).pipe(
  Effect.catchAll((error) =>
    Effect.zipRight(
      error instanceof Cli.CliError ? Console.error(`unique-jobs: ${error.message}`) : Effect.void,
      Effect.sync(() => {
        process.exitCode = 1
      })
    )
  ),
  Effect.provide(NodeContext.layer),
  NodeRuntime.runMain({ disableErrorReporting: true })
)
