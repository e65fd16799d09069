// SPDX-License-Identifier: MIT
// The runwarden run viewer: plain modules, no build step, same origin only.
import { initialState, parseLine, renderSpans } from './ansi.js';

const $ = (sel, root = document) => root.querySelector(sel);
const view = () => $('#view');
const TOKEN_KEY = 'runwarden.token';
const TERM_LINES = 200; // lines per terminal block (the virtual list's unit)

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const k of kids.flat()) if (k !== null && k !== undefined && k !== false) e.append(k);
  return e;
}

// ---------- API ----------

let tokenWaiters = null;

function askToken() {
  if (!tokenWaiters) {
    tokenWaiters = [];
    const d = $('#token-dialog');
    $('#token-input').value = '';
    if (!d.open) d.showModal();
  }
  return new Promise((res) => tokenWaiters.push(res));
}

function setupToken() {
  $('#token-form').addEventListener('submit', () => {
    const v = $('#token-input').value.trim();
    if (v) sessionStorage.setItem(TOKEN_KEY, v);
    const w = tokenWaiters || [];
    tokenWaiters = null;
    w.forEach((f) => f());
  });
  $('#token-clear').addEventListener('click', () => {
    sessionStorage.removeItem(TOKEN_KEY);
    $('#token-input').value = '';
  });
  $('#token-btn').addEventListener('click', () => askToken().then(route));
}

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
  }
}

async function api(path, opts = {}) {
  for (;;) {
    const headers = new Headers(opts.headers || {});
    const tok = sessionStorage.getItem(TOKEN_KEY);
    if (tok) headers.set('Authorization', `Bearer ${tok}`);
    if (opts.json !== undefined) headers.set('Content-Type', 'application/json');
    const r = await fetch(path, {
      method: opts.method || 'GET', headers, cache: 'no-store',
      body: opts.json !== undefined ? JSON.stringify(opts.json) : opts.body,
    });
    if (r.status === 401) {
      await askToken();
      continue;
    }
    if (opts.raw) {
      if (!r.ok) throw new ApiError(r.status, await r.json().catch(() => null));
      return r;
    }
    const ct = r.headers.get('content-type') || '';
    const body = ct.startsWith('application/json') ? await r.json() : await r.text();
    if (!r.ok) throw new ApiError(r.status, typeof body === 'object' ? body : null);
    return body;
  }
}

const enc = encodeURIComponent;

// ---------- formatting ----------

function fmtTime(ms) {
  if (!ms) return '';
  const d = new Date(ms);
  const today = new Date().toDateString() === d.toDateString();
  return today ? d.toLocaleTimeString() : d.toLocaleString();
}

