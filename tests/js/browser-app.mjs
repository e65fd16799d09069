// SPDX-License-Identifier: MIT
// A React app with stock useChat (@tanstack/ai-react, bundled here with
// esbuild) on @runwarden/tanstack-client's adapters, in headless Chromium,
// against the real daemons (tests/e2e/t_browser_app.py starts them):
// cross-origin (a static server listed in cors_origins), same-origin (a Node
// proxy that rewrites Host only, as Vite's changeOrigin does, and routerd's
// ui_dir), on SSE, NDJSON and WebSocket.
// env: RW_URL, RW_TOKEN, RW_BAD_TOKEN, RW_APP_DIR (= the instance's ui_dir),
// RW_STATIC_PORT, RW_PROXY_PORT, RW_ARTIFACTS, RW_TRANSPORTS (optional).
// Prints one JSON line {ok, checks, ...}; exits 1 on a failed check.
import { launchChromium } from './chromium.mjs'
import * as esbuild from 'esbuild'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const here = path.dirname(fileURLToPath(import.meta.url))
const top = path.resolve(here, '..', '..')
const rw = process.env.RW_URL
const rwUrl = new URL(rw)
const token = process.env.RW_TOKEN
const badToken = process.env.RW_BAD_TOKEN
const appDir = process.env.RW_APP_DIR
const out = process.env.RW_ARTIFACTS || '.'
const staticPort = Number(process.env.RW_STATIC_PORT)
const proxyPort = Number(process.env.RW_PROXY_PORT)
const transports = (process.env.RW_TRANSPORTS || 'sse,ndjson,ws').split(',')
const T = 60000 // generous waits: the machine is shared; no timed assertion
const checks = []
const result = { ok: false, checks }

function check(cond, what, detail) {
  if (!cond) throw new Error(`check failed: ${what}${detail === undefined ? '' : `: ${JSON.stringify(detail)}`}`)
  checks.push(what)
}

// ---- the app, bundled as a developer would ----
fs.mkdirSync(appDir, { recursive: true })
await esbuild.build({
  entryPoints: [path.join(here, 'browser-app', 'app.jsx')],
  bundle: true,
  format: 'esm',
  jsx: 'automatic',
  minify: true,
  outfile: path.join(appDir, 'app.js'),
  define: { 'process.env.NODE_ENV': '"production"' },
  alias: { '@runwarden/tanstack-client': path.join(top, 'clients', 'tanstack-client', 'index.js') },
  nodePaths: [path.join(here, 'node_modules')],
  logLevel: 'error',
})
for (const f of ['index.html', 'app.css']) fs.copyFileSync(path.join(here, 'browser-app', f), path.join(appDir, f))

const types = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript', '.css': 'text/css' }
function serveApp(req, res) {
  const name = new URL(req.url, 'http://x').pathname.replace(/^\/+/, '') || 'index.html'
  const file = path.join(appDir, path.basename(name))
  if (!fs.existsSync(file)) {
    res.writeHead(404).end()
    return
  }
  res.writeHead(200, { 'content-type': types[path.extname(file)] || 'application/octet-stream' })
  res.end(fs.readFileSync(file))
}

// cross-origin: the app from its own origin
const staticServer = http.createServer(serveApp).listen(staticPort, '127.0.0.1')

// same-origin: a dev proxy forwarding the API (Host rewritten, Origin kept)
const api = /^\/(chat|runs|threads|ds)(\/|\?|$)/
const proxy = http.createServer((req, res) => {
  if (!api.test(req.url)) return serveApp(req, res)
  const up = http.request({ host: rwUrl.hostname, port: rwUrl.port, method: req.method, path: req.url,
    headers: { ...req.headers, host: rwUrl.host } }, (r) => {
    res.writeHead(r.statusCode, r.headers)
    r.pipe(res)
  })
  up.on('error', () => res.destroy())
  req.pipe(up)
})
proxy.on('upgrade', (req, sock, head) => {
  const up = net.connect(Number(rwUrl.port), rwUrl.hostname, () => {
    const lines = [`${req.method} ${req.url} HTTP/1.1`]
    for (let i = 0; i < req.rawHeaders.length; i += 2) {
      const k = req.rawHeaders[i]
      lines.push(`${k}: ${k.toLowerCase() === 'host' ? rwUrl.host : req.rawHeaders[i + 1]}`)
    }
    up.write(`${lines.join('\r\n')}\r\n\r\n`)
    if (head.length) up.write(head)
    up.pipe(sock)
    sock.pipe(up)
  })
  up.on('error', () => sock.destroy())
  sock.on('error', () => up.destroy())
})
proxy.listen(proxyPort, '127.0.0.1')

