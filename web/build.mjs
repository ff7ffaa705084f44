// Bundles the console: src/main.ts (with highlight.js and jsdiff) into console.js, and copies
// static/ beside it. `npm run build` writes dist/ here; the CMake build passes the build tree's
// node_modules and output folder:  node build.mjs --modules DIR --out DIR
import { createRequire } from 'node:module';
import { cpSync, mkdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const arg = (name, fallback) => {
  const i = args.indexOf(name);
  return i >= 0 && i + 1 < args.length ? resolve(args[i + 1]) : fallback;
};
const modules = arg('--modules', join(here, 'node_modules'));
const out = arg('--out', join(here, 'dist'));
const esbuild = createRequire(join(modules, 'noop.js'))('esbuild');

mkdirSync(out, { recursive: true });
await esbuild.build({
  entryPoints: [join(here, 'src', 'main.ts')],
  bundle: true,
  minify: true,
  format: 'iife',
  target: ['es2020'],
  outfile: join(out, 'console.js'),
  nodePaths: [modules],
  legalComments: 'none',
  logLevel: 'warning',
});
cpSync(join(here, 'static'), out, { recursive: true });
