/**
 * A command line's mistakes, found before effect/cli parses it: an unknown subcommand or option, a bad number, one
 * argument too many, a missing one. Each is said here in one line naming the word as typed, the nearest real one
 * ("did you mean"), and the command's own usage line (effect/cli would print its whole help page, and name a bad
 * number's type rather than its range).
 *
 * @internal
 */
import type * as CommandSpec from "effect/cli/CommandSpec"
import * as Option from "effect/Option"

/**
 * A command as the check knows it: its name, and either its subcommands or its own flags and arguments (effect/cli's
 * `CommandSpec`) and the range of each of its whole-number options.
 *
 * @internal
 */
export type Node =
  | { readonly _tag: "Parent"; readonly name: string; readonly children: ReadonlyArray<Node> }
  | {
    readonly _tag: "Leaf"
    readonly name: string
    readonly spec: CommandSpec.Spec
    readonly integers: Readonly<Record<string, { readonly min: number; readonly max: number }>>
  }

/**
 * A parent command.
 *
 * @internal
 */
export const parent = (name: string, children: ReadonlyArray<Node>): Node => ({ _tag: "Parent", name, children })

/**
 * A command that runs, with its flags and arguments and the ranges of its whole-number options (by flag, `--limit`).
 *
 * @internal
 */
export const leaf = (
  name: string,
  spec: CommandSpec.Spec,
  integers: Readonly<Record<string, { readonly min: number; readonly max: number }>> = {}
): Node => ({ _tag: "Leaf", name, spec, integers })

/**
 * The optimal string alignment distance: insertions, deletions, substitutions and adjacent transpositions
 * (`--jsno` is one step from `--json`).
 *
 * @internal
 */
