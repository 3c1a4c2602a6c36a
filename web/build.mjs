// Builds the admin page into ../server/admin/ui/dist, which is committed and
// embedded by the Go binary (so building the provider needs no Node).
// Deterministic: the same sources give byte-identical output.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, statSync } from "node:fs";

const out = "../server/admin/ui/dist";
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: "src/main.ts" },
  bundle: true,
  minify: true,
  format: "iife",
  target: ["es2022"],
  outdir: out,
  legalComments: "none",
  logLevel: "warning",
  charset: "utf8",
});
copyFileSync("index.html", `${out}/index.html`);
for (const f of ["index.html", "app.js", "app.css"]) {
  console.log(`${f.padEnd(11)} ${(statSync(`${out}/${f}`).size / 1024).toFixed(1)} KiB`);
}
