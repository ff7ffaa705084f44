// Code display: highlight.js (Lua, and a small grammar for RE2 patterns) and jsdiff. The
// highlighter's HTML is never assigned to innerHTML: it is parsed into an inert document and
// rebuilt from its text and <span class="hljs-..."> elements only, so a string the model wrote
// stays text even if the highlighter had a bug.
import hljs from 'highlight.js/lib/core';
import lua from 'highlight.js/lib/languages/lua';
import { diffLines } from 'diff';
import { el, visibleText } from './dom';

hljs.registerLanguage('lua', lua);
hljs.registerLanguage('re2', () => ({
  name: 'RE2',
  contains: [
    { className: 'char.escape', begin: /\\[pP]\{[A-Za-z_]+\}|\\./ },
    { className: 'regexp', begin: /\[\^?/, end: /\]/, contains: [{ begin: /\\./ }] },
    { className: 'keyword', begin: /\(\?(P<[A-Za-z_][A-Za-z0-9_]*>|[imsU-]*:|)|\(|\)/ },
    { className: 'operator', begin: /[*+?]\??|\{\d+(,\d*)?\}\??|\|/ },
    { className: 'built_in', begin: /[\^$.]/ },
  ],
}));

function rebuild(from: Node, to: Node): void {
  for (const child of Array.from(from.childNodes)) {
    if (child.nodeType === Node.TEXT_NODE) {
      to.appendChild(visibleText(child.textContent ?? ''));
    } else if (child instanceof Element && child.tagName === 'SPAN') {
      const span = document.createElement('span');
      const cls = (child.getAttribute('class') ?? '')
        .split(/\s+/)
        .filter((c) => /^hljs-[a-z_-]+$/.test(c) || /^[a-z_]+_$/.test(c))
        .join(' ');
      if (cls) span.className = cls;
      rebuild(child, span);
      to.appendChild(span);
    } else {
      to.appendChild(visibleText(child.textContent ?? ''));
    }
  }
}

export function highlighted(source: string, language: 'lua' | 're2'): HTMLElement {
  const code = el('code', { class: 'hljs language-' + language });
  let html: string;
  try {
    html = hljs.highlight(source, { language, ignoreIllegals: true }).value;
  } catch {
    code.appendChild(visibleText(source));
    return el('pre', { class: 'code' }, code);
  }
  const doc = new DOMParser().parseFromString('<!doctype html><body>' + html, 'text/html');
  rebuild(doc.body, code);
  return el('pre', { class: 'code' }, code);
}

// A line diff of two sources: removed lines marked '-', added '+'.
export function diffView(before: string, after: string): HTMLElement {
  const out = el('pre', { class: 'diff' });
  for (const part of diffLines(before, after)) {
    const cls = part.added ? 'add' : part.removed ? 'del' : 'same';
    const mark = part.added ? '+' : part.removed ? '-' : ' ';
    const lines = part.value.replace(/\n$/, '').split('\n');
    for (const line of lines) out.appendChild(el('span', { class: 'line ' + cls }, mark + ' ' + line + '\n'));
  }
  return out;
}
