// The review console: hash-routed pages over the JSON API (docs/review.md, "Review console").
//   #/signin         paste a bearer token
//   #/queue          pending revisions
//   #/artifact/HEX   one revision: code, spec, validation, attempts, diff, try, backtest, decide
//   #/runs           runs;   #/run/ID   one run: steps, live events, replay
//   #/audit          the audit log
import { ApiError, get, post, query, path, setToken, token, watch } from './api';
import { Child, age, append, clear, el, pre, table } from './dom';
import { diffView, highlighted } from './code';

const main = () => document.getElementById('main') as HTMLElement;
let stopWatch: (() => void) | null = null;
let keyHandler: ((e: KeyboardEvent) => void) | null = null;

function hex(name: string): string {
  return name.replace(/^artifacts\//, '').replace(/^sha256:/, '');
}
function short(digest: string): string {
  return hex(digest).slice(0, 12);
}
function stateName(s: string | undefined): string {
  return (s ?? '').replace(/^REVIEW_STATE_|^RUN_STATE_/, '').toLowerCase();
}
function errorBox(e: unknown): HTMLElement {
  if (e instanceof ApiError) {
    const explain: Record<string, string> = {
      UNAUTHENTICATED: 'The token is missing or unknown: sign in again.',
      PERMISSION_DENIED: 'Your principal may not do this.',
      ABORTED: 'Someone changed this revision since you loaded it: reload the page and look again.',
    };
    return el(
      'div',
      { class: 'error', role: 'alert', dataset: { status: e.status } },
      el('strong', {}, e.status + ' (' + e.httpStatus + ')'),
      ': ',
      e.message,
      explain[e.status] ? el('p', {}, explain[e.status]) : null,
    );
  }
  return el('div', { class: 'error', role: 'alert' }, String(e));
}
function section(title: string, id: string, ...children: Child[]): HTMLElement {
  return el('section', { id }, el('h2', {}, title), ...children);
}
function pretty(json: string | undefined): string {
  if (!json) return '';
  try {
    return JSON.stringify(JSON.parse(json), null, 1);
  } catch {
    return json;
  }
}
function valueText(v: unknown): string {
  return v === undefined ? '' : JSON.stringify(v);
}
async function loading(target: HTMLElement, work: () => Promise<void>): Promise<void> {
  try {
    await work();
  } catch (e) {
    if (e instanceof ApiError && e.status === 'UNAUTHENTICATED') {
      location.hash = '#/signin';
      return;
    }
    append(target, [errorBox(e)]);
  }
}

// ---- sign in -------------------------------------------------------------------------------

function signIn(): void {
  const m = main();
  const input = el('input', { type: 'password', id: 'token', autocomplete: 'off', placeholder: 'bearer token' });
  const status = el('div', { id: 'signin-status' });
  const form = el(
    'form',
    { id: 'signin' },
    el('h1', {}, 'Sign in'),
    el('p', {}, 'Paste the bearer token of your principal (a line of the server\'s key file). It stays in this tab only and is sent in the Authorization header, never in a cookie or a URL.'),
    el('label', {}, 'Token ', input),
    el('button', { type: 'submit', id: 'signin-button' }, 'Sign in'),
    status,
  );
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    clear(status);
    setToken(input.value.trim() || null);
    try {
      await get('artifacts' + query({ page_size: 1 }));
      location.hash = '#/queue';
    } catch (e) {
      setToken(null);
      append(status, [errorBox(e)]);
    }
  });
  append(m, [form]);
  input.focus();
}

// ---- review queue --------------------------------------------------------------------------

