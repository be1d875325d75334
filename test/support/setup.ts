/**
 * Run before every test file (vitest `setupFiles`). Under `npm run mutate` a failing property is a killed mutant:
 * the counterexample fast-check would shrink it to is of no use there, and shrinking a property over real BullMQ or
 * Redis can take minutes. So a mutation run ends each property at its first failure.
 */
import * as fc from "fast-check"

if (process.env.UNIQUE_JOBS_MUTATION === "1") fc.configureGlobal({ ...fc.readConfigureGlobal(), endOnFailure: true })
