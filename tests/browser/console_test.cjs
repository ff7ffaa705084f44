// The review console in a real browser: Playwright (playwright-core) drives Debian's chromium,
// headless, against a real `rote serve` on loopback with a temporary data directory, a key file
// of three principals and the tiny fixture model. Every scenario of docs/review.md's "Review
// console" section, each page's screenshot written to ROTE_SCREENSHOTS.
//
// Environment (set by tests/browser/CMakeLists.txt): ROTE_BINARY, ROTE_WEB_MODULES (the
// build tree's node_modules), ROTE_FIXTURES_DIR, ROTE_SCREENSHOTS, ROTE_CHROMIUM.
'use strict';
const { test, before, after } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { createRequire } = require('node:module');
const { startServer, api, waitRun, blueprintFromDoc } = require('./harness.cjs');

const modules = process.env.ROTE_WEB_MODULES;
const { chromium } = createRequire(path.join(modules, 'noop.js'))('playwright-core');
const shots = process.env.ROTE_SCREENSHOTS || path.join(os.tmpdir(), 'rote-console-screenshots');
fs.mkdirSync(shots, { recursive: true });

const ALICE = 'alice-token-0123456789abcdef'; // submit, review: proposes code
const CAROL = 'carol-token-0123456789abcdef'; // review: the second pair of eyes
const ROOT = 'root-token-0123456789abcdefgh'; // admin

let server;
let browser;
let page;
let dialogs = [];
let pageErrors = [];
const ids = {};

async function shot(name) {
  await page.screenshot({ path: path.join(shots, name + '.png'), fullPage: true });
}
// A fresh load of the page at `hash` (the query string only forces the load; the server ignores
// it), waiting until the page has rendered.
let loads = 0;
async function open(hash) {
  await page.goto(server.url + '/?load=' + ++loads + hash);
  await page.waitForSelector('body[data-ready="yes"]');
}
// Polls `fn` in the page until it returns true. (page.waitForFunction evaluates a string in the
// page, which the console's content-security policy forbids, as it should.)
async function waitUntil(fn, arg = null, timeout = 30000) {
  const end = Date.now() + timeout;
  for (;;) {
    if (await page.evaluate(fn, arg)) return;
    if (Date.now() > end) throw new Error('timed out waiting for ' + fn);
    await new Promise((r) => setTimeout(r, 100));
  }
}
async function signIn(token) {
  await page.evaluate(() => sessionStorage.clear());
  await open('#/signin');
  await page.fill('#token', token);
  await page.click('#signin-button');
  await waitUntil(() => location.hash === '#/queue' && document.body.dataset.ready === 'yes');
}

const MALICIOUS = [
  "-- </pre><script>window.__pwned = 1; alert('script')</script>",
  '-- <img src=x onerror="window.__pwned = 2; alert(\'img\')">',
  '-- \u202Ereversed\u202C <svg onload=alert(3)>',
  'return function(text)',
  "  return (text:gsub(\"(%a)([%w']*)\", function(first, rest) return first:upper() .. rest end))",
  'end',
  '',
].join('\n');