async function queue(params: URLSearchParams): Promise<void> {
  const m = main();
  const point = params.get('point') ?? '';
  const pageToken = params.get('page') ?? '';
  const filter = el('input', { id: 'filter', type: 'search', placeholder: 'filter: blueprint, point, author', value: params.get('q') ?? '' });
  const pointBox = el('input', { id: 'point', type: 'search', placeholder: 'blueprint/point (server filter)', value: point });
  const body = el('tbody');
  const tbl = el(
    'table',
    { id: 'queue', class: 'list' },
    el('thead', {}, el('tr', {}, ['Generation point', 'Rev', 'Author', 'Age', 'Size', 'Backtest', 'Digest'].map((h) => el('th', {}, h)))),
    body,
  );
  const footer = el('div', { class: 'pager' });
  append(m, [
    el('h1', {}, 'Review queue'),
    el('p', { class: 'hint' }, 'Pending revisions. j/k or ↓/↑ move, Enter opens, / filters.'),
    el('div', { class: 'filters' }, filter, pointBox),
    tbl,
    footer,
  ]);
  await loading(m, async () => {
    const resp = await get('artifacts' + query({ state: 'REVIEW_STATE_PENDING', page_size: 100, page_token: pageToken, generation_point: point }));
    const rows: HTMLTableRowElement[] = [];
    for (const a of resp.artifacts ?? []) {
      const bt = a.backtest;
      const btText = bt && Number(bt.calls) > 0 ? `${bt.equal}/${bt.calls} equal, ${bt.different} differ` : '';
      const row = el(
        'tr',
        { dataset: { href: '#/artifact/' + hex(a.name), search: `${a.generation_point} ${a.author}`.toLowerCase() }, tabindex: '-1' },
        el('td', {}, el('a', { href: '#/artifact/' + hex(a.name) }, a.generation_point)),
        el('td', {}, String(a.revision)),
        el('td', {}, a.author || a.provenance?.author || ''),
        el('td', { title: a.create_time ?? '' }, age(a.create_time)),
        el('td', {}, String(a.source_size_bytes) + ' B'),
        el('td', {}, btText),
        el('td', { class: 'mono' }, short(a.digest)),
      );
      rows.push(row);
      body.appendChild(row);
    }
    if (rows.length === 0) body.appendChild(el('tr', {}, el('td', { colspan: '7' }, 'Nothing waits for review.')));
    if (resp.next_page_token) {
      const next = new URLSearchParams(params);
      next.set('page', resp.next_page_token);
      footer.appendChild(el('a', { href: '#/queue?' + next.toString(), id: 'next-page' }, 'Next page →'));
    }
    let selected = -1;
    const visible = () => rows.filter((r) => !r.hidden);
    const select = (i: number) => {
      const v = visible();
      if (v.length === 0) return;
      selected = Math.max(0, Math.min(v.length - 1, i));
      rows.forEach((r) => r.classList.remove('selected'));
      v[selected].classList.add('selected');
      v[selected].scrollIntoView({ block: 'nearest' });
    };
    const applyFilter = () => {
      const q = filter.value.trim().toLowerCase();
      for (const r of rows) r.hidden = q !== '' && !(r.dataset.search ?? '').includes(q);
      selected = -1;
      rows.forEach((r) => r.classList.remove('selected'));
    };
    filter.addEventListener('input', applyFilter);
    applyFilter();
    pointBox.addEventListener('keydown', (e) => {
      if (e.key !== 'Enter') return;
      const next = new URLSearchParams();
      if (pointBox.value.trim()) next.set('point', pointBox.value.trim());
      location.hash = '#/queue?' + next.toString();
    });
    keyHandler = (e: KeyboardEvent) => {
      const target = e.target as HTMLElement;
      if (target.tagName === 'INPUT' || target.tagName === 'TEXTAREA') {
        if (e.key === 'Escape') target.blur();
        return;
      }
      if (e.key === 'j' || e.key === 'ArrowDown') select(selected + 1);
      else if (e.key === 'k' || e.key === 'ArrowUp') select(selected - 1);
      else if (e.key === 'Enter' && selected >= 0) location.hash = visible()[selected].dataset.href!;
      else if (e.key === '/') {
        e.preventDefault();
        filter.focus();
      } else return;
      e.preventDefault();
    };
  });
}

// ---- one revision --------------------------------------------------------------------------

