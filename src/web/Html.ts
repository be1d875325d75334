/**
 * HTML built so that nothing read from Redis can become markup: every value put into an `html` template is escaped,
 * unless it is itself `Html` (made by this module from escaped parts).
 *
 * @internal
 */

/** Markup known to be safe: made only by `html` and `join`. @internal */
export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value
  }
}

const entities: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
  "`": "&#96;"
}

/** Text and attribute values alike: the five HTML specials and the backtick. @internal */
export const escape = (text: string): string => text.replace(/[&<>"'`]/g, (c) => entities[c]!)

/** A value in a template: Html as it is, an array joined, nothing for null, undefined and false, else text. */
export type Part = Html | string | number | boolean | null | undefined | ReadonlyArray<Part>

const render = (part: Part): string => {
  if (part instanceof Html) return part.value
  if (part === null || part === undefined || part === false) return ""
  if (Array.isArray(part)) return part.map(render).join("")
  return escape(String(part))
}

/** The template tag: the literal parts are the page's own markup, every interpolation is escaped. @internal */
export const html = (strings: TemplateStringsArray, ...parts: ReadonlyArray<Part>): Html => {
  let out = strings[0]!
  for (let i = 0; i < parts.length; i++) out += render(parts[i]!) + strings[i + 1]!
  return new Html(out)
}
