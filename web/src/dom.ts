// DOM building without markup: every string becomes a text node, so nothing a model or a user
// wrote is ever parsed as HTML. Invisible and direction-changing characters (the bidi controls
// of "Trojan Source", zero-width spaces) are drawn as visible markers instead of acting.

export type Child = Node | string | number | null | undefined | false | Child[];

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: { class?: string; id?: string; title?: string; href?: string; type?: string; [k: string]: unknown } = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = String(v);
    else if (k === 'href') {
      // Only the console's own hash routes.
      const href = String(v);
      if (href.startsWith('#')) e.setAttribute('href', href);
    } else if (k.startsWith('on') && typeof v === 'function') {
      e.addEventListener(k.slice(2), v as EventListener);
    } else if (k === 'dataset' && typeof v === 'object') {
      for (const [dk, dv] of Object.entries(v as Record<string, string>)) e.dataset[dk] = dv;
    } else if (typeof v === 'boolean') {
      if (v) e.setAttribute(k, '');
    } else {
      e.setAttribute(k, String(v));
    }
  }
  append(e, children);
  return e;
}

export function append(parent: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(parent, c);
    else if (c instanceof Node) parent.appendChild(c);
    else parent.appendChild(visibleText(String(c)));
  }
}

// Bidi embeddings, overrides and isolates, marks, zero-width characters, BOM and the other
// C0/C1 controls except tab and newline.
const HIDDEN = /[\u202A-\u202E\u2066-\u2069\u200E\u200F\u061C\u200B-\u200D\u2060\uFEFF\u0000-\u0008\u000B-\u001F\u007F-\u009F]/g;

function codePointName(ch: string): string {
  return 'U+' + ch.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0');
}

// A text node, or a fragment in which each hidden character is a visible <span class="ctrl">.
export function visibleText(s: string): Node {
  HIDDEN.lastIndex = 0;
  if (!HIDDEN.test(s)) return document.createTextNode(s);
  const frag = document.createDocumentFragment();
  let last = 0;
  HIDDEN.lastIndex = 0;
  for (let m = HIDDEN.exec(s); m !== null; m = HIDDEN.exec(s)) {
    if (m.index > last) frag.appendChild(document.createTextNode(s.slice(last, m.index)));
    const name = codePointName(m[0]);
    const marker = document.createElement('span');
    marker.className = 'ctrl';
    marker.title = 'invisible character ' + name + ' (shown, not applied)';
    marker.textContent = name;
    frag.appendChild(marker);
    last = m.index + m[0].length;
  }
  if (last < s.length) frag.appendChild(document.createTextNode(s.slice(last)));
  return frag;
}

export function clear(node: Element): void {
  while (node.firstChild) node.removeChild(node.firstChild);
}

export function pre(text: string, cls = ''): HTMLPreElement {
  return el('pre', { class: cls }, text);
}

export function table(headers: string[], rows: Child[][], cls = ''): HTMLTableElement {
  return el(
    'table',
    { class: cls },
    el('thead', {}, el('tr', {}, headers.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows.map((r) => el('tr', {}, r.map((c) => el('td', {}, c))))),
  );
}

export function age(iso: string | undefined): string {
  if (!iso) return '';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '';
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 60) return s + 's ago';
  if (s < 3600) return Math.floor(s / 60) + 'm ago';
  if (s < 86400) return Math.floor(s / 3600) + 'h ago';
  return Math.floor(s / 86400) + 'd ago';
}