function examplesTable(spec: any, report: any): HTMLElement {
  const tests: any[] = report?.tests ?? [];
  const rows = (spec?.examples_json ?? []).map((j: string, i: number) => {
    let ex: any = {};
    try {
      ex = JSON.parse(j);
    } catch {
      /* shown raw below */
    }
    const held = tests[i]?.held_out ?? ex.held_out ?? false;
    return [
      String(i + 1),
      held ? el('span', { class: 'badge held' }, 'held out') : el('span', { class: 'badge shown' }, 'shown'),
      el('code', {}, valueText(ex.input)),
      el('code', {}, valueText(ex.output ?? ex.matches)),
    ];
  });
  return table(['#', 'To the model', 'Input', 'Expected'], rows, 'examples');
}

function validationTable(report: any): HTMLElement {
  const tests: any[] = report?.tests ?? [];
  const rows = tests.map((t, i) => [
    String(i + 1),
    t.held_out ? 'held out' : 'shown',
    el('code', {}, valueText(t.input)),
    el('code', {}, valueText(t.expected)),
    el('code', {}, t.error ? '' : valueText(t.got)),
    t.passed ? el('span', { class: 'pass' }, 'pass') : el('span', { class: 'fail' }, 'FAIL' + (t.error ? ': ' + t.error : '')),
  ]);
  return el(
    'div',
    {},
    el('p', {}, report?.passed ? 'Every example passes.' : 'Some examples fail.', report?.refused ? ' Refused: ' + report.refused : '', report?.review ? ' ' + report.review : ''),
    table(['#', 'Example', 'Input', 'Expected', 'Got', 'Result'], rows, 'validation'),
  );
}

async function artifactPage(h: string): Promise<void> {
  const m = main();
  await loading(m, async () => {
    const a = await get('artifacts/' + encodeURIComponent(h));
    const lang = a.kind === 'ARTIFACT_KIND_RE2_PATTERN' ? 're2' : 'lua';
    const [bpName, pointName] = splitPoint(a.generation_point);
    const state = stateName(a.state);
    append(m, [
      el(
        'h1',
        {},
        a.generation_point,
        ' revision ',
        String(a.revision),
        ' ',
        el('span', { class: 'badge ' + state, id: 'state' }, state),
        a.live ? el('span', { class: 'badge live', id: 'live' }, 'live') : null,
      ),
      el('p', { class: 'meta' }, 'Author: ', el('strong', { id: 'author' }, a.author || a.provenance?.author || '?'), ' · created ', age(a.create_time), ' · ', el('span', { class: 'mono' }, a.digest), ' · etag ', el('span', { class: 'mono', id: 'etag' }, a.etag)),
    ]);
    const codeSec = section('Code', 'code', highlighted(a.source ?? '', lang), a.options_json ? el('p', {}, 'Match options: ', el('code', {}, a.options_json)) : null);
    m.appendChild(codeSec);

    let report: any = null;
    try {
      report = a.validation_report_json ? JSON.parse(a.validation_report_json) : null;
    } catch {
      report = null;
    }
    const specSec = section('Spec', 'spec');
    m.appendChild(specSec);
    const diffSec = section('Diff against the live revision', 'diff');
    m.appendChild(diffSec);
    m.appendChild(section('Validation report', 'validation-report', report ? validationTable(report) : pre(a.validation_report_json || '(none)')));
    m.appendChild(attemptsSection(a));
    m.appendChild(trySection(a, report));
    m.appendChild(backtestSection(a));
    m.appendChild(decisionSection(a));
    const auditSec = section('History', 'history');
    m.appendChild(auditSec);

    // The spec and the live revision come from the blueprint.
    void loading(specSec, async () => {
      const bp = await get('blueprints/' + path(bpName));
      const spec = (bp.generation_points ?? []).find((g: any) => g.name === pointName);
      if (!spec) {
        specSec.appendChild(el('p', {}, 'The newest registration of ' + bpName + ' no longer declares ' + pointName + '.'));
      } else {
        append(specSec, [
          spec.spec_digest !== a.provenance?.spec_digest ? el('p', { class: 'warn' }, 'This revision was written for another version of the spec; the newest is shown.') : null,
          el('dl', {}, el('dt', {}, 'Task'), el('dd', { id: 'task' }, spec.task), spec.signature ? [el('dt', {}, 'Signature'), el('dd', {}, el('code', {}, spec.signature))] : null),
          el('h3', {}, 'Examples'),
          examplesTable(spec, report),
        ]);
      }
      const binding = (bp.bindings ?? []).find((b: any) => b.generation_point === pointName || b.generation_point === a.generation_point);
      if (!binding) {
        append(diffSec, [el('p', {}, 'The point has no live revision: everything here is new.'), diffView('', a.source ?? '')]);
      } else if (binding.artifact_digest === a.digest) {
        diffSec.appendChild(el('p', {}, 'This is the live revision.'));
      } else {
        const live = await get('artifacts/' + hex(binding.artifact_digest));
        append(diffSec, [
          el('p', {}, 'Live: revision ', el('a', { href: '#/artifact/' + hex(live.digest) }, String(live.revision)), ' → this revision ', String(a.revision)),
          diffView(live.source ?? '', a.source ?? ''),
        ]);
      }
    });
    void loading(auditSec, async () => {
      const resp = await get('auditEntries' + query({ generation_point: a.generation_point, page_size: 200 }));
      const rows = (resp.entries ?? []).map((e: any) => [
        String(e.sequence),
        age(e.time),
        e.principal,
        e.action,
        String(e.revision),
        e.artifact_digest === a.digest ? el('strong', {}, 'this') : el('a', { href: '#/artifact/' + hex(e.artifact_digest) }, short(e.artifact_digest)),
        e.detail,
      ]);
      auditSec.appendChild(table(['#', 'When', 'Who', 'Action', 'Rev', 'Revision', 'Detail'], rows, 'audit'));
      if ((a.reviews ?? []).length) {
        auditSec.appendChild(el('h3', {}, 'Reviews of this revision'));
        auditSec.appendChild(table(['Who', 'Decision', 'Comment', 'When'], a.reviews.map((r: any) => [r.principal, stateName(r.decision), r.comment, age(r.time)]), 'reviews'));
      }
    });
  });
}