function fmtDur(ms) {
  if (ms === undefined || ms === null || ms < 0) return '';
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} m ${Math.floor(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} m`;
}

function duration(rec) {
  if (!rec || !rec.startedAt) return '';
  const end = rec.finishedAt || (rec.status === 'running' ? Date.now() : rec.updatedAt);
  return fmtDur(end - rec.startedAt);
}

function badge(status) {
  return el('span', { class: `badge st-${status}`, 'data-status': status, text: status || '?' });
}

function outcome(rec) {
  if (!rec) return '';
  const parts = [];
  if (rec.exitCode !== undefined) parts.push(`exit ${rec.exitCode}`);
  if (rec.error && rec.error.code) parts.push(rec.error.code);
  return parts.join(' · ');
}

function errorBox(e) {
  return el('div', { class: 'error-box', text: `${e.message}${e.code ? ` (${e.code})` : ''}` });
}

function runHref(tid, rid) {
  return `/ui/threads/${enc(tid)}/runs/${enc(rid)}`;
}

// ---------- navigation ----------

let cleanup = [];
function onLeave(fn) { cleanup.push(fn); }

function navigate(href) {
  history.pushState(null, '', href);
  route();
}

document.addEventListener('click', (ev) => {
  const a = ev.target.closest('a[data-link]');
  if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || ev.button !== 0) return;
  ev.preventDefault();
  navigate(a.getAttribute('href'));
});
window.addEventListener('popstate', () => route());

function route() {
  cleanup.forEach((f) => { try { f(); } catch (_) { /* leaving anyway */ } });
  cleanup = [];
  const parts = location.pathname.replace(/^\/ui\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  const v = view();
  v.replaceChildren();
  if (parts[0] === 'threads' && parts.length === 4 && parts[2] === 'runs') runView(v, parts[1], parts[3]);
  else if (parts[0] === 'threads' && parts.length === 2) threadView(v, parts[1]);
  else if (parts[0] === 'health') healthView(v);
  else threadsView(v);
}

function every(ms, fn) {
  let stopped = false, timer = null;
  const tick = async () => {
    if (stopped) return;
    try { await fn(); } catch (_) { /* shown by fn */ }
    if (!stopped) timer = setTimeout(tick, ms);
  };
  tick();
  onLeave(() => { stopped = true; clearTimeout(timer); });
}

// ---------- threads ----------

function threadsView(v) {
  const params = new URLSearchParams(location.search);
  const status = el('select', { id: 'f-status', 'aria-label': 'status' },
    ...['', 'running', 'completed', 'failed', 'aborted'].map((s) =>
      el('option', { value: s, text: s || 'any status', selected: params.get('status') === s })));
  const prefix = el('input', { id: 'f-thread', placeholder: 'thread id starts with…', value: params.get('prefix') || '' });
  const body = el('tbody', { id: 'threads-body' });
  const more = el('button', { id: 'more', class: 'small', hidden: true, text: 'Load more' });
  const err = el('div');
  v.append(el('h1', { text: 'Threads' }),
    el('div', { class: 'row' }, status, prefix),
    err,
    el('div', { class: 'tablewrap' }, el('table', { id: 'threads' },
      el('thead', {}, el('tr', {}, ...['Thread', 'Latest run', 'Status', 'Harness', 'Started', 'Duration', 'Exit / error']
        .map((h, i) => el('th', { class: i === 1 || i === 3 ? 'hide-sm' : '', text: h })))),
      body)), more);
  let pages = 1, cursor = null;
  const load = async () => {
    const q = new URLSearchParams({ limit: String(50 * pages) });
    if (status.value) q.set('status', status.value);
    if (prefix.value.trim()) q.set('prefix', prefix.value.trim());
    try {
      const js = await api(`/threads?${q}`);
      err.replaceChildren();
      cursor = js.nextCursor;
      more.hidden = !cursor;
      body.replaceChildren(...js.threads.map((t) => {
        const r = t.latestRun || {};
        return el('tr', { 'data-thread': t.threadId, 'data-run': r.runId },
          el('td', { class: 'id' }, el('a', { href: `/ui/threads/${enc(t.threadId)}`, 'data-link': true, text: t.threadId })),
          el('td', { class: 'id mono hide-sm' }, el('a', { href: runHref(t.threadId, r.runId), 'data-link': true, text: r.runId })),
          el('td', {}, badge(r.status)),
          el('td', { class: 'hide-sm', text: r.harness || '' }),
          el('td', { text: fmtTime(r.startedAt) }),
          el('td', { text: duration(r) }),
          el('td', { text: outcome(r) }));
      }));
      if (!js.threads.length) body.append(el('tr', {}, el('td', { colspan: 7, class: 'muted', text: 'No threads.' })));
    } catch (e) {
      err.replaceChildren(errorBox(e));
    }
  };
  const refilter = () => {
    const q = new URLSearchParams();
    if (status.value) q.set('status', status.value);
    if (prefix.value.trim()) q.set('prefix', prefix.value.trim());
    history.replaceState(null, '', `/ui/${q.toString() ? `?${q}` : ''}`);
    pages = 1;
    load();
  };
  status.addEventListener('change', refilter);
  prefix.addEventListener('input', refilter);
  more.addEventListener('click', () => { pages++; load(); });
  every(2000, load);
}

// ---------- one thread: runs, workspace, snapshots ----------

function threadView(v, tid) {
  const runs = el('tbody');
  const err = el('div');
  v.append(el('h1', {}, 'Thread ', el('span', { class: 'mono', text: tid })), err,
    el('h2', { text: 'Runs' }),
    el('div', { class: 'tablewrap' }, el('table', { id: 'runs' },
      el('thead', {}, el('tr', {}, ...['Run', 'Status', 'Harness', 'Started', 'Duration', 'Exit / error'].map((h) => el('th', { text: h })))),
      runs)));
  every(3000, async () => {
    try {
      const list = await api(`/threads/${enc(tid)}/runs`);
      err.replaceChildren();
      runs.replaceChildren(...list.map((r) => el('tr', { 'data-run': r.runId },
        el('td', { class: 'id mono' }, el('a', { href: runHref(tid, r.runId), 'data-link': true, text: r.runId })),
        el('td', {}, badge(r.status)), el('td', { text: r.harness || '' }),
        el('td', { text: fmtTime(r.startedAt) }), el('td', { text: duration(r) }), el('td', { text: outcome(r) }))));
    } catch (e) {
      err.replaceChildren(errorBox(e));
    }
  });
  v.append(workspace(tid), snapshots(tid));
}

function workspace(tid) {
  const box = el('section', { id: 'workspace' });
  const list = el('ul', { class: 'files' });
  const crumbs = el('div', { class: 'row mono' });
  const viewer = el('div');
  const err = el('div');
  box.append(el('h2', { text: 'Workspace' }), crumbs, err, list, viewer);
  const filesUrl = (p) => `/threads/${enc(tid)}/files/${p.split('/').map(enc).join('/')}`;
  const open = async (dir) => {
    crumbs.replaceChildren(el('a', { href: '#', onclick: (e) => { e.preventDefault(); open(''); }, text: '/workspace' }));
    let acc = '';
    for (const seg of dir.split('/').filter(Boolean)) {
      acc += (acc ? '/' : '') + seg;
      const here = acc;
      crumbs.append(' / ', el('a', { href: '#', onclick: (e) => { e.preventDefault(); open(here); }, text: seg }));
    }
    try {
      const js = await api(filesUrl(dir));
      err.replaceChildren();
      const entries = (js.entries || []).slice().sort((a, b) =>
        (a.type !== 'directory') - (b.type !== 'directory') || a.name.localeCompare(b.name));
      list.replaceChildren(...entries.map((e) => {
        const p = dir ? `${dir}/${e.name}` : e.name;
        const isDir = e.type === 'directory';
        return el('li', { 'data-name': e.name },
          el('a', { href: '#', class: 'mono', onclick: (ev) => { ev.preventDefault(); isDir ? open(p) : show(p); },
            text: isDir ? `${e.name}/` : e.name }),
          el('span', { class: 'muted', text: isDir ? '' : `  ${e.size} B` }),
          isDir ? null : el('button', { class: 'small', type: 'button', onclick: () => download(p, e.name), text: 'Download' }));
      }));
      if (!entries.length) list.append(el('li', { class: 'muted', text: '(empty)' }));
    } catch (e) {
      err.replaceChildren(errorBox(e.status === 404 ? new Error('no workspace yet (no sandbox for this thread)') : e));
      list.replaceChildren();
    }
  };
  const show = async (p) => {
    try {
      const r = await api(filesUrl(p), { raw: true });
      const buf = new Uint8Array(await r.arrayBuffer());
      const head = buf.subarray(0, 8192);
      const binary = head.includes(0);
      viewer.replaceChildren(el('h2', { class: 'mono', text: p }),
        binary ? el('p', { class: 'muted', text: `binary file, ${buf.length} bytes` })
          : el('pre', { class: 'viewer', id: 'file-view', text: new TextDecoder().decode(buf.subarray(0, 2 * 1024 * 1024)) }));
    } catch (e) {
      viewer.replaceChildren(errorBox(e));
    }
  };
  const download = async (p, name) => {
    const r = await api(filesUrl(p), { raw: true });
    const url = URL.createObjectURL(await r.blob());
    const a = el('a', { href: url, download: name });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  };
  open('');
  return box;
}

function snapshots(tid) {
  const key = `runwarden.snapshots.${tid}`;
  const known = () => JSON.parse(sessionStorage.getItem(key) || '[]');
  const box = el('section', { id: 'snapshots' });
  const label = el('input', { placeholder: 'label (optional)' });
  const list = el('ul', { class: 'files' });
  const paste = el('input', { placeholder: 'snapshot id to restore', class: 'mono' });
  const msg = el('div');
  const render = () => list.replaceChildren(...known().map((s) => el('li', {},
    el('span', { class: 'mono', text: `${fmtTime(s.at)} ${s.label || ''} ` }),
    el('button', { class: 'small danger', type: 'button', onclick: () => restore(s.id), text: 'Restore' }))));
  const restore = async (id) => {
    if (!id) return;
    if (!window.confirm('Replace the workspace of this thread with the snapshot? Files written since are lost.')) return;
    try {
      await api(`/threads/${enc(tid)}/restore`, { method: 'POST', json: { snapshotId: id } });
      msg.replaceChildren(el('p', { class: 'muted', text: 'Restored.' }));
    } catch (e) {
      msg.replaceChildren(errorBox(e));
    }
  };
  box.append(el('h2', { text: 'Snapshots' }),
    el('div', { class: 'row' }, label, el('button', { type: 'button', id: 'snap-take', onclick: async () => {
      try {
        const js = await api(`/threads/${enc(tid)}/snapshots`, { method: 'POST', json: label.value ? { label: label.value } : {} });
        sessionStorage.setItem(key, JSON.stringify([{ id: js.snapshotId, label: label.value, at: Date.now() }, ...known()].slice(0, 50)));
        msg.replaceChildren(el('p', { class: 'muted', text: 'Snapshot taken.' }));
        render();
      } catch (e) {
        msg.replaceChildren(errorBox(e));
      }
    }, text: 'Take snapshot' })),
    msg, list,
    el('div', { class: 'row' }, paste, el('button', { type: 'button', class: 'danger', onclick: () => restore(paste.value.trim()), text: 'Restore id' })),
    el('p', { class: 'muted', text: 'Snapshots taken from this tab are listed here; the API has no listing, keep the ids you need.' }));
  render();
  return box;
}

// ---------- health ----------

const METRICS = [
  ['runwarden_router_coordinator_up', 'coordinator up'],
  ['runwarden_runs_active', 'runs active'],
  ['runwarden_sandboxes_busy', 'sandboxes running a run'],
  ['runwarden_sandboxes_queued', 'sandboxes queued'],
  ['runwarden_router_live_tails', 'live tails'],
  ['runwarden_runlog_used_bytes', 'run log used (bytes)'],
  ['runwarden_runlog_map_bytes', 'run log limit (bytes)'],
  ['runwarden_events_appended_total', 'events appended'],
  ['runwarden_runlog_over_warn', 'run log over its warning level'],
  ['runwarden_watchdog_kills_total', 'watchdog kills'],
];

function parseMetrics(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = line.match(/^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/);
    if (m) out.set(m[1] + (m[2] || ''), Number(m[3]));
  }
  return out;
}

async function updateDot() {
  const dot = $('#health-dot');
  try {
    const r = await api('/readyz', { raw: true }).catch((e) => e);
    const ok = r && r.ok;
    dot.className = `dot ${ok ? 'ok' : 'bad'}`;
    dot.title = ok ? 'ready' : 'not ready';
  } catch (_) {
    dot.className = 'dot bad';
  }
}

function healthView(v) {
  const ready = el('pre', { class: 'viewer', id: 'readyz' });
  const grid = el('div', { class: 'grid', id: 'metrics' });
  const all = el('pre', { class: 'viewer' });
  v.append(el('h1', { text: 'Health' }), el('h2', { text: 'Readiness (/readyz)' }), ready,
    el('h2', { text: 'Metrics' }), grid,
    el('details', {}, el('summary', { text: 'All metrics (/metrics)' }), all));
  every(3000, async () => {
    const r = await fetch('/readyz', { headers: authHeaders(), cache: 'no-store' });
    ready.textContent = `${r.status}  ${await r.text()}`;
    try {
      const text = await api('/metrics');
      all.textContent = text;
      const m = parseMetrics(text);
      const cards = [];
      const used = m.get('runwarden_runlog_used_bytes'), map = m.get('runwarden_runlog_map_bytes');
      if (used !== undefined && map) {
        cards.push(el('div', { class: 'card', id: 'storage' }, el('div', { class: 'muted', text: 'run log storage' }),
          el('div', { class: 'v', text: `${(100 * used / map).toFixed(1)} %` }),
          el('div', { class: 'muted', text: `${(used / 2 ** 20).toFixed(1)} MiB of ${(map / 2 ** 20).toFixed(0)} MiB` })));
      }
      for (const [name, label] of METRICS) {
        const hits = [...m].filter(([k]) => k === name || k.startsWith(`${name}{`));
        for (const [k, val] of hits) cards.push(el('div', { class: 'card' }, el('div', { class: 'muted', text: k === name ? label : `${label} ${k.slice(name.length)}` }), el('div', { class: 'v', text: String(val) })));
      }
      for (const [k, val] of m) {
        if (/storage|disk|bytes/.test(k) && !METRICS.some(([n]) => k.startsWith(n))) {
          cards.push(el('div', { class: 'card' }, el('div', { class: 'muted', text: k }), el('div', { class: 'v', text: String(val) })));
        }
      }
      grid.replaceChildren(...cards);
    } catch (e) {
      grid.replaceChildren(errorBox(e));
    }
  });
}

function authHeaders() {
  const tok = sessionStorage.getItem(TOKEN_KEY);
  return tok ? { Authorization: `Bearer ${tok}` } : {};
}

// ---------- virtual list: renders only what is visible ----------

class VirtualList {
  // render(i) → element for item i; estimate: px for unmeasured items;
  // fixed: every item has exactly estimate px (no measuring).
  constructor(container, { render, estimate = 40, fixed = false }) {
    this.c = container;
    this.render = render;
    this.est = estimate;
    this.fixed = fixed;
    this.n = 0;
    this.h = new Float64Array(1024);
    this.known = new Uint8Array(1024);
    this.inner = el('div', { class: 'inner' });
    this.win = el('div', { class: 'win' });
    this.inner.append(this.win);
    this.c.append(this.inner);
    this.follow = true;
    this.dirty = new Set();
    this.frame = 0;
    this.c.addEventListener('scroll', () => {
      this.follow = this.c.scrollTop + this.c.clientHeight >= this.c.scrollHeight - 4;
      this.schedule();
    });
    new ResizeObserver(() => this.schedule()).observe(this.c);
  }

  setCount(n) {
    if (n > this.h.length) {
      let cap = this.h.length;
      while (cap < n) cap *= 2;
      const h = new Float64Array(cap); h.set(this.h); this.h = h;
      const k = new Uint8Array(cap); k.set(this.known); this.known = k;
    }
    this.n = n;
    this.schedule();
  }

  invalidate(i) { this.dirty.add(i); this.schedule(); }

  schedule() {
    if (!this.frame) this.frame = requestAnimationFrame(() => { this.frame = 0; this.draw(); });
  }

  height(i) { return this.fixed || !this.known[i] ? this.est : this.h[i]; }

  draw() {
    const n = this.n;
    let total = 0;
    const top = this.c.scrollTop, bottom = top + this.c.clientHeight + 200;
    let first = -1, firstTop = 0, last = -1;
    if (this.fixed) {
      total = n * this.est;
      const wantTop = this.follow ? Math.max(0, total - this.c.clientHeight) : top;
      first = Math.max(0, Math.floor((wantTop - 200) / this.est));
      firstTop = first * this.est;
      last = Math.min(n - 1, Math.ceil((wantTop + this.c.clientHeight + 200) / this.est));
    } else {
      for (let i = 0; i < n; i++) {
        const hi = this.height(i);
        if (first < 0 && total + hi >= top - 200) { first = i; firstTop = total; }
        if (total < bottom) last = i;
        total += hi;
      }
      if (this.follow && n > 0) {
        // keep the end in view: render from the end back over a screenful
        let acc = 0; last = n - 1; first = n - 1;
        while (first > 0 && acc < this.c.clientHeight + 200) { acc += this.height(first); first--; }
        firstTop = total;
        for (let i = n - 1; i >= first; i--) firstTop -= this.height(i);
      }
    }
    if (first < 0) { first = 0; firstTop = 0; last = -1; }
    this.inner.style.height = `${total}px`;
    this.win.style.transform = `translateY(${firstTop}px)`;
    const kids = [];
    for (let i = first; i <= last; i++) {
      const e = this.render(i);
      e.dataset.idx = String(i);
      kids.push(e);
    }
    this.win.replaceChildren(...kids);
    this.dirty.clear();
    let changed = false;
    if (!this.fixed) {
      for (const e of kids) {
        const i = Number(e.dataset.idx);
        const hh = e.offsetHeight;
        if (!this.known[i] || Math.abs(this.h[i] - hh) > 0.5) { this.h[i] = hh; this.known[i] = 1; changed = true; }
      }
    }
    if (changed) {
      let t = 0;
      for (let i = 0; i < n; i++) t += this.height(i);
      this.inner.style.height = `${t}px`;
      let ft = 0;
      for (let i = 0; i < first; i++) ft += this.height(i);
      this.win.style.transform = `translateY(${ft}px)`;
    }
    if (this.follow) this.c.scrollTop = this.c.scrollHeight;
  }
}

// ---------- a run: the events folded into conversation blocks ----------

class RunModel {
  constructor() {
    this.events = []; // {seq, chunk, at}
    this.blocks = [];
    this.byMsg = new Map();
    this.byTool = new Map();
    this.term = null; // the open terminal block
    this.termState = { stdout: initialState(), stderr: initialState() };
    this.t0 = null;
    this.changed = new Set();
  }

  add(b) { this.blocks.push(b); return b; }

  touch(b) { this.changed.add(b); }

  ingest(seq, chunk) {
    const at = typeof chunk.timestamp === 'number' ? chunk.timestamp : Date.now();
    if (this.t0 === null) this.t0 = at;
    this.events.push({ seq, chunk, at });
    const ty = String(chunk.type || '');
    if (ty !== 'CUSTOM' || !/^process\.std(out|err)$/.test(chunk.name || '')) this.term = null;
    switch (true) {
      case ty === 'TEXT_MESSAGE_START': {
        const b = this.add({ kind: 'text', role: chunk.role || 'assistant', text: '' });
        this.byMsg.set(chunk.messageId, b);
        break;
      }
      case ty === 'TEXT_MESSAGE_CONTENT' || ty === 'TEXT_MESSAGE_CHUNK': {
        let b = this.byMsg.get(chunk.messageId);
        if (!b || b !== this.blocks[this.blocks.length - 1] && ty === 'TEXT_MESSAGE_CHUNK' && !chunk.messageId) {
          b = this.add({ kind: 'text', role: chunk.role || 'assistant', text: '' });
          if (chunk.messageId) this.byMsg.set(chunk.messageId, b);
        }
        b.text += chunk.delta || '';
        this.touch(b);
        break;
      }
      case ty === 'TEXT_MESSAGE_END':
        break;
      case /^(REASONING|THINKING)/.test(ty): {
        const delta = chunk.delta || '';
        let b = this.blocks[this.blocks.length - 1];
        if (/_START$/.test(ty) && !/MESSAGE/.test(ty) || !b || b.kind !== 'reasoning') {
          if (/_END$/.test(ty)) break;
          b = this.add({ kind: 'reasoning', text: '' });
        }
        b.text += delta;
        this.touch(b);
        break;
      }
      case ty === 'TOOL_CALL_START' || ty === 'TOOL_CALL_CHUNK': {
        let b = this.byTool.get(chunk.toolCallId);
        if (!b) {
          b = this.add({ kind: 'tool', id: chunk.toolCallId, name: chunk.toolCallName || 'tool', args: '', result: null, done: false });
          this.byTool.set(chunk.toolCallId, b);
        }
        if (chunk.delta) b.args += chunk.delta;
        this.touch(b);
        break;
      }
      case ty === 'TOOL_CALL_ARGS': {
        const b = this.byTool.get(chunk.toolCallId) || this.add({ kind: 'tool', id: chunk.toolCallId, name: 'tool', args: '', result: null });
        this.byTool.set(chunk.toolCallId, b);
        b.args += chunk.delta || '';
        this.touch(b);
        break;
      }
      case ty === 'TOOL_CALL_END': {
        const b = this.byTool.get(chunk.toolCallId);
        if (b) { b.done = true; this.touch(b); }
        break;
      }
      case ty === 'TOOL_CALL_RESULT': {
        const b = this.add({ kind: 'result', id: chunk.toolCallId, content: chunk.content, call: this.byTool.get(chunk.toolCallId) });
        this.touch(b);
        break;
      }
      case ty === 'CUSTOM' && /^process\.std(out|err)$/.test(chunk.name || ''): {
        const stream = chunk.name.slice(8);
        const v = chunk.value;
        const text = typeof v === 'string' ? v : v && typeof v.text === 'string' ? v.text : '';
        this.termText(stream, text);
        break;
      }
      case ty === 'RUN_ERROR':
        this.add({ kind: 'error', text: chunk.message || 'error', code: chunk.code });
        break;
      case ty === 'RUN_STARTED' || ty === 'RUN_FINISHED':
        this.add({ kind: 'marker', text: ty === 'RUN_STARTED' ? 'run started' : `run finished${chunk.outcome ? ` (${typeof chunk.outcome === 'string' ? chunk.outcome : (typeof chunk.outcome.type === 'string' ? chunk.outcome.type : JSON.stringify(chunk.outcome))})` : ''}` });
        break;
      default:
        this.add({ kind: 'other', text: `${ty}${chunk.name ? ` ${chunk.name}` : ''}`, json: chunk });
    }
  }

  termText(stream, text) {
    let b = this.term;
    if (!b || b.stream !== stream || b.lines.length >= TERM_LINES) {
      if (b && b.stream === stream && b.partial !== '') {
        // a line in progress continues in the next block
      }
      const carry = b && b.stream === stream ? b.partial : '';
      if (b && b.stream === stream) b.partial = '';
      b = this.add({ kind: 'term', stream, lines: [], partial: carry });
      this.term = b;
    }
    const parts = (b.partial + text).split('\n');
    b.partial = parts.pop();
    for (const line of parts) {
      b.lines.push(parseLine(line, this.termState[stream]));
      if (b.lines.length >= TERM_LINES && parts.length) {
        // spill over into a new block (keeps blocks small for the virtual list)
        const nb = this.add({ kind: 'term', stream, lines: [], partial: '' });
        this.touch(b);
        b = nb;
        this.term = b;
      }
    }
    this.touch(b);
  }
}

function renderBlock(b) {
  switch (b.kind) {
    case 'text':
      return el('div', { class: `blk text ${b.role === 'user' ? 'user' : ''}` }, el('span', { class: 'who', text: b.role }), b.text);
    case 'reasoning': {
      const d = el('details', { class: 'blk reasoning' }, el('summary', { text: `reasoning (${b.text.length} chars)` }), el('div', { class: 'body', text: b.text }));
      if (b.open) d.open = true;
      d.addEventListener('toggle', () => { b.open = d.open; });
      return el('div', { class: 'blk reasoning' }, d);
    }
    case 'tool': {
      let args = b.args;
      try { args = JSON.stringify(JSON.parse(b.args), null, 2); } catch (_) { /* partial JSON */ }
      return el('div', { class: 'blk' }, el('div', { class: 'tool', 'data-tool': b.name },
        el('span', { class: 'name', text: `⚙ ${b.name}` }), el('span', { class: 'muted', text: b.done ? '' : ' …' }),
        el('pre', { class: 'mono', text: args })));
    }
    case 'result': {
      let c = b.content;
      if (typeof c !== 'string') c = JSON.stringify(c);
      let shown = c;
      try { shown = JSON.stringify(JSON.parse(c), null, 2); } catch (_) { /* text */ }
      const pre = el('pre', { class: 'mono' });
      renderSpans(parseLine(shown.length > 4000 ? `${shown.slice(0, 4000)}…` : shown, initialState()), pre);
      const body = shown.length > 300 ? el('details', {}, el('summary', { text: `result (${shown.length} chars)` }), pre) : pre;
      return el('div', { class: 'blk' }, el('div', { class: 'tool result' }, el('span', { class: 'name', text: `↳ ${b.call ? b.call.name : 'tool'} result` }), body));
    }
    case 'term': {
      const pre = el('pre', {});
      b.lines.forEach((l, i) => { if (i) pre.append('\n'); renderSpans(l, pre); });
      if (b.partial) { if (b.lines.length) pre.append('\n'); renderSpans(parseLine(b.partial, { ...initialState() }), pre); }
      return el('div', { class: `blk term ${b.stream}` }, el('span', { class: 'lbl', text: b.stream }), pre);
    }
    case 'error':
      return el('div', { class: 'blk error', role: 'alert', text: `✖ ${b.text}${b.code ? ` (${b.code})` : ''}` });
    case 'marker':
      return el('div', { class: 'blk marker', text: `— ${b.text} —` });
    default: {
      const d = el('details', {}, el('summary', { text: b.text }), el('pre', { class: 'mono', text: JSON.stringify(b.json, null, 2) }));
      return el('div', { class: 'blk other' }, d);
    }
  }
}

function timelineRow(m, i) {
  const e = m.events[i];
  const prev = i > 0 ? m.events[i - 1] : null;
  const gap = prev ? e.at - prev.at : 0;
  const c = e.chunk;
  let what = '';
  if (c.delta) what = c.delta;
  else if (c.name) what = `${c.name} ${c.value && typeof c.value.text === 'string' ? c.value.text : JSON.stringify(c.value ?? '')}`;
  else if (c.message) what = c.message;
  else if (c.content) what = typeof c.content === 'string' ? c.content : JSON.stringify(c.content);
  else if (c.toolCallName) what = c.toolCallName;
  return el('div', { class: `tl mono ${gap >= 1000 ? 'gap' : ''} ${c.type === 'RUN_ERROR' ? 'err' : ''}`, title: gap >= 1000 ? `${fmtDur(gap)} after the previous event` : '' },
    el('span', { class: 't', text: `+${((e.at - m.t0) / 1000).toFixed(3)}s` }),
    el('span', { class: 'seq', text: `#${e.seq}` }),
    el('span', { class: 'ty', text: c.type || '?' }),
    what.replace(/\x1b\[[0-9;]*m/g, '').slice(0, 300));
}

function b64url(s) {
  const bytes = new TextEncoder().encode(s);
  let bin = '';
  bytes.forEach((b) => { bin += String.fromCharCode(b); });
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

function runView(v, tid, rid) {
  const m = new RunModel();
  const state = { rec: null, lastSeq: -1, ws: null, done: false, reconnects: 0, dupes: 0, closed: false };
  window.__rw = { model: m, state };
  const head = el('div', { class: 'runhead' });
  const live = el('span', { class: 'live', id: 'live' });
  const cancel = el('button', { class: 'danger', id: 'cancel', type: 'button', hidden: true, text: 'Cancel run' });
  const err = el('div');
  const convBox = el('div', { class: 'vlist', id: 'conversation' });
  const tlBox = el('div', { class: 'vlist', id: 'timeline', hidden: true });
  const tabConv = el('button', { class: 'on', type: 'button', text: 'Conversation' });
  const tabTl = el('button', { type: 'button', id: 'tab-timeline', text: 'Timeline' });
  v.append(el('h1', {}, el('a', { href: `/ui/threads/${enc(tid)}`, 'data-link': true, text: tid }), ' / ', el('span', { class: 'mono', text: rid })),
    head, err,
    el('div', { class: 'tabs' }, tabConv, tabTl, el('a', { href: `/ui/threads/${enc(tid)}`, 'data-link': true, class: 'muted', text: 'Workspace ↗' })),
    convBox, tlBox);
  const conv = new VirtualList(convBox, { render: (i) => renderBlock(m.blocks[i]), estimate: 48 });
  const tl = new VirtualList(tlBox, { render: (i) => timelineRow(m, i), estimate: 22, fixed: true });
  tabConv.addEventListener('click', () => { convBox.hidden = false; tlBox.hidden = true; tabConv.classList.add('on'); tabTl.classList.remove('on'); conv.schedule(); });
  tabTl.addEventListener('click', () => { convBox.hidden = true; tlBox.hidden = false; tabTl.classList.add('on'); tabConv.classList.remove('on'); tl.schedule(); });

  const renderHead = () => {
    const r = state.rec || {};
    head.replaceChildren(badge(r.status), el('span', { text: r.harness ? `harness ${r.harness}` : '' }),
      el('span', { text: `started ${fmtTime(r.startedAt)}` }), el('span', { id: 'duration', text: duration(r) }),
      el('span', { id: 'outcome', text: outcome(r) }), live, cancel);
    head.dataset.status = r.status || '';
    cancel.hidden = r.status !== 'running';
    if (r.error && r.status !== 'running' && !m.blocks.some((b) => b.kind === 'error')) {
      err.replaceChildren(errorBox(Object.assign(new Error(r.error.message || 'failed'), { code: r.error.code })));
    }
  };
  cancel.addEventListener('click', async () => {
    cancel.disabled = true;
    try {
      state.rec = (await api(`/runs/${enc(rid)}/cancel?threadId=${enc(tid)}`, { method: 'POST' })).record || state.rec;
    } catch (e) {
      err.replaceChildren(errorBox(e));
    }
    cancel.disabled = false;
  });

  let pending = false;
  const flush = () => {
    pending = false;
    conv.setCount(m.blocks.length);
    tl.setCount(m.events.length);
    m.changed.clear();
  };
  const onEvent = (seq, chunk) => {
    if (seq <= state.lastSeq) { state.dupes++; return; } // a resumed tail never repeats
    if (seq !== state.lastSeq + 1) console.warn(`gap in events: ${state.lastSeq} → ${seq}`);
    state.lastSeq = seq;
    m.ingest(seq, chunk);
    if (!pending) { pending = true; requestAnimationFrame(flush); }
  };

  const connect = async () => {
    if (state.closed || state.done) return;
    const tok = sessionStorage.getItem(TOKEN_KEY);
    const protos = tok ? ['runwarden', `bearer.${b64url(tok)}`] : ['runwarden'];
    const proto = location.protocol === 'https:' ? 'wss' : 'ws';
    const ws = new WebSocket(`${proto}://${location.host}/runs/${enc(rid)}/stream?threadId=${enc(tid)}&lastSeq=${state.lastSeq}`, protos);
    state.ws = ws;
    window.__rw.ws = ws;
    let opened = false;
    ws.onopen = () => { opened = true; live.textContent = '● live'; };
    ws.onmessage = (msg) => {
      let js;
      try { js = JSON.parse(msg.data); } catch (_) { return; }
      if (js.type === 'status') {
        state.done = true;
        state.rec = js.record;
        renderHead();
      } else if (typeof js.seq === 'number') onEvent(js.seq, js.chunk || {});
    };
    ws.onclose = async (ev) => {
      if (state.ws === ws) state.ws = null;
      live.textContent = state.done ? '' : '○ reconnecting…';
      if (state.done || state.closed) return;
      if (!opened) {
        // refused at the handshake: 401 (token) or 404; ask the API which
        try {
          state.rec = await api(`/runs/${enc(rid)}?threadId=${enc(tid)}`);
          renderHead();
        } catch (e) {
          err.replaceChildren(errorBox(e));
          if (e.status === 404 || e.status === 403) return;
        }
      }
      state.reconnects++;
      const delay = Math.min(5000, 250 * 2 ** Math.min(state.reconnects, 5));
      setTimeout(connect, ev.code === 1000 ? 0 : delay);
    };
  };
  onLeave(() => { state.closed = true; if (state.ws) state.ws.close(); });

  (async () => {
    try {
      state.rec = await api(`/runs/${enc(rid)}?threadId=${enc(tid)}`);
    } catch (e) {
      err.replaceChildren(errorBox(e));
      if (e.status === 404 || e.status === 403 || e.status === 400) return;
    }
    if (state.rec && state.rec.startedAt && m.t0 === null) m.t0 = state.rec.startedAt; // time from the run's start
    renderHead();
    connect();
  })();
  every(1000, async () => { if (state.rec && state.rec.status === 'running') { $('#duration') && ($('#duration').textContent = duration(state.rec)); } });
  // the record (status, exit code) while the run goes on
  every(3000, async () => {
    if (state.done || !state.rec) return;
    try { state.rec = await api(`/runs/${enc(rid)}?threadId=${enc(tid)}`); renderHead(); } catch (_) { /* the tail shows it */ }
  });
}

// ---------- start ----------

setupToken();
updateDot();
setInterval(updateDot, 5000);
route();
