// The documentation site's VitePress config. `npm run docs` (scripts/docs-site.mjs) stages the README, the manual
// (docs/), the changelog, the examples and TypeDoc's API pages under .site/src, writes sidebar.mjs beside
// this file, and builds the site into docs-site/.
import { defineConfig } from "vitepress"
import { api, manual } from "./sidebar.mjs"

// GitHub's heading anchors: lower case, punctuation dropped (letters, digits, spaces, _ and - kept), spaces as "-".
const githubSlug = (heading: string): string =>
  heading.trim().toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc}\s-]/gu, "").replace(/\s/g, "-")

export default defineConfig({
  title: "effect-unique-jobs",
  description: "Unique-job locks for any job queue, on Effect and Redis",
  // Pages link each other as .md files (they read the same on GitHub and in the tarball); VitePress maps them.
  cleanUrls: false,
  lastUpdated: false,
  // A dead link fails the build (scripts/docs-site.mjs also walks the built HTML for every local link and anchor).
  ignoreDeadLinks: false,
  markdown: {
    theme: { light: "github-light", dark: "github-dark" },
    // Anchors as GitHub makes them (the pages' links are written for GitHub and checked by check:links).
    anchor: { slugify: githubSlug }
  },
  themeConfig: {
    nav: [
      { text: "Getting started", link: "/docs/getting-started" },
      { text: "Manual", link: "/docs/" },
      { text: "BullMQ", link: "/docs/bullmq" },
      { text: "API", link: "/api/" },
      { text: "Changelog", link: "/CHANGELOG" }
    ],
    sidebar: {
      "/api/": [{ text: "API reference", link: "/api/", items: api }],
      "/": manual
    },
    search: { provider: "local" },
    outline: { level: [2, 3] }
  }
})