function splitPoint(gp: string): [string, string] {
  const i = gp.lastIndexOf('/');
  return i < 0 ? ['', gp] : [gp.slice(0, i), gp.slice(i + 1)];
}

function attemptsSection(a: any): HTMLElement {
  return attemptsOf('artifacts/' + hex(a.name), a.provenance?.attempts ?? []);
}

// Each attempt of a generation, with its prompt and raw output read on demand; `base` is
// `artifacts/{hex}` or `generations/{hex}`.
function attemptsOf(base: string, attempts: any[]): HTMLElement {
  const sec = section('Attempts', 'attempts');
  if (attempts.length === 0) sec.appendChild(el('p', {}, 'Written by a person: no model attempts.'));
  for (const at of attempts) {
    const detail = el('div', { class: 'attempt-detail' });
    const button = el('button', { type: 'button', class: 'show-attempt', dataset: { attempt: String(at.index) } }, 'Show prompt and output');
    button.addEventListener('click', async () => {
      button.disabled = true;
      clear(detail);
      await loading(detail, async () => {
        const d = await get(path(base) + '/attempts/' + at.index);
        append(detail, [
          el('h4', {}, 'Prompt', d.prompt_truncated ? ' (cut)' : ''),
          pre(d.prompt, 'prompt'),
          el('h4', {}, 'Raw output', d.output_truncated ? ' (cut)' : ''),
          pre(d.output, 'output'),
          el('p', { class: 'meta' }, `model ${short(d.model_digest)} · ${d.device} · ${d.numerics_profile} · decoding ${d.decoding_json}`),
        ]);
      });
    });
    sec.appendChild(
      el(
        'div',
        { class: 'attempt' },
        el('h3', {}, 'Attempt ', String(at.index), ' ', at.failure ? el('span', { class: 'fail' }, 'failed') : el('span', { class: 'pass' }, 'passed')),
        at.failure ? el('p', { class: 'failure' }, at.failure) : null,
        el('p', { class: 'meta' }, `${at.prompt_tokens} tokens in, ${at.output_tokens} out, ${at.duration_ms} ms`),
        button,
        detail,
      ),
    );
  }
  return sec;
}

