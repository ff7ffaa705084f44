// Starts a real `rote serve` for the browser suites and talks to its JSON API.
'use strict';
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');

// A `rote serve` on loopback ports picked by the kernel, with a temporary data directory.
// Resolves once both "listening" lines are printed; stop() sends SIGTERM and removes the data.
async function startServer({ keys, model, extraArgs = [], dataDir }) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rote-console-'));
  const keysFile = path.join(dir, 'keys');
  fs.writeFileSync(keysFile, keys, { mode: 0o600 });
  const data = dataDir || path.join(dir, 'data');
  const args = ['serve', '--listen', '127.0.0.1:0', '--http-listen', '127.0.0.1:0', '--metrics-listen', 'off', '--data', data, '--keys', keysFile, '--log-level', 'warn'];
  if (model) args.push('--model', model, '--attempts', '2', '--max-tokens', '16');
  args.push(...extraArgs);
  const child = spawn(process.env.ROTE_BINARY, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => {
    stderr += d;
  });
  const ports = await new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error('rote serve did not start in 60 s: ' + stderr)), 60000);
    child.stdout.on('data', (d) => {
      out += d;
      const grpc = /listening on port (\d+)/.exec(out);
      const http = /review console on port (\d+)/.exec(out);
      if (grpc && http) {
        clearTimeout(timer);
        resolve({ grpc: Number(grpc[1]), http: Number(http[1]) });
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error('rote serve exited with ' + code + ': ' + stderr));
    });
  });
  return {
    url: 'http://127.0.0.1:' + ports.http,
    httpPort: ports.http,
    grpcPort: ports.grpc,
    dir,
    data,
    // Stops the server; its data directory is removed unless `keep` (to start another on it).
    async stop({ keep = false } = {}) {
      const exited = new Promise((resolve) => child.on('exit', resolve));
      child.kill('SIGTERM');
      await exited;
      if (!keep) fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function api(server, token, method, p, body) {
  const headers = { Authorization: 'Bearer ' + token };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(server.url + '/v1/' + p, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const json = await res.json();
  if (!res.ok) throw new Error(`${method} /v1/${p}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}

async function waitRun(server, token, name) {
  for (let i = 0; i < 1200; i++) {
    const r = await api(server, token, 'GET', name);
    if (r.state !== 'RUN_STATE_PENDING' && r.state !== 'RUN_STATE_RUNNING') return r;
    await new Promise((res) => setTimeout(res, 100));
  }
  throw new Error(name + ' did not end');
}

// The titles blueprint and lockfile of docs/review.md, so the suite walks the documented example.
function blueprintFromDoc(name) {
  const doc = fs.readFileSync(path.join(__dirname, '..', '..', 'docs', 'review.md'), 'utf8');
  const block = (file) => {
    const m = new RegExp('```[a-z]+ file=' + file.replace('.', '\\.') + '\\n([\\s\\S]*?)```').exec(doc);
    if (!m) throw new Error('docs/review.md has no ' + file);
    return m[1];
  };
  return { source: block(name + '.lua'), lockfile: block(name + '.lock') };
}

module.exports = { startServer, api, waitRun, blueprintFromDoc };