export const distance = (a: string, b: string): number => {
  const rows: Array<Array<number>> = []
  for (let i = 0; i <= a.length; i++) {
    const row: Array<number> = [i]
    for (let j = 1; j <= b.length; j++) {
      if (i === 0) {
        row.push(j)
        continue
      }
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let best = Math.min(rows[i - 1]![j]! + 1, row[j - 1]! + 1, rows[i - 1]![j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, rows[i - 2]![j - 2]! + 1)
      row.push(best)
    }
    rows.push(row)
  }
  return rows[a.length]![b.length]!
}

/**
 * The candidate nearest `word`, if one is near enough to be what was meant: a few edits away (one for a short word,
 * up to three for a long one), or a word it begins (`--lim` for `--limit`). Ties go to the first candidate.
 *
 * @internal
 */
export const nearest = (word: string, candidates: ReadonlyArray<string>): Option.Option<string> => {
  let best: { readonly candidate: string; readonly distance: number } | undefined
  for (const candidate of candidates) {
    const d = distance(word.toLowerCase(), candidate.toLowerCase())
    if (best === undefined || d < best.distance) best = { candidate, distance: d }
  }
  if (best === undefined) return Option.none()
  const bare = best.candidate.replace(/^-+/, "")
  const allowed = bare.length <= 4 ? 1 : bare.length <= 8 ? 2 : 3
  if (best.distance <= allowed) return Option.some(best.candidate)
  const prefixed = candidates.find((c) => word.length >= 3 && c.toLowerCase().startsWith(word.toLowerCase()))
  return Option.fromUndefinedOr(prefixed)
}

interface Flag {
  readonly name: string
  readonly value: Option.Option<string>
  /** Whether the command runs without it (it has a default, or is a switch). */
  readonly optional: boolean
}

interface Shape {
  readonly flags: ReadonlyArray<Flag>
  /** The positional arguments, `[X]` when optional. */
  readonly args: ReadonlyArray<{ readonly name: string; readonly optional: boolean }>
  /** The usage after the command's own name, as a line reads it. */
  readonly line: string
}

// A leaf's flags, arguments and usage line, read from effect/cli's spec of it: the command's own flags (not the
// global ones), a choice's value as its choices (`legacy | modern`), a repeated one's with `…`.
const shapeOf = (spec: CommandSpec.Spec): Shape => {
  const flags: Array<Flag> = []
  const words: Array<string> = []
  for (const flag of spec.flags) {
    if (flag.scope._tag !== "Local" || flag.hidden) continue
    const name = `--${flag.name}`
    const value = flag.type._tag === "Boolean"
      ? Option.none()
      : Option.some(flag.type._tag === "Choice" ? flag.type.values.join(" | ") : flag.metavar ?? flag.typeName)
    const optional = !flag.required || Option.isNone(value)
    flags.push({ name, value, optional })
    const word = Option.match(value, { onNone: () => name, onSome: (v) => `${name} ${v}` })
    words.push(flag.variadic !== undefined ? `[${word}…]` : optional ? `[${word}]` : word)
  }
  const args = spec.arguments.map((a) => ({ name: `<${a.name}>`, optional: !a.required }))
  // Arguments first, as they are usually written.
  const positional = args.map((a) => (a.optional ? `[${a.name}]` : a.name))
  return { flags, args, line: [...positional, ...words].join(" ") }
}

/** effect/cli's own options, taken by every command: those that take a value, and those that do not. */
const builtInValued = ["--log-level", "--completions"]

/**
 * The values `--log-level` takes (effect/cli takes `warn` too: it is said here as `warning`, the name listed).
 *
 * @internal
 */
export const logLevels = ["all", "trace", "debug", "info", "warning", "error", "fatal", "none"]
const builtInFlags = ["--help", "-h", "--version", "-v", "--wizard"]

/**
 * The usage line of the command at `path` (its names from the top), for a mistake's second line.
 *
 * @internal
 */
export const usageLine = (node: Node, path: ReadonlyArray<string>): string =>
  node._tag === "Parent"
    ? `usage: ${path.join(" ")} <${node.children.map((c) => c.name).join(" | ")}> … (see ${path.join(" ")} --help)`
    : `usage: ${path.join(" ")} ${shapeOf(node.spec).line}`.trimEnd()

/**
 * The mistake in `args` (the words after the executable, up to a `--`), if any: the message's lines, the first the
 * mistake and what was probably meant, the last the command's usage. None where effect/cli is left to answer (help,
 * the version, a command line it parses).
 *
 * @internal
 */
export const check = (root: Node, args: ReadonlyArray<string>): Option.Option<ReadonlyArray<string>> => {
  const end = args.indexOf("--")
  const words = end === -1 ? args : args.slice(0, end)
  if (words.some((w) => ["--help", "-h", "--version", "-v"].includes(w.toLowerCase()))) return Option.none()
  let node = root
  const path = [root.name]
  let positional = 0
  const seen = new Set<string>()
  const say = (line: string) => Option.some([line, usageLine(node, path)])
  for (let i = 0; i < words.length; i++) {
    const word = words[i]!
    const [flagName, inline] = word.startsWith("--") && word.includes("=")
      ? [word.slice(0, word.indexOf("=")), word.slice(word.indexOf("=") + 1)]
      : [word, undefined]
    const flag = flagName.toLowerCase()
    if (builtInValued.includes(flag)) {
      const value = inline ?? words[i + 1]
      if (inline === undefined) i++
      if (flag === "--log-level" && (value === undefined || !logLevels.includes(value.toLowerCase()))) {
        return Option.some([
          value === undefined
            ? `--log-level needs a level: one of ${logLevels.join(", ")}`
            : `--log-level ${value} is not a level${
              Option.match(nearest(value, logLevels), { onNone: () => "", onSome: (m) => ` (did you mean ${m}?)` })
            }: use one of ${logLevels.join(", ")}`
        ])
      }
      continue
    }
    if (builtInFlags.includes(flag)) continue
    if (node._tag === "Parent") {
      const names = node.children.map((c) => c.name)
      if (word.startsWith("-")) {
        return say(
          `unknown option ${flagName} for ${path.join(" ")}: it takes a command first, one of ${names.join(", ")}`
        )
      }
      const child = node.children.find((c) => c.name === word.toLowerCase())
      if (child === undefined) {
        const meant = nearest(word, names)
        return say(
          `unknown command \`${word}\` for ${path.join(" ")}${
            Option.match(meant, { onNone: () => "", onSome: (m) => `: did you mean \`${m}\`?` })
          } (its commands: ${names.join(", ")})`
        )
      }
      node = child
      path.push(child.name)
      continue
    }
    const shape = shapeOf(node.spec)
    if (word.startsWith("--")) {
      const known = shape.flags.find((f) => f.name === flag)
      if (known === undefined) {
        const meant = nearest(flag, shape.flags.map((f) => f.name))
        return say(
          `unknown option ${flagName} for ${path.join(" ")}${
            Option.match(meant, {
              onNone: () => ` (its options: ${shape.flags.map((f) => f.name).join(", ")})`,
              onSome: (m) => `: did you mean ${m}?`
            })
          }`
        )
      }
      seen.add(known.name)
      if (Option.isNone(known.value)) continue
      const value = inline ?? words[i + 1]
      if (inline === undefined) i++
      const range = node.integers[known.name]
      if (range !== undefined) {
        const wanted = `${known.name} must be a whole number from ${range.min} to ${range.max}`
        if (value === undefined) return say(`${wanted}; none was given`)
        const n = /^-?\d+$/.test(value.trim()) ? Number(value) : Number.NaN
        if (!Number.isSafeInteger(n) || n < range.min || n > range.max) return say(`${wanted}, got ${value}`)
      } else if (value === undefined) {
        return say(`${known.name} needs a value`)
      } else {
        // A choice (`legacy | modern`): said with the one meant.
        const choices = Option.getOrElse(known.value, () => "").split(" | ")
        if (choices.length > 1 && !choices.includes(value)) {
          return say(`${known.name} ${value} is not one of ${choices.join(", ")}${
            Option.match(nearest(value, choices), { onNone: () => "", onSome: (m) => `: did you mean ${m}?` })
          }`)
        }
      }
      continue
    }
    // A word that starts with a single '-' (`-x`) where an argument goes: no argument starts so, it is a mistyped
    // option (effect/cli would take it for a short flag of its own, and name none of ours).
    const slot = shape.args[positional]
    if (word.startsWith("-") && slot !== undefined) {
      const what = slot.name.replace(/^<|>$/g, "").toLowerCase()
      return Option.some([`unknown option ${word} (see ${path.join(" ")} --help); a ${what} never starts with '-'`])
    }
    positional++
    if (positional > shape.args.length) {
      const takes = shape.args.length === 0
        ? "takes no argument"
        : `takes ${shape.args.map((a) => (a.optional ? `[${a.name}]` : a.name)).join(" ")}`
      return say(`unexpected argument ${JSON.stringify(word)}: ${path.join(" ")} ${takes}`)
    }
  }
  // What the command cannot run without, said as the others are (effect/cli's "Missing required flag: --args" names
  // neither the command nor its usage). `--wizard` asks for each at a terminal instead.
  if (node._tag === "Leaf" && !words.some((w) => w.toLowerCase() === "--wizard")) {
    const shape = shapeOf(node.spec)
    const flags = shape.flags.filter((f) => !f.optional && !seen.has(f.name))
      .map((f) => Option.match(f.value, { onNone: () => f.name, onSome: (v) => `${f.name} ${v}` }))
    const args = shape.args.filter((a) => !a.optional).slice(positional).map((a) => a.name)
    const missing = [...flags, ...args]
    if (missing.length > 0) return say(`${path.join(" ")} needs ${missing.join(" and ")}`)
  }
  return Option.none()
}