async function rwApi(method, p) {
  const r = await fetch(rw + p, { method, headers: { Authorization: `Bearer ${token}` } })
  const text = await r.text()
  if (r.status >= 300) throw new Error(`${method} ${p}: ${r.status} ${text}`)
  return JSON.parse(text)
}
async function putFile(thread, name) {
  const r = await fetch(`${rw}/threads/${thread}/files/${name}`, { method: 'PUT', headers: { Authorization: `Bearer ${token}` }, body: 'x' })
  if (r.status >= 300) throw new Error(`PUT ${name}: ${r.status} ${await r.text()}`)
}
async function runs(thread) {
  const js = await rwApi('GET', `/threads/${thread}/runs`)
  return Array.isArray(js) ? js : js.runs
}
async function waitStatus(thread, want) {
  const end = Date.now() + T
  let last
  while (Date.now() < end) {
    last = (await runs(thread))[0]
    if (last && last.status === want) return last
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`check failed: ${thread}: newest run ${last?.status}, wanted ${want}`)
}

const browser = await launchChromium()
const logs = []
result.logs = logs
const uniq = Math.random().toString(36).slice(2, 8)

async function open(ctx, { origin, transport, thread, tok = token, base }) {
  const page = await ctx.newPage()
  page.on('pageerror', (e) => logs.push(`pageerror: ${e.message}`))
  const q = new URLSearchParams({ transport, thread })
  if (tok) q.set('token', tok)
  if (base) q.set('base', base)
  await page.goto(`${origin}?${q}`)
  await page.waitForSelector('#status')
  return page
}

async function send(page, text) {
  await page.fill('#input', text)
  await page.click('#send')
}

// the "line N" numbers of each tool-result, message by message
const resultLines = (page) => page.evaluate(() =>
  [...document.querySelectorAll('.tool-result')].map((e) => [...e.textContent.matchAll(/^line (\d+)$/gm)].map((m) => Number(m[1]))))
const lastLines = async (page) => (await resultLines(page)).at(-1) ?? []
const waitLines = (page, n, idx = -1) => page.waitForFunction(([n, idx]) => {
  const r = [...document.querySelectorAll('.tool-result')].at(idx)
  return r && [...r.textContent.matchAll(/^line (\d+)$/gm)].length >= n
}, [n, idx], { timeout: T })
const waitReady = (page) => page.waitForFunction(() => document.querySelector('#status')?.textContent === 'ready', null, { timeout: T })
const waitFinal = (page, idx = -1) => page.waitForFunction((idx) => {
  const r = [...document.querySelectorAll('.tool-result')].at(idx)
  return r && r.dataset.state === 'complete' && document.querySelector('#status').textContent === 'ready' &&
    !(r.textContent === '' && false)
}, idx, { timeout: T })
const roles = (page) => page.evaluate(() => [...document.querySelectorAll('.msg')].map((m) => m.dataset.role))
const shot = (page, name) => page.screenshot({ path: path.join(out, `${name}.png`) })
const seq = (n) => Array.from({ length: n }, (_, i) => i + 1)
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b)
const loop = (n, pause) => `for i in $(seq 1 ${n}); do echo line $i; sleep ${pause}; done`
const forever = 'i=0; while true; do i=$((i+1)); echo line $i; sleep 0.2; done'

async function finished(page, thread, n) {
  await waitStatus(thread, 'completed')
  await page.waitForFunction((n) => {
    const r = [...document.querySelectorAll('.tool-result')].at(-1)
    return document.querySelector('#status').textContent === 'ready' && r &&
      [...r.textContent.matchAll(/^line (\d+)$/gm)].length >= n
  }, n, { timeout: T })
}

// live output, a second tab, a reload mid-run, multi-turn history
async function liveReloadTabs(ctx, transport, origin, base, tag) {
  const thread = `bx-${tag}-${uniq}`
  const N = 25
  const a = await open(ctx, { origin, transport, thread, base })
  // lines 1-5, then a wait for the file 'go' the test writes: mid-run needs no timing
  await send(a, `for i in $(seq 1 ${N}); do echo line $i; if [ $i = 5 ]; then ` +
    'while [ ! -e go ]; do sleep 0.05; done; fi; sleep 0.05; done; echo kept > turn1.txt')
  await waitLines(a, 5)
  const mid = await lastLines(a)
  const rec = (await runs(thread))[0]
  check(rec.status === 'running' && same(mid, seq(5)),
    `${tag}: output shows in the messages while the command runs`, { mid, status: rec.status })
  await shot(a, `${tag}-live`)
  const custom = (await a.evaluate(() => window.__events)).filter((e) => e.startsWith('custom process.'))
  check(custom.length > 0 && custom.every((e) => !e.endsWith(' none')),
    `${tag}: onCustomEvent gets the output's toolCallId`, custom.slice(0, 3))
  const b = await open(ctx, { origin, transport, thread, base })
  await waitLines(b, 5)
  await a.reload()
  await waitLines(a, 5)
  check((await runs(thread))[0].status === 'running', `${tag}: reloaded and joined mid-run`)
  await shot(a, `${tag}-reloaded`)
  await putFile(thread, 'go')
  await finished(a, thread, N)
  await finished(b, thread, N)
  for (const [p, name] of [[a, 'reloaded tab'], [b, 'second tab']]) {
    const got = await lastLines(p)
    check(same(got, seq(N)), `${tag}: ${name} has lines 1..${N} once each, in order`, got)
  }
  await b.close()
  await send(a, 'cat turn1.txt; echo second-turn')
  await a.waitForFunction(() => document.querySelectorAll('.tool-result').length === 2 &&
    document.querySelector('#status').textContent === 'ready' &&
    /second-turn/.test([...document.querySelectorAll('.tool-result')][1].textContent), null, { timeout: T })
  const turn2 = await a.evaluate(() => [...document.querySelectorAll('.tool-result')][1].textContent)
  check(/^kept$/m.test(turn2), `${tag}: the second turn sees the first's workspace`, turn2)
  await a.reload()
  await a.waitForFunction(() => document.querySelectorAll('.tool-result').length === 2, null, { timeout: T })
  const r = await roles(a)
  const ls = await resultLines(a)
  check(same(r, ['user', 'assistant', 'user', 'assistant']) && same(ls[0], seq(N)),
    `${tag}: two turns hydrate in order after a reload`, { r, ls })
  await shot(a, `${tag}-two-turns`)
  await a.close()
}

