// SPDX-License-Identifier: MIT
// The run viewer (/ui/) in headless Chromium against the real daemons
// (tests/e2e/t_ui.py starts them). env: RW_URL, RW_TOKEN, RW_ARTIFACTS.
// Prints one JSON line {ok, foreign, ...}; exits 1 on a failed check.
import { launchChromium } from './chromium.mjs';
import path from 'node:path';

const base = process.env.RW_URL;
const token = process.env.RW_TOKEN;
const out = process.env.RW_ARTIFACTS || '.';
const origin = new URL(base).origin;
const wsOrigin = origin.replace(/^http/, 'ws');
const T = 60000;
// the run's output (the command itself shows in the tool call's arguments)
const termText = () => [...document.querySelectorAll('#conversation .term')].map((e) => e.textContent).join('\n'); // generous waits: the machine is shared; no timed assertion

async function api(method, p, body, raw) {
  const headers = { Authorization: `Bearer ${token}` };
  if (body !== undefined && !raw) headers['Content-Type'] = 'application/json';
  const r = await fetch(base + p, { method, headers, body: raw ? body : body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  if (r.status >= 300) throw new Error(`${method} ${p}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const startRun = async (thread, command) =>
  (await api('POST', '/runs', { threadId: thread, messages: [{ role: 'user', content: command }] })).runId;
const putFile = (thread, name) => api('PUT', `/threads/${thread}/files/${name}`, 'x', true);

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

const foreign = [];
const result = { ok: false, foreign };
const browser = await launchChromium();
try {
  const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
  const logs = [];
  page.on('console', (m) => logs.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => logs.push(`pageerror: ${e.message}`));
  page.on('request', (r) => { if (!r.url().startsWith(`${origin}/`) && !r.url().startsWith('blob:')) foreign.push(r.url()); });
  page.on('websocket', (w) => { if (!w.url().startsWith(`${wsOrigin}/`)) foreign.push(w.url()); });
  const dialogs = [];
  page.on('dialog', (d) => { dialogs.push(d.type()); d.accept(); });
  result.logs = logs;

  // a run that waits for files the test writes, so "live" needs no timing
  const live = await startRun('ui-live',
    'echo first-line; while [ ! -e go1 ]; do sleep 0.05; done; echo second-line; ' +
    'while [ ! -e go2 ]; do sleep 0.05; done; printf "\\033[31mred-text\\033[0m\\n"; ' +
    'echo hello-from-run > note.txt; echo third-line');

  // 1. the token is asked once, then the threads list shows the run
  await page.goto(`${base}/ui/`);
  await page.waitForSelector('#token-dialog[open]', { timeout: T });
  await page.fill('#token-input', token);
  await page.click('#token-save');
  const row = `#threads-body tr[data-run="${live}"]`;
  await page.waitForSelector(row, { timeout: T });
  check(await page.textContent(`${row} .badge`) === 'running', 'the new run is listed as running');
  await page.screenshot({ path: path.join(out, 'runs.png') });

  // 2. the run page, live
  await page.click(`${row} td:nth-child(2) a`);
  await page.waitForURL(`**/ui/threads/ui-live/runs/${live}`);
  await page.waitForFunction(() => [...document.querySelectorAll('#conversation .term')].some((e) => e.textContent.includes('first-line')), null, { timeout: T });
  check(!(await page.evaluate(termText)).includes('second-line'), 'the run is still waiting');
  await putFile('ui-live', 'go1');
  await page.waitForFunction(() => [...document.querySelectorAll('#conversation .term')].some((e) => e.textContent.includes('second-line')), null, { timeout: T });

  // 3. drop the WebSocket; the page resumes from its lastSeq
  const before = await page.evaluate(() => window.__rw.state.reconnects);
  await page.evaluate(() => window.__rw.ws.close(4000, 'test drop'));
  await page.waitForFunction((n) => window.__rw.state.reconnects > n && window.__rw.ws && window.__rw.ws.readyState === 1, before, { timeout: T });
  await putFile('ui-live', 'go2');
  await page.waitForFunction(() => document.querySelector('.runhead')?.dataset.status === 'completed', null, { timeout: T });
  await page.waitForFunction(() => [...document.querySelectorAll('#conversation .term')].some((e) => e.textContent.includes('third-line')), null, { timeout: T });
  const conv = await page.evaluate(termText);
  for (const w of ['first-line', 'second-line', 'third-line', 'red-text']) {
    check(conv.split(w).length - 1 === 1, `${w} shown exactly once (${conv.split(w).length - 1})`);
  }
  check(!conv.includes('\x1b') && !conv.includes('[31m'), 'no raw escape codes');
  check(await page.locator('#conversation span.f1', { hasText: 'red-text' }).count() === 1, 'ANSI red rendered');
  const seqs = await page.evaluate(() => window.__rw.model.events.map((e) => e.seq));
  check(seqs.every((s, i) => s === i), `events contiguous, no duplicate: ${seqs}`);
  const rec = await api('GET', `/runs/${live}?threadId=ui-live`);
  check(seqs.length === rec.lastSeq + 1, `every event shown (${seqs.length} of ${rec.lastSeq + 1})`);
  result.reconnects = await page.evaluate(() => window.__rw.state.reconnects);
  await page.screenshot({ path: path.join(out, 'run.png') });
  await page.click('#tab-timeline');
  await page.waitForSelector('#timeline .tl', { timeout: T });
  await page.screenshot({ path: path.join(out, 'timeline.png') });

  // 4. a file written by the run opens in the workspace browser
  await page.click('.tabs a');
  await page.waitForSelector('#workspace li[data-name="note.txt"] a', { timeout: T });
  await page.click('#workspace li[data-name="note.txt"] a');
  await page.waitForFunction(() => document.querySelector('#file-view')?.textContent.includes('hello-from-run'), null, { timeout: T });
  await page.screenshot({ path: path.join(out, 'files.png'), fullPage: true });

  // 4b. snapshots: take one, then restore it (the confirmation is accepted)
  await page.click('#snap-take');
  await page.waitForFunction(() => /Snapshot taken|error/i.test(document.querySelector('#snapshots')?.textContent || ''), null, { timeout: T });
  check((await page.textContent('#snapshots')).includes('Snapshot taken'), `snapshot taken: ${await page.textContent('#snapshots')}`);
  dialogs.length = 0;
  await page.click('#snapshots li button');
  await page.waitForFunction(() => /Restored\.|\(\w+\)/.test(document.querySelector('#snapshots')?.textContent || ''), null, { timeout: T });
  check((await page.textContent('#snapshots')).includes('Restored.'), `restored: ${await page.textContent('#snapshots')}`);
  check(dialogs.length === 1 && dialogs[0] === 'confirm', `restore asked for a confirmation: ${dialogs}`);

  // 5. Cancel stops a running run
  const long = await startRun('ui-cancel', 'echo waiting-forever; sleep 600');
  await page.goto(`${base}/ui/threads/ui-cancel/runs/${long}`);
  await page.waitForFunction(() => [...document.querySelectorAll('#conversation .term')].some((e) => e.textContent.includes('waiting-forever')), null, { timeout: T });
  await page.waitForSelector('#cancel:not([hidden])', { timeout: T });
  await page.click('#cancel');
  await page.waitForFunction(() => document.querySelector('.runhead')?.dataset.status === 'aborted', null, { timeout: T });
  check((await api('GET', `/runs/${long}?threadId=ui-cancel`)).status === 'aborted', 'the run is aborted');
  await page.screenshot({ path: path.join(out, 'cancelled.png') });

  // 6. health, and a phone-width view of a run
  await page.goto(`${base}/ui/health`);
  await page.waitForFunction(() => /^\d{3} /.test(document.querySelector('#readyz')?.textContent || ''), null, { timeout: T });
  result.readyz = await page.textContent('#readyz');
  await page.waitForSelector('#metrics #storage', { timeout: T });
  await page.screenshot({ path: path.join(out, 'health.png') });
  await page.setViewportSize({ width: 390, height: 800 });
  await page.goto(`${base}/ui/threads/ui-live/runs/${live}`);
  await page.waitForFunction(() => [...document.querySelectorAll('#conversation .term')].some((e) => e.textContent.includes('third-line')), null, { timeout: T });
  await page.screenshot({ path: path.join(out, 'run-phone.png') });
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.screenshot({ path: path.join(out, 'run-phone-dark.png') });
  await page.emulateMedia({ colorScheme: 'light' });

  // 7. a run of 100k events: everything arrives, only what is visible is in the DOM
  const big = process.env.RW_BIG_RUN, bigN = Number(process.env.RW_BIG_EVENTS || 0);
  if (big) {
    await page.setViewportSize({ width: 1200, height: 800 });
    await page.goto(`${base}/ui/threads/ui-big/runs/${big}`);
    await page.waitForFunction((n) => window.__rw?.state.lastSeq === n - 1 && window.__rw.state.done, bigN, { timeout: 300000 });
    await page.waitForFunction(() => [...document.querySelectorAll('#conversation .term')].length > 0, null, { timeout: T });
    const dom = await page.evaluate(() => document.querySelectorAll('#conversation *, #timeline *').length);
    check(await page.evaluate(() => window.__rw.model.events.length) === bigN, 'every event held');
    // scroll the timeline to the middle: the rows there are rendered
    await page.click('#tab-timeline');
    await page.evaluate(() => { const t = document.querySelector('#timeline'); t.scrollTop = t.scrollHeight / 2; });
    await page.waitForFunction((n) => [...document.querySelectorAll('#timeline .tl .seq')].some((e) => Math.abs(Number(e.textContent.slice(1)) - n / 2) < 200), bigN, { timeout: T });
    const dom2 = await page.evaluate(() => document.querySelectorAll('#conversation *, #timeline *').length);
    result.bigDom = Math.max(dom, dom2);
    await page.screenshot({ path: path.join(out, 'big.png') });
  }

  // 8. deep links for every valid thread id (issue 30 item 9): '/', '..',
  // '?', '#', '%', spaces and non-ASCII in the id, in the path of the page
  await page.setViewportSize({ width: 1200, height: 800 });
  for (const tid of ['ui-/../b x?y#z%2F%', 'ui-é/ü ?#%25']) {
    const rid = await startRun(tid, 'echo deep-link-ok > deep.txt; echo deep-line');
    for (let i = 0; i < 600 && (await api('GET', `/runs/${rid}?threadId=${encodeURIComponent(tid)}`)).status !== 'completed'; i++)
      await new Promise((r) => setTimeout(r, 100));
    const href = `/ui/threads/${encodeURIComponent(tid)}/runs/${encodeURIComponent(rid)}`;
    await page.goto(base + href);
    await page.waitForFunction(() => [...document.querySelectorAll('#conversation .term')].some((e) => e.textContent.includes('deep-line')), null, { timeout: T });
    check(await page.textContent('h1 a') === tid, `the run page names the thread: ${await page.textContent('h1 a')}`);
    check(new URL(page.url()).pathname === href, `the link stays as it is: ${page.url()}`);
    // the thread page by its link, and a reload of it (a deep link too)
    await page.click('h1 a');
    await page.waitForSelector('#workspace li[data-name="deep.txt"] a', { timeout: T });
    await page.reload();
    await page.waitForSelector('#workspace li[data-name="deep.txt"] a', { timeout: T });
    check(await page.textContent('h1') !== null && (await page.textContent('h1')).includes(tid), `the thread page names it: ${await page.textContent('h1')}`);
  }

  check(!logs.some((l) => l.startsWith('pageerror') || /Content Security Policy/.test(l)), `no page error or CSP violation: ${logs.join(' | ')}`);
  result.ok = true;
} catch (e) {
  result.error = String(e.stack || e);
  for (const p of browser.contexts().flatMap((c) => c.pages())) {
    await p.screenshot({ path: path.join(out, 'failure.png') }).catch(() => {});
    result.failureHtml = (await p.content().catch(() => '')).slice(0, 3000);
  }
} finally {
  await browser.close();
}
console.log(JSON.stringify(result));
process.exit(result.ok && !foreign.length ? 0 : 1);