function trySection(a: any, report: any): HTMLElement {
  const first = report?.tests?.[0]?.input;
  const input = el('textarea', { id: 'try-input', rows: '3', spellcheck: 'false' });
  input.value = first !== undefined ? JSON.stringify(first) : '';
  const result = el('div', { id: 'try-result' });
  const button = el('button', { type: 'button', id: 'try-button' }, 'Run');
  button.addEventListener('click', async () => {
    clear(result);
    button.disabled = true;
    await loading(result, async () => {
      const r = await post('artifacts/' + hex(a.name) + ':try', { input_json: input.value });
      append(result, [
        r.error ? el('p', { class: 'fail' }, 'Error: ', r.error) : el('div', {}, 'Result: ', pre(r.output_json, 'try-output')),
        el('p', { class: 'meta' }, `${r.instructions_used} of ${r.max_instructions} instructions, ${r.memory_peak_bytes} bytes peak`),
      ]);
    });
    button.disabled = false;
  });
  return section('Try it', 'try', el('p', {}, a.kind === 'ARTIFACT_KIND_RE2_PATTERN' ? 'Input: a JSON string, the text to search.' : 'Input: JSON.'), input, button, result);
}

function backtestView(b: any): HTMLElement {
  const s = b.summary ?? {};
  const rows = (b.differences ?? []).map((d: any) => [
    el('a', { href: '#/run/' + d.run.replace(/^runs\//, '') }, d.run),
    d.step === '-1' ? 'whole run' : String(d.step),
    el('code', {}, d.input_json),
    el('code', { class: 'recorded' }, d.recorded_json),
    d.error ? el('span', { class: 'fail' }, d.error) : el('code', { class: 'candidate' }, d.candidate_json),
  ]);
  return el(
    'div',
    { id: 'backtest-result' },
    el('p', { id: 'backtest-summary' }, `${s.calls} recorded calls: ${s.equal} equal, ${s.different} different, ${s.errors} errors` + (Number(s.runs) ? `; ${s.runs} whole runs, ${s.runs_different} different` : '') + ` (by ${b.principal}, ${age(s.create_time)})`),
    rows.length ? table(['Run', 'Step', 'Input', 'Recorded', 'This revision'], rows, 'differences') : el('p', {}, 'No differences.'),
  );
}

function backtestSection(a: any): HTMLElement {
  const holder = el('div');
  const button = el('button', { type: 'button', id: 'backtest-button' }, 'Run backtest');
  const sec = section('Backtest against past runs', 'backtest', button, holder);
  void (async () => {
    try {
      const b = await get('artifacts/' + hex(a.name) + '/backtest');
      clear(holder);
      holder.appendChild(backtestView(b));
    } catch (e) {
      if (e instanceof ApiError && e.status === 'NOT_FOUND') holder.appendChild(el('p', {}, 'Not backtested yet.'));
      else holder.appendChild(errorBox(e));
    }
  })();
  button.addEventListener('click', async () => {
    button.disabled = true;
    clear(holder);
    holder.appendChild(el('p', {}, 'Running…'));
    try {
      const b = await post('artifacts/' + hex(a.name) + ':backtest', {});
      clear(holder);
      holder.appendChild(backtestView(b));
    } catch (e) {
      clear(holder);
      holder.appendChild(errorBox(e));
    }
    button.disabled = false;
  });
  return sec;
}

function decisionSection(a: any): HTMLElement {
  const comment = el('textarea', { id: 'comment', rows: '2', maxlength: '4096', placeholder: 'comment (recorded in the audit log)' });
  const result = el('div', { id: 'decision-result' });
  const decide = async (what: 'approve' | 'reject' | 'promote') => {
    clear(result);
    try {
      if (what === 'promote') await post('artifacts/' + hex(a.name) + ':promote', { comment: comment.value });
      else
        await post('artifacts/' + hex(a.name) + ':review', {
          decision: what === 'approve' ? 'REVIEW_STATE_APPROVED' : 'REVIEW_STATE_REJECTED',
          comment: comment.value,
          etag: a.etag,
        });
      route();
    } catch (e) {
      result.appendChild(errorBox(e));
      if (e instanceof ApiError && e.status === 'PERMISSION_DENIED' && /second person/i.test(e.message)) {
        result.appendChild(
          el('p', { class: 'four-eyes', id: 'four-eyes' }, 'Four eyes: the person who asked for this code (or proposed it) may not also approve it. Another reviewer must decide.'),
        );
      }
    }
  };
  const button = (id: string, label: string, what: 'approve' | 'reject' | 'promote') =>
    el('button', { type: 'button', id, onclick: () => void decide(what) }, label);
  return section(
    'Decide',
    'decide',
    el('p', { class: 'meta' }, 'Decisions carry the etag you loaded (', el('span', { class: 'mono' }, a.etag), '); if the revision changed since, the server refuses and you reload.'),
    comment,
    el('div', { class: 'buttons' }, button('approve', 'Approve', 'approve'), button('reject', 'Reject', 'reject'), button('promote', 'Promote to live', 'promote')),
    result,
  );
}

// ---- runs ----------------------------------------------------------------------------------

async function runsPage(params: URLSearchParams): Promise<void> {
  const m = main();
  const state = params.get('state') ?? '';
  const select = el('select', { id: 'run-state' }, ['', 'RUN_STATE_PENDING', 'RUN_STATE_RUNNING', 'RUN_STATE_SUCCEEDED', 'RUN_STATE_FAILED', 'RUN_STATE_CANCELLED'].map((s) => el('option', { value: s }, s ? stateName(s) : 'any state')));
  select.value = state;
  select.addEventListener('change', () => {
    location.hash = '#/runs' + (select.value ? '?state=' + select.value : '');
  });
  const body = el('tbody');
  const footer = el('div', { class: 'pager' });
  append(m, [
    el('h1', {}, 'Runs'),
    el('div', { class: 'filters' }, select),
    el('table', { id: 'runs', class: 'list' }, el('thead', {}, el('tr', {}, ['Run', 'Blueprint', 'State', 'Submitter', 'Created', 'Steps'].map((h) => el('th', {}, h)))), body),
    footer,
  ]);
  await loading(m, async () => {
    const resp = await get('runs' + query({ page_size: 100, page_token: params.get('page') ?? '', state }));
    for (const r of resp.runs ?? []) {
      const id = r.name.replace(/^runs\//, '');
      body.appendChild(el('tr', {}, el('td', {}, el('a', { href: '#/run/' + id }, id)), el('td', {}, r.blueprint), el('td', {}, stateName(r.state)), el('td', {}, r.submitter), el('td', {}, age(r.create_time)), el('td', {}, String(r.step_count))));
    }
    if (resp.next_page_token) {
      const next = new URLSearchParams(params);
      next.set('page', resp.next_page_token);
      footer.appendChild(el('a', { href: '#/runs?' + next.toString(), id: 'next-page' }, 'Next page →'));
    }
  });
}

async function runPage(id: string): Promise<void> {
  const m = main();
  await loading(m, async () => {
    const r = await get('runs/' + encodeURIComponent(id));
    const head = el('div', { id: 'run-head' });
    const renderHead = (run: any) => {
      clear(head);
      append(head, [
        el('h1', {}, 'Run ', id, ' ', el('span', { class: 'badge ' + stateName(run.state), id: 'run-state-badge' }, stateName(run.state))),
        el('p', { class: 'meta' }, 'Blueprint ', run.blueprint, ' · by ', run.submitter, ' · created ', age(run.create_time)),
        run.error ? el('p', { class: 'fail' }, 'Error: ', run.error) : null,
        run.output_json ? el('div', {}, el('h3', {}, 'Output'), pre(pretty(run.output_json), 'run-output')) : null,
        (run.bindings ?? []).length
          ? table(['Point', 'Revision', 'From'], run.bindings.map((b: any) => [b.generation_point, el('a', { href: '#/artifact/' + hex(b.artifact_digest) }, String(b.revision) + ' (' + short(b.artifact_digest) + ')'), b.source]), 'bindings')
          : null,
      ]);
    };
    renderHead(r);
    const stepsSec = section('Steps', 'steps');
    const events = el('ol', { id: 'events' });
    const replayResult = el('div', { id: 'replay-result' });
    const replay = el('button', { type: 'button', id: 'replay-button' }, 'Replay');
    replay.addEventListener('click', async () => {
      clear(replayResult);
      replay.disabled = true;
      await loading(replayResult, async () => {
        const x = await post('runs/' + encodeURIComponent(id) + ':replay', {});
        append(replayResult, [
          x.matched
            ? el('p', { class: 'pass', id: 'replay-verdict' }, `Replay matched: ${x.steps_compared} steps compared, the same output.`)
            : el('p', { class: 'fail', id: 'replay-verdict' }, `Replay differs at step ${x.first_mismatch_step} (${x.steps_compared} steps compared).`),
          !x.matched ? table(['Recorded', 'Replayed'], [[pre(pretty(x.recorded_json)), pre(pretty(x.replayed_json))]], 'replay-diff') : null,
        ]);
      });
      replay.disabled = false;
    });
    append(m, [head, stepsSec, section('Live events', 'live', events), section('Replay', 'replay', el('p', {}, 'Re-executes the run from its journal and compares every step.'), replay, replayResult)]);
    const loadSteps = async () => {
      const resp = await get('runs/' + encodeURIComponent(id) + '/steps' + query({ page_size: 200, max_value_bytes: 4096 }));
      clear(stepsSec);
      stepsSec.appendChild(el('h2', {}, 'Steps'));
      const rows = (resp.steps ?? []).map((s: any) => [
        String(s.index),
        s.generation_point,
        el('a', { href: '#/artifact/' + hex(s.artifact_digest) }, short(s.artifact_digest)),
        el('code', {}, s.input_omitted ? `(${s.input_size_bytes} bytes)` : s.input_json),
        el('code', {}, s.output_omitted ? `(${s.output_size_bytes} bytes)` : s.output_json),
      ]);
      stepsSec.appendChild(rows.length ? table(['#', 'Point', 'Revision', 'In', 'Out'], rows, 'steps') : el('p', {}, 'No steps yet.'));
    };
    await loading(stepsSec, loadSteps);
    const running = r.state === 'RUN_STATE_RUNNING' || r.state === 'RUN_STATE_PENDING';
    if (!running) {
      events.appendChild(el('li', {}, 'The run has ended; its steps are above.'));
      return;
    }
    stopWatch = watch(
      r.name,
      (e) => {
        const what = e.state ? 'state ' + stateName(e.state) : e.step ? `step ${e.step.index ?? 0}: ${e.step.generation_point} → ${short(e.step.output_digest ?? '')}` : e.generation_progress ? 'generating: ' + e.generation_progress : e.log ?? '';
        events.appendChild(el('li', {}, what));
        if (e.step || e.state) void loadSteps();
        if (e.state) void get('runs/' + encodeURIComponent(id)).then(renderHead, () => undefined);
      },
      (err) => {
        if (err) events.appendChild(el('li', { class: 'fail' }, 'Watching stopped: ' + err.message));
      },
    );
  });
}

async function generationsPage(params: URLSearchParams): Promise<void> {
  const m = main();
  const failed = params.get('failed') === '1';
  append(m, [
    el('h1', {}, 'Generations'),
    el('p', {}, failed ? el('a', { href: '#/generations' }, 'Show all') : el('a', { href: '#/generations?failed=1', id: 'failed-only' }, 'Show failed only')),
  ]);
  await loading(m, async () => {
    const resp = await get('generations' + query({ page_size: 100, failed_only: failed ? 'true' : undefined, page_token: params.get('page') ?? '' }));
    const rows = (resp.generations ?? []).map((g: any) => [
      el('a', { href: '#/generation/' + g.name.replace(/^generations\//, ''), class: 'generation' }, short(g.request_digest || g.name)),
      g.generation_point,
      g.passed ? el('span', { class: 'pass' }, 'passed') : el('span', { class: 'fail' }, 'failed'),
      String((g.attempts ?? []).length),
      age(g.create_time),
      g.failure,
    ]);
    m.appendChild(table(['Generation', 'Point', 'Result', 'Attempts', 'When', 'Why it failed'], rows, 'generations list'));
  });
}

async function generationPage(id: string): Promise<void> {
  const m = main();
  await loading(m, async () => {
    const g = await get('generations/' + encodeURIComponent(id));
    append(m, [
      el('h1', {}, 'Generation for ', g.generation_point, ' ', g.passed ? el('span', { class: 'badge approved' }, 'passed') : el('span', { class: 'badge failed' }, 'failed')),
      el('p', { class: 'meta' }, `model ${short(g.model_digest)} · ${g.device} · ${g.numerics_profile} · prompt template ${g.prompt_template_version} · decoding ${g.decoding_json}`),
      g.failure ? el('p', { class: 'failure' }, g.failure) : null,
      g.artifact ? el('p', {}, 'Wrote ', el('a', { href: '#/artifact/' + hex(g.artifact) }, g.artifact)) : null,
      attemptsOf(g.name, g.attempts ?? []),
    ]);
  });
}

async function auditPage(params: URLSearchParams): Promise<void> {
  const m = main();
  append(m, [el('h1', {}, 'Audit log')]);
  await loading(m, async () => {
    const resp = await get('auditEntries' + query({ page_size: 200, page_token: params.get('page') ?? '' }));
    const rows = (resp.entries ?? []).map((e: any) => [String(e.sequence), age(e.time), e.principal, e.action, e.generation_point, el('a', { href: '#/artifact/' + hex(e.artifact_digest) }, String(e.revision)), e.detail]);
    m.appendChild(table(['#', 'When', 'Who', 'Action', 'Point', 'Rev', 'Detail'], rows, 'audit'));
    if (resp.next_page_token) m.appendChild(el('a', { href: '#/audit?page=' + encodeURIComponent(resp.next_page_token), id: 'next-page' }, 'Next page →'));
  });
}

// ---- routing -------------------------------------------------------------------------------

let routeSeq = 0;

async function route(): Promise<void> {
  const seq = ++routeSeq;
  if (stopWatch) {
    stopWatch();
    stopWatch = null;
  }
  keyHandler = null;
  // A fresh <main> per page: a page still loading from before writes into its own, detached one.
  const m = el('main', { id: 'main' });
  main().replaceWith(m);
  const hash = location.hash.replace(/^#/, '') || '/queue';
  const [p, qs] = hash.split('?', 2);
  const params = new URLSearchParams(qs ?? '');
  const signOut = document.getElementById('sign-out') as HTMLButtonElement;
  signOut.hidden = token() === null;
  const started = performance.now();
  document.body.dataset.ready = 'no';
  if (p === '/signin') signIn();
  else if (p === '/queue') await queue(params);
  else if (p.startsWith('/artifact/')) await artifactPage(decodeURIComponent(p.slice('/artifact/'.length)));
  else if (p === '/runs') await runsPage(params);
  else if (p.startsWith('/run/')) await runPage(decodeURIComponent(p.slice('/run/'.length)));
  else if (p === '/audit') await auditPage(params);
  else if (p === '/generations') await generationsPage(params);
  else if (p.startsWith('/generation/')) await generationPage(decodeURIComponent(p.slice('/generation/'.length)));
  else append(m, [el('p', {}, 'No page ', p)]);
  if (seq !== routeSeq) return; // a later navigation owns the page now
  document.body.dataset.renderMs = String(Math.round(performance.now() - started));
  // Since the navigation started: what a reviewer waits for on a fresh load.
  document.body.dataset.loadedMs = String(Math.round(performance.now()));
  document.body.dataset.ready = 'yes';
}

document.addEventListener('keydown', (e) => keyHandler?.(e));
window.addEventListener('hashchange', () => void route());
document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('sign-out')?.addEventListener('click', () => {
    setToken(null);
    location.hash = '#/signin';
  });
  void route();
});