// Stop mid-run, before and after a reload: the run ends aborted, its processes gone
async function stops(ctx, transport, origin, base, tag) {
  const thread = `bs-${tag}-${uniq}`
  const p = await open(ctx, { origin, transport, thread, base })
  await send(p, forever)
  await waitLines(p, 3)
  await p.click('#stop')
  await waitStatus(thread, 'aborted')
  check(true, `${tag}: Stop aborts the run`)
  await send(p, 'ps -eo args')
  await p.waitForFunction(() => {
    const r = [...document.querySelectorAll('.tool-result')].at(-1)
    return r && /ps -eo args/.test(r.textContent) && r.dataset.state === 'complete'
  }, null, { timeout: T })
  const ps = await p.evaluate(() => [...document.querySelectorAll('.tool-result')].at(-1).textContent)
  check(!/while true|sleep 0\.2/.test(ps), `${tag}: the stopped command's processes are gone`, ps)
  const ev = await p.evaluate(() => window.__events)
  check(!ev.some((e) => /cancel|abort/i.test(e)), `${tag}: no onError after a Stop`, ev)
  await shot(p, `${tag}-stopped`)
  await send(p, forever)
  await p.waitForFunction(() => document.querySelectorAll('.tool-result').length === 3, null, { timeout: T })
  await waitLines(p, 3)
  await p.reload()
  await waitLines(p, 4)
  await p.click('#stop')
  await waitStatus(thread, 'aborted')
  check(true, `${tag}: Stop after a reload aborts the run`)
  await shot(p, `${tag}-stopped-after-reload`)
  await p.close()
}

async function wrongToken(ctx, transport, origin, base, tag) {
  const p = await open(ctx, { origin, transport, thread: `bw-${tag}-${uniq}`, tok: badToken, base })
  await send(p, 'echo hi')
  await p.waitForFunction(() => document.querySelector('#error').textContent !== '', null, { timeout: T })
  const err = await p.textContent('#error')
  const want = transport === 'ws' ? /invalid bearer token/ : /status: 401/
  check(want.test(err), `${tag}: a wrong token shows a readable error`, err)
  await shot(p, `${tag}-wrong-token`)
  await p.close()
}

async function short(ctx, transport, origin, base, tag) {
  const thread = `bo-${tag}-${uniq}`
  const p = await open(ctx, { origin, transport, thread, base })
  await send(p, loop(8, 0.1))
  await finished(p, thread, 8)
  check(same(await lastLines(p), seq(8)), `${tag}: a run streams and completes`)
  await shot(p, `${tag}-done`)
  await p.close()
}

try {
  const ctx = await browser.newContext({ viewport: { width: 1000, height: 800 } })
  const cross = `http://127.0.0.1:${staticPort}/index.html`
  for (const t of transports) {
    await liveReloadTabs(ctx, t, cross, rw, `cross-${t}`)
    await stops(ctx, t, cross, rw, `cross-${t}`)
    await wrongToken(ctx, t, cross, rw, `cross-${t}`)
  }
  for (const t of transports) {
    await short(ctx, t, `http://127.0.0.1:${proxyPort}/index.html`, undefined, `proxy-${t}`)
    await short(ctx, t, `${rw}/ui/index.html`, undefined, `uidir-${t}`)
  }
  result.ok = true
} catch (e) {
  result.error = String(e.stack || e)
} finally {
  await browser.close()
  staticServer.close()
  proxy.close()
}
console.log(JSON.stringify(result))
process.exit(result.ok ? 0 : 1)
