// A TypeDoc plugin for `npm run docs` (typedoc.json names it): typedoc-plugin-markdown's "module" router with one
// change. The plugin's router reserves a file name for every reflection that could have a page, also the ones the
// modules strategy only renders inside their namespace's page (interfaces, types, functions, variables). Each
// `Options` interface of a namespace before it (Digest.Options, History.Options, …) took `namespaces/options.md` or
// `options-N.md`, so the `Options` namespace, whose page is written, got `Options-3.md`. Here only a page that is
// written takes a name.
import { ReflectionKind } from "typedoc"
import { ModuleRouter } from "typedoc-plugin-markdown"

const written = ReflectionKind.Module | ReflectionKind.Namespace | ReflectionKind.Document

class PagesOnlyModuleRouter extends ModuleRouter {
  shouldWritePage(reflection) {
    return reflection.kindOf(written) && super.shouldWritePage(reflection)
  }
}

/** @param {import("typedoc").Application} app */
export const load = (app) => {
  app.renderer.defineRouter("module-pages-only", PagesOnlyModuleRouter)
}
