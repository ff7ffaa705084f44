// The review console's first render of each page with a large store: ROTE_SCALE_PENDING pending
// revisions (default 10,000) and ROTE_SCALE_RUNS finished runs (default 100,000), written by
// bench/console/console_seed through the store's API. Each page's time from navigation to the
// rendered page is printed, not asserted (docs/review.md, "Review console").
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const { createRequire } = require('node:module');
const { startServer, api, blueprintFromDoc } = require('./harness.cjs');

const { chromium } = createRequire(path.join(process.env.ROTE_WEB_MODULES, 'noop.js'))('playwright-core');
const PENDING = Number(process.env.ROTE_SCALE_PENDING || 10000);
const RUNS = Number(process.env.ROTE_SCALE_RUNS || 100000);
const CAROL = 'carol-token-0123456789abcdef';
const ALICE = 'alice-token-0123456789abcdef';
const KEYS = `${ALICE} alice submit,review\n${CAROL} carol review\n`;

let server;
let browser;
let page;
let loads = 0;

before(async () => {
  const first = await startServer({ keys: KEYS });
  const titles = blueprintFromDoc('titles');
  await api(first, ALICE, 'POST', 'blueprints', { source: titles.source, lockfile: titles.lockfile, filename: 'titles.lua' });
  await first.stop({ keep: true });
  const seeded = execFileSync(process.env.ROTE_SEED_BINARY, ['--data', first.data, '--pending', String(PENDING), '--runs', String(RUNS)], { encoding: 'utf8' });
  console.log('seeded: ' + seeded.trim());
  server = await startServer({ keys: KEYS, dataDir: first.data });
  server.alsoRemove = first.dir;
  browser = await chromium.launch({ executablePath: process.env.ROTE_CHROMIUM || '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(server.url + '/#/signin');
  await page.evaluate((t) => sessionStorage.setItem('rote.token', t), CAROL);
});

after(async () => {
  if (browser) await browser.close();
  if (server) {
    await server.stop();
    require('node:fs').rmSync(server.alsoRemove, { recursive: true, force: true });
  }
});

// Loads the page fresh at `hash` and reports the time from navigation to the rendered page.
async function firstRender(name, hash, token = CAROL) {
  await page.evaluate((t) => sessionStorage.setItem('rote.token', t), token);
  await page.goto(server.url + '/?load=' + ++loads + hash);
  await page.waitForSelector('body[data-ready="yes"]');
  const ms = await page.evaluate(() => Number(document.body.dataset.loadedMs));
  console.log(`first render of ${name} (${PENDING} pending revisions, ${RUNS} runs): ${ms} ms`);
  await page.screenshot({ path: path.join(process.env.ROTE_SCREENSHOTS, 'scale_' + name + '.png') });
  assert.equal(await page.$('main .error'), null, await page.textContent('main'));
}

test('every page renders its first page of a large store', async () => {
  await firstRender('queue', '#/queue');
  assert.equal((await page.$$('#queue tbody tr')).length, 100);
  assert.ok(await page.$('#next-page'));
  const first = await page.getAttribute('#queue tbody tr a', 'href');
  await firstRender('revision', first);
  await page.waitForSelector('#history table');
  await firstRender('runs', '#/runs', ALICE);
  assert.equal((await page.$$('#runs tbody tr')).length, 100);
  await firstRender('run', '#/run/' + RUNS, ALICE);
  assert.match(await page.textContent('table.steps'), /"ada lovelace"/);
  await firstRender('audit', '#/audit');
  await firstRender('generations', '#/generations');
  // The first page after the server starts also reads the store's pages from disk; once more
  // with them cached.
  await firstRender('queue_again', '#/queue');
});
