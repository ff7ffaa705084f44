// The JSON API of `rote serve --http-listen` (docs/review.md): the token is kept in
// sessionStorage (gone when the tab closes) and sent only in the Authorization header.

const TOKEN_KEY = 'rote.token';

export function token(): string | null {
  return sessionStorage.getItem(TOKEN_KEY);
}
export function setToken(t: string | null): void {
  if (t === null) sessionStorage.removeItem(TOKEN_KEY);
  else sessionStorage.setItem(TOKEN_KEY, t);
}

export class ApiError extends Error {
  constructor(
    public httpStatus: number,
    public status: string,
    message: string,
  ) {
    super(message);
  }
}

function headers(json: boolean): Headers {
  const h = new Headers();
  const t = token();
  if (t) h.set('Authorization', 'Bearer ' + t);
  if (json) h.set('Content-Type', 'application/json');
  return h;
}

async function parse(res: Response): Promise<any> {
  const text = await res.text();
  let body: any = {};
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    throw new ApiError(res.status, 'BAD_RESPONSE', text.slice(0, 200));
  }
  if (!res.ok) {
    const e = body.error ?? {};
    throw new ApiError(res.status, e.status ?? String(res.status), e.message ?? res.statusText);
  }
  return body;
}

export function query(params: Record<string, string | number | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? '?' + s : '';
}

// Resource names keep their '/' (they are paths of the API); each segment is escaped.
export function path(name: string): string {
  return name.split('/').map(encodeURIComponent).join('/');
}

export async function get(p: string): Promise<any> {
  return parse(await fetch('/v1/' + p, { headers: headers(false), credentials: 'omit', cache: 'no-store' }));
}

export async function post(p: string, body: unknown = {}): Promise<any> {
  return parse(
    await fetch('/v1/' + p, {
      method: 'POST',
      headers: headers(true),
      credentials: 'omit',
      body: JSON.stringify(body),
    }),
  );
}

// GET /v1/runs/{id}:watch: one RunEvent per line while the run lasts. Returns a function that
// stops watching.
export function watch(run: string, onEvent: (e: any) => void, onEnd: (err?: Error) => void): () => void {
  const abort = new AbortController();
  (async () => {
    const res = await fetch('/v1/' + path(run) + ':watch', {
      headers: headers(false),
      credentials: 'omit',
      signal: abort.signal,
    });
    if (!res.ok || !res.body) {
      await parse(res);
      return;
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buffer.indexOf('\n')) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line.trim()) onEvent(JSON.parse(line));
      }
    }
  })().then(
    () => onEnd(),
    (err) => {
      if (!abort.signal.aborted) onEnd(err);
    },
  );
  return () => abort.abort();
}