before(async () => {
  server = await startServer({
    keys: `${ALICE} alice submit,review\n${CAROL} carol review\n${ROOT} root admin\n`,
    model: path.join(process.env.ROTE_FIXTURES_DIR, 'qwen2'),
  });
  const titles = blueprintFromDoc('titles');
  await api(server, ALICE, 'POST', 'blueprints', { source: titles.source, lockfile: titles.lockfile, filename: 'titles.lua' });
  const r1 = await api(server, ALICE, 'POST', 'runs', { blueprint: 'blueprints/titles', input_json: '{"names": ["grace hopper", "ronald McDonald"]}' });
  const r2 = await api(server, ALICE, 'POST', 'runs', { blueprint: 'blueprints/titles', input_json: '{"names": ["ADA LOVELACE"]}' });
  ids.run1 = r1.name.replace('runs/', '');
  await waitRun(server, ALICE, r1.name);
  await waitRun(server, ALICE, r2.name);
  const v2 = await api(server, ALICE, 'POST', 'artifacts:propose', {
    generation_point: 'titles/title_case',
    source: 'return function(text)\n  return (text:gsub("(%a)([%w\']*)", function(first, rest) return first:upper() .. rest:lower() end))\nend\n',
    comment: 'lower-case the rest',
  });
  ids.v2 = v2.name.replace('artifacts/', '');
  const evil = await api(server, ALICE, 'POST', 'artifacts:propose', {
    generation_point: 'titles/title_case',
    source: MALICIOUS,
    comment: '<b onmouseover="alert(4)">bold</b> \u202Eevil',
  });
  ids.evil = evil.name.replace('artifacts/', '');
  // A point without code: the fixture model's answers are noise, so generation fails after
  // its attempts, each recorded with its prompt and output.
  await api(server, ALICE, 'POST', 'blueprints', {
    source:
      'local bp = rote.blueprint { name = "greetings", version = "1.0.0" }\n' +
      'local greet = bp:lua { name = "greet", task = "Say hello to the name.", signature = "function(name) -> string",\n' +
      '  tests = { { "Ada", "Hello, Ada!" }, { "Bob", "Hello, Bob!" } } }\n' +
      'function bp.run(input) return greet(input.name) end\nreturn bp\n',
    filename: 'greetings.lua',
  });
  const g = await api(server, ALICE, 'POST', 'runs', { blueprint: 'blueprints/greetings', input_json: '{"name": "Ada"}', policy: { allow_generation: true } });
  await waitRun(server, ALICE, g.name);

  browser = await chromium.launch({ executablePath: process.env.ROTE_CHROMIUM || '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
  page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  page.on('dialog', async (d) => {
    dialogs.push(d.message());
    await d.dismiss();
  });
  page.on('pageerror', (e) => pageErrors.push(String(e)));
  await page.goto(server.url + '/');
});

after(async () => {
  if (browser) await browser.close();
  if (server) await server.stop();
});

test('serves the page with a content-security policy and no inline script', async () => {
  const res = await fetch(server.url + '/');
  assert.equal(res.status, 200);
  const csp = res.headers.get('content-security-policy');
  assert.match(csp, /script-src 'self'/);
  assert.doesNotMatch(csp, /unsafe-inline|unsafe-eval/);
  assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
  assert.equal(res.headers.get('set-cookie'), null);
  const html = await res.text();
  assert.doesNotMatch(html, /<script>|<script [^>]*>[^<]/, 'no inline script');
  assert.doesNotMatch(html, /https?:\/\//, 'no asset from the network');
});

test('sign in with a token; a wrong token is refused', async () => {
  await open('#/signin');
  await shot('signin');
  await page.fill('#token', 'not-a-token-0000000000000');
  await page.click('#signin-button');
  await page.waitForSelector('#signin-status .error');
  assert.match(await page.textContent('#signin-status'), /UNAUTHENTICATED/);
  await signIn(CAROL);
  // The token is in this tab's sessionStorage and nowhere else.
  assert.equal(await page.evaluate(() => document.cookie), '');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('rote.token')), CAROL);
});

test('the review queue lists pending revisions with author and age; j/k and Enter open one', async () => {
  await open('#/queue');
  const rows = await page.$$eval('#queue tbody tr', (trs) => trs.map((t) => t.textContent));
  assert.equal(rows.length, 2, rows.join('\n'));
  for (const r of rows) assert.match(r, /titles\/title_case.*alice/);
  await shot('queue');
  await page.fill('#filter', 'no-such-point');
  assert.equal(await page.$$eval('#queue tbody tr:not([hidden])', (t) => t.length), 0);
  await page.fill('#filter', 'title');
  await page.click('h1');
  await page.keyboard.press('j');
  await page.keyboard.press('j');
  await page.keyboard.press('k');
  assert.equal(await page.$$eval('#queue tr.selected', (t) => t.length), 1);
  await page.keyboard.press('Enter');
  await waitUntil(() => location.hash.startsWith('#/artifact/') && document.body.dataset.ready === 'yes');
});

test('a revision: code, spec with shown and held-out examples, validation table, diff against live', async () => {
  await open('#/artifact/' + ids.v2);
  await page.waitForSelector('#spec #task');
  assert.match(await page.textContent('#code'), /rest:lower\(\)/);
  assert.ok((await page.$$('#code .hljs-keyword')).length > 0, 'Lua is highlighted');
  assert.match(await page.textContent('#task'), /Capitalize the first letter/);
  assert.match(await page.textContent('#spec table.examples'), /ada lovelace/);
  const validation = await page.textContent('#validation-report');
  assert.match(validation, /Ada Lovelace/);
  assert.match(validation, /pass/);
  await page.waitForSelector('#diff pre.diff');
  assert.match(await page.textContent('#diff .del'), /first:upper\(\) \.\. rest end/);
  assert.match(await page.textContent('#diff .add'), /rest:lower\(\)/);
  assert.match(await page.textContent('#history'), /propose/);
  await shot('revision');
});

test('try a revision on an input', async () => {
  await open('#/artifact/' + ids.v2);
  await page.fill('#try-input', '"GRACE HOPPER"');
  await page.click('#try-button');
  await page.waitForSelector('#try-result .try-output');
  assert.equal((await page.textContent('#try-result .try-output')).trim(), '"Grace Hopper"');
  await page.fill('#try-input', '{not json');
  await page.click('#try-button');
  await page.waitForSelector('#try-result .error, #try-result .fail');
});

test('a backtest lists its differences with both values', async () => {
  await open('#/artifact/' + ids.v2);
  await page.click('#backtest-button');
  await page.waitForSelector('#backtest-summary');
  assert.match(await page.textContent('#backtest-summary'), /3 recorded calls: 1 equal, 2 different/);
  const diffs = await page.textContent('table.differences');
  assert.match(diffs, /"Ronald McDonald"/);
  assert.match(diffs, /"Ronald Mcdonald"/);
  assert.match(diffs, /"ADA LOVELACE"/);
  assert.match(diffs, /"Ada Lovelace"/);
  await shot('backtest');
});

test('an attempt of a generation: the prompt as the model read it and its raw output', async () => {
  await open('#/generations?failed=1');
  await page.click('a.generation');
  await page.waitForSelector('#attempts .show-attempt');
  await page.click('#attempts .show-attempt');
  await page.waitForSelector('#attempts pre.prompt');
  const prompt = await page.textContent('#attempts pre.prompt');
  assert.match(prompt, /Say hello to the name\./);
  await shot('attempt');
});

test('the author is refused by four eyes, with the rule explained', async () => {
  await signIn(ALICE);
  await open('#/artifact/' + ids.v2);
  await page.fill('#comment', 'my own code');
  await page.click('#approve');
  await page.waitForSelector('#four-eyes');
  assert.match(await page.textContent('#decision-result'), /PERMISSION_DENIED/);
  assert.match(await page.textContent('#decision-result'), /second person/);
  assert.match(await page.textContent('#state'), /pending/);
  await shot('four_eyes');
});

test('a second principal approves: the revision becomes live', async () => {
  await signIn(CAROL);
  await open('#/artifact/' + ids.v2);
  await page.fill('#comment', 'backtest differences are the intended ones');
  await page.click('#approve');
  await page.waitForSelector('#live');
  assert.match(await page.textContent('#state'), /approved/);
  // The history is fetched after the decision; wait for it rather than race it.
  await waitUntil(() => /approve/.test(document.querySelector('#history')?.textContent ?? ''));
  assert.match(await page.textContent('#history'), /approve/);
});

test('a stale etag is refused', async () => {
  await open('#/artifact/' + ids.evil);
  // Someone else decides meanwhile.
  const a = await api(server, ROOT, 'GET', 'artifacts/' + ids.evil);
  await api(server, ROOT, 'POST', 'artifacts/' + ids.evil + ':review', { decision: 'REVIEW_STATE_REJECTED', comment: 'not this one', etag: a.etag });
  await page.click('#approve');
  await page.waitForSelector('#decision-result .error');
  assert.match(await page.textContent('#decision-result'), /ABORTED|reload/i);
});

test('rejecting the live revision falls back to the one before', async () => {
  await open('#/artifact/' + ids.v2);
  await page.fill('#comment', 'rolled back');
  await page.click('#reject');
  await waitUntil(() => document.querySelector('#state')?.textContent === 'rejected' && document.body.dataset.ready === 'yes');
  assert.equal(await page.$('#live'), null);
  await page.waitForSelector('#history table');
  assert.match(await page.textContent('#history'), /fallback/);
  const bp = await api(server, CAROL, 'GET', 'blueprints/titles');
  assert.equal(bp.bindings[0].revision, '1');
  await shot('fallback');
});

test('model output is shown inert: script tags, event handlers and bidi controls are text', async () => {
  await open('#/artifact/' + ids.evil);
  await page.waitForSelector('#history table');
  const code = await page.textContent('#code');
  assert.ok(code.includes("<script>window.__pwned = 1; alert('script')</script>"), code);
  assert.ok(code.includes('<img src=x onerror='), code);
  // The right-to-left override is drawn as a marker, not applied.
  assert.ok((await page.$$eval('#code .ctrl', (c) => c.map((x) => x.textContent))).includes('U+202E'));
  assert.ok(!code.includes('\u202E'));
  assert.match(await page.textContent('#history'), /<b onmouseover="alert\(4\)">bold<\/b>/);
  assert.equal(await page.$$eval('main script, main img, main svg, main [onerror], main [onload], main [onmouseover]', (x) => x.length), 0);
  assert.equal(await page.evaluate(() => window.__pwned), undefined);
  assert.deepEqual(dialogs, []);
  await shot('malicious');
});

test('runs: a run\'s steps with the values in and out, and its replay', async () => {
  await signIn(ALICE);
  await open('#/runs');
  assert.ok((await page.$$('#runs tbody tr')).length >= 3);
  await shot('runs');
  await open('#/run/' + ids.run1);
  const steps = await page.textContent('table.steps');
  assert.match(steps, /"grace hopper"/);
  assert.match(steps, /"Grace Hopper"/);
  assert.match(steps, /"ronald McDonald"/);
  await page.click('#replay-button');
  await page.waitForSelector('#replay-verdict');
  assert.match(await page.textContent('#replay-verdict'), /Replay matched: 2 steps compared/);
  await shot('run');
});

test('live events of a running run', async () => {
  await signIn(ALICE);
  // Three steps, each after a busy loop, so the page sees them arrive.
  await api(server, ALICE, 'POST', 'blueprints', {
    source:
      'local bp = rote.blueprint { name = "slow", version = "1.0.0" }\n' +
      'local double = bp:lua { name = "double", task = "Double a number.", signature = "function(n) -> number",\n' +
      '  tests = { { 1, 2 }, { 4, 8 }, { input = 5, output = 10, held_out = true } } }\n' +
      'function bp.run(input)\n  local out = {}\n' +
      '  for k = 1, 3 do local n = 0 for i = 1, input.n do n = n + i % 7 end out[k] = double(k) end\n' +
      '  return out\nend\nreturn bp\n',
    lockfile: 'format = 1\nblueprint = "slow"\n\n[[point]]\nname = "double"\nkind = "lua_function"\n' + "source = '''\nreturn function(n) return n * 2 end\n'''\n",
    filename: 'slow.lua',
  });
  const r = await api(server, ALICE, 'POST', 'runs', { blueprint: 'blueprints/slow', input_json: '{"n": 20000000}' });
  await open('#/run/' + r.name.replace('runs/', ''));
  await waitUntil(() => /state succeeded/.test(document.querySelector('#events')?.textContent ?? ''), null, 120000);
  await waitUntil(() => /succeeded/.test(document.querySelector('#run-state-badge')?.textContent ?? ''));
  assert.match(await page.textContent('#events'), /step 2: double/);
  await waitUntil(() => document.querySelectorAll('table.steps tbody tr').length === 3);
  await shot('live');
  // The spec marks which examples the model was shown and which were held out.
  await page.click('table.bindings a');
  await page.waitForSelector('#spec table.examples');
  const examples = await page.$$eval('#spec table.examples tbody tr', (trs) => trs.map((t) => t.textContent));
  assert.equal(examples.length, 3);
  assert.match(examples[0], /shown/);
  assert.match(examples[2], /held out/);
});

test('the audit log', async () => {
  await signIn(CAROL);
  await open('#/audit');
  const text = await page.textContent('table.audit');
  for (const action of ['propose', 'approve', 'reject', 'fallback']) assert.match(text, new RegExp(action));
  await shot('audit');
  assert.deepEqual(pageErrors, []);
  assert.deepEqual(dialogs, []);
});

test('the JSON API refuses what a hostile page or a stranger would send', async () => {
  const post = (headers, body = '{}') => fetch(server.url + '/v1/artifacts/' + ids.v2 + ':promote', { method: 'POST', headers, body });
  assert.equal((await post({ 'Content-Type': 'text/plain', Authorization: 'Bearer ' + CAROL })).status, 415);
  assert.equal((await post({ 'Content-Type': 'application/json', Authorization: 'Bearer ' + CAROL, Origin: 'https://evil.example' })).status, 403);
  assert.equal((await post({ 'Content-Type': 'application/json' })).status, 401);
  assert.equal((await post({ 'Content-Type': 'application/json', Authorization: 'Bearer nope-nope-nope-nope-nope' })).status, 401);
  // carol holds the review role only: submitting a run needs submit.
  const submit = await fetch(server.url + '/v1/runs', { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: 'Bearer ' + CAROL }, body: '{"blueprint":"blueprints/titles","input_json":"{}"}' });
  assert.equal(submit.status, 403);
  assert.equal((await submit.json()).error.status, 'PERMISSION_DENIED');
  assert.equal((await fetch(server.url + '/v1/artifacts/' + 'ab'.repeat(32), { headers: { Authorization: 'Bearer ' + CAROL } })).status, 404);
  assert.equal((await fetch(server.url + '/v1/nothing', { headers: { Authorization: 'Bearer ' + CAROL } })).status, 404);
  assert.equal((await fetch(server.url + '/v1/runs?no_such_field=1', { headers: { Authorization: 'Bearer ' + CAROL } })).status, 400);
  const bad = await post({ 'Content-Type': 'application/json', Authorization: 'Bearer ' + CAROL }, '{"comment": 5');
  assert.equal(bad.status, 400);
  const huge = await post({ 'Content-Type': 'application/json', Authorization: 'Bearer ' + CAROL }, JSON.stringify({ comment: 'x'.repeat(5000) }));
  assert.equal(huge.status, 400);
  // A DNS-rebound name reaching the loopback listener.
  const http = require('node:http');
  const status = await new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port: server.httpPort, path: '/v1/runs', headers: { Host: 'rebound.evil.example', Authorization: 'Bearer ' + CAROL } }, (res) => {
      res.resume();
      resolve(res.statusCode);
    });
    req.on('error', reject);
    req.end();
  });
  assert.equal(status, 421);
});
