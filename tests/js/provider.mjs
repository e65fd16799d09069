// SPDX-License-Identifier: MIT
// Drives @runwarden/ai-sandbox with the real TanStack packages against a live
// runwarden (tests/e2e/t_provider.py starts the daemons and runs this).
//
//   node --preserve-symlinks provider.mjs URL CHECK...
//
// Env: RW_TOKEN (bearer, optional), RW_TAG (makes ids unique), RW_SECRET
// (a value given through env.set / createSecrets; the e2e test then greps every
// daemon log and state file for it), RW_FIXTURES (tests/fixtures).
// Prints one JSON line per check: {"check", "ok", "ms", "error"?, "info"?}.
// --preserve-symlinks: the package is a file: dependency (a symlink into
// clients/ai-sandbox) whose peer @tanstack/ai-sandbox must resolve here.
import { readFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { request as httpRequest } from 'node:http'
import WebSocket from 'ws'
import { runwardenSandbox, RunwardenError, scopePrefix, parseSnapshotRef, mapCapabilities } from '@runwarden/ai-sandbox'
import {
  InMemorySandboxStore,
  UnsupportedCapabilityError,
  createSecrets,
  defineSandbox,
  defineWorkspace,
  spawnNdjson,
  watchWorkspace,
  withSandbox,
} from '@tanstack/ai-sandbox'
import { chat } from '@tanstack/ai'
import { claudeCodeText } from '@tanstack/ai-claude-code'
import { codexText } from '@tanstack/ai-codex'

const [url, ...checks] = process.argv.slice(2)
const token = process.env.RW_TOKEN || undefined
const TAG = process.env.RW_TAG || 'x'
const SECRET = process.env.RW_SECRET || 'no-secret-given'
const FIXTURES = process.env.RW_FIXTURES || new URL('../fixtures', import.meta.url).pathname

const provider = runwardenSandbox({ url, token, WebSocket })
let readyError = null
await provider.ready().catch((e) => {
  readyError = e
})

function assert(cond, msg) {
  if (!cond) throw new Error(`assertion failed: ${msg}`)
}
function eq(a, b, msg) {
  const ja = JSON.stringify(a)
  const jb = JSON.stringify(b)
  if (ja !== jb) throw new Error(`${msg}: ${ja} !== ${jb}`)
}
async function rejects(p, pred, msg) {
  try {
    await p
  } catch (e) {
    if (pred(e)) return e
    throw new Error(`${msg}: wrong error ${e?.name} ${e?.code} ${e?.message}`)
  }
  throw new Error(`${msg}: did not reject`)
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
async function until(fn, ms = 10000, msg = 'condition') {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out waiting for ${msg}`)
    await sleep(50)
  }
}
async function api(method, path, body) {
  const h = token ? { authorization: `Bearer ${token}` } : {}
  if (body !== undefined) h['content-type'] = 'application/json'
  const res = await fetch(url + path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) })
  const text = await res.text()
  let js
  try {
    js = text ? JSON.parse(text) : null
  } catch {
    js = text
  }
  return { status: res.status, body: js }
}
const sid = (id) => `${provider.idPrefix}${id}`
const sha = (s) => createHash('sha256').update(s).digest('hex')
// how many processes named `name` run in the sandbox (its pid namespace)
const countProcs = async (h, name) =>
  Number(
    (
      await h.process.exec(`for p in /proc/[0-9]*; do cat $p/comm; done 2>/dev/null | grep -cx ${name} || true`)
    ).stdout.trim(),
  )

const CHECKS = {}

CHECKS.capabilities = async () => {
  const c = provider.capabilities()
  for (const k of ['fs', 'exec', 'env', 'writableStdin', 'backgroundProcesses', 'snapshots', 'fork', 'durableFilesystem']) {
    assert(c[k] === true, `capability ${k}`)
  }
  eq(c.networkPolicy, false, 'networkPolicy')
  const bare = runwardenSandbox({ url, token })
  eq(bare.capabilities().snapshots, false, 'conservative before the fetch')
  eq(bare.capabilities().writableStdin, false, 'conservative before the fetch')
  const c2 = await bare.ready()
  eq(c2.writableStdin, false, 'no writable stdin without a WebSocket constructor')
  eq(c2.snapshots, true, 'real values after the fetch')
  return { caps: c, prefix: provider.idPrefix }
}

CHECKS.helpers = async () => {
  eq(scopePrefix({ scope: { threads: null } }), '', 'unscoped')
  eq(scopePrefix({ scope: { threads: ['shared', 'a-*', 'b-*'] } }), 'a-', 'first wildcard item')
  eq(scopePrefix({ scope: { threads: ['only-this'] } }), '', 'no wildcard')
  eq(parseSnapshotRef('a:b:c0ffee'), { sandboxId: 'a:b', snapshotId: 'c0ffee' }, 'last colon')
  for (const bad of ['nocolon', ':x', 'x:', 7]) {
    await rejects((async () => parseSnapshotRef(bad))(), (e) => e.code === 'bad_snapshot_id', `ref ${bad}`)
  }
  const m = mapCapabilities({ sandbox: { exec: true, writableStdin: true, snapshots: false, fork: true } }, true)
  eq([m.writableStdin, m.fork, m.snapshots], [true, false, false], 'fork needs snapshots')
  eq(mapCapabilities({ sandbox: { writableStdin: true } }, false).writableStdin, false, 'stdin needs a WebSocket')
  assert(Object.isFrozen(m), 'frozen')
  await rejects((async () => runwardenSandbox({ url: 'ftp://x' }))(), (e) => e instanceof TypeError, 'a bad url')
  await rejects((async () => runwardenSandbox({ url, egress: 'x' }))(), (e) => e instanceof TypeError, 'a bad egress')
}

CHECKS.lifecycle = async () => {
  const id = `life-${TAG}`
  const h = await provider.create({ id })
  eq(h.id, id, 'create honours the id')
  eq(h.provider, 'runwarden', 'provider name')
  eq(h.workspaceRoot, '/workspace', 'workspaceRoot')
  await h.fs.write('/workspace/keep.txt', 'kept')
  const again = await provider.create({ id })
  eq(await again.fs.read('/workspace/keep.txt'), 'kept', 'a second create is idempotent, same workspace')
  const r = await provider.resume({ id })
  assert(r && r.id === id, 'resume of a known id')
  eq(await provider.resume({ id: `never-${TAG}` }), null, 'resume of an unknown id is null')
  const s = await h.process.spawn('sleep 60')
  await h.destroy()
  const code = await s.wait()
  assert(code !== 0, `destroy ended the running process (${code})`)
  eq(await provider.resume({ id }), null, 'gone after destroy')
  await provider.destroy({ id }) // again: 204
  // egress names outside the operator's list are refused at create
  const walled = runwardenSandbox({ url, token, WebSocket, egress: ['not-allowed.example'] })
  await rejects(walled.create({ id: `egress-${TAG}` }), (e) => e.status === 403 && e.code === 'egress_forbidden', 'egress')
  const anon = await provider.create({})
  assert(typeof anon.id === 'string' && anon.id.length > 0, 'create without an id')
  await anon.destroy()
}

CHECKS.fs = async () => {
  const h = await provider.create({ id: `fs-${TAG}` })
  const f = h.fs
  await f.write('/workspace/a/b/c.txt', 'hello')
  eq(await f.read('/workspace/a/b/c.txt'), 'hello', 'write creates parents, read')
  eq(await f.read('a/b/c.txt'), 'hello', 'relative paths are below /workspace')
  const bin = new Uint8Array([0, 255, 1, 128, 10])
  await f.write('/workspace/bin.dat', bin)
  eq(Array.from(await f.readBytes('/workspace/bin.dat')), Array.from(bin), 'readBytes of binary')
  const names = (await f.list('/workspace')).map((e) => `${e.name}:${e.type}:${e.path}`).sort()
  assert(names.includes('a:dir:/workspace/a') && names.includes('bin.dat:file:/workspace/bin.dat'), `list ${names}`)
  eq(await f.exists('/workspace/a/b/c.txt'), true, 'exists')
  eq(await f.exists('/workspace/nope'), false, 'exists of a missing path')
  await f.mkdir('/workspace/m/n/o')
  await f.mkdir('/workspace/m/n/o') // mkdir -p of an existing directory
  eq((await f.lstat('/workspace/m/n/o')).type, 'dir', 'mkdir -p')
  await f.write('/workspace/r1', 'one')
  await f.write('/workspace/r2', 'two')
  await f.rename('/workspace/r1', '/workspace/r2')
  eq(await f.read('/workspace/r2'), 'one', 'rename over an existing name')
  eq(await f.exists('/workspace/r1'), false, 'rename moved it')
  await h.process.exec('ln -s a/b/c.txt link')
  const st = await f.lstat('/workspace/link')
  eq(st.type, 'symlink', 'lstat of a symlink')
  const fst = await f.lstat('/workspace/a/b/c.txt')
  eq([fst.type, fst.size], ['file', 5], 'lstat of a file')
  assert(typeof fst.mode === 'number', 'mode is a number')
  eq(await f.lstat('/workspace/nope'), undefined, 'lstat of a missing path')
  await f.remove('/workspace/a')
  eq(await f.exists('/workspace/a'), false, 'remove is recursive')
  await f.remove('/workspace/a') // force: a missing path is fine
  await rejects(f.read('/workspace/nope'), (e) => e instanceof RunwardenError && e.status === 404, 'read of a missing file')
  // outside /workspace (the adapters' /tmp prompt files): through exec
  await f.write('/tmp/rw-prov/deep/p.txt', "it's a prompt\n")
  eq(await f.read('/tmp/rw-prov/deep/p.txt'), "it's a prompt\n", '/tmp write and read')
  eq(await f.exists('/tmp/rw-prov/deep/p.txt'), true, '/tmp exists')
  eq((await f.list('/tmp/rw-prov')).map((e) => [e.name, e.type, e.path]), [['deep', 'dir', '/tmp/rw-prov/deep']], '/tmp list')
  await f.remove('/tmp/rw-prov')
  eq(await f.exists('/tmp/rw-prov'), false, '/tmp remove')
  await h.destroy()
}

CHECKS.process = async () => {
  const h = await provider.create({ id: `proc-${TAG}` })
  const p = h.process
  const r = await p.exec('echo out; echo err >&2; exit 7')
  eq([r.stdout, r.stderr, r.exitCode], ['out\n', 'err\n', 7], 'exec stdout, stderr, exit code')
  eq((await p.exec('uname -s')).stdout, 'Linux\n', 'uname')
  await h.fs.mkdir('/workspace/sub')
  eq((await p.exec('pwd', { cwd: '/workspace/sub' })).stdout, '/workspace/sub\n', 'cwd')
  eq((await p.exec('pwd')).stdout, '/workspace\n', 'default cwd')
  eq((await p.exec('printf %s "$V"', { env: { V: "it's \"quoted\" $HOME" } })).stdout, "it's \"quoted\" $HOME", 'env value verbatim')
  eq((await p.exec('no-such-binary-xyz')).exitCode, 127, 'a missing binary is 127')
  eq((await p.exec('sleep 30', { timeoutMs: 300 })).exitCode, 137, 'timeoutMs kills the exec')
  // spawn: output streams before the exit
  const s = await p.spawn('echo first; read line; echo "got $line"')
  assert(Number.isInteger(s.pid) && s.pid > 0, `a real pid ${s.pid}`)
  const it = s.stdout[Symbol.asyncIterator]()
  const first = await it.next()
  eq(first.value, 'first\n', 'first chunk before stdin was written')
  await s.stdin.write('hello\n')
  await s.stdin.end()
  let rest = ''
  for (let n = await it.next(); !n.done; n = await it.next()) rest += n.value
  eq(rest, 'got hello\n', 'writable stdin')
  eq(await s.wait(), 0, 'spawn exit code')
  const cat = await p.spawn('cat; echo done >&2')
  await cat.stdin.write('a')
  await cat.stdin.write('b')
  await cat.stdin.end()
  let out = ''
  for await (const c of cat.stdout) out += c
  let err = ''
  for await (const c of cat.stderr) err += c
  eq([out, err, await cat.wait()], ['ab', 'done\n', 0], 'stdin to eof, stderr')
  // concurrent execs in one sandbox
  const many = await Promise.all([1, 2, 3, 4, 5].map((i) => p.exec(`sleep 0.2; echo ${i}`)))
  eq(many.map((m) => m.stdout), ['1\n', '2\n', '3\n', '4\n', '5\n'], 'five concurrent execs')
  // the NDJSON spawn (no WebSocket constructor): streams, stdin unsupported
  const nows = runwardenSandbox({ url, token })
  const h2 = await nows.create({ id: `proc-${TAG}` })
  eq(h2.capabilities.writableStdin, false, 'no writable stdin without a WebSocket')
  const s2 = await h2.process.spawn('echo a; echo b >&2; exit 3')
  await rejects(s2.stdin.write('x'), (e) => e instanceof UnsupportedCapabilityError, 'stdin.write without a WebSocket')
  let o2 = ''
  for await (const c of s2.stdout) o2 += c
  eq([o2, await s2.wait()], ['a\n', 3], 'NDJSON spawn')
  await h.destroy()
}

CHECKS.abort_kill = async () => {
  const h = await provider.create({ id: `kill-${TAG}` })
  const p = h.process
  eq(await countProcs(h, 'sleep'), 0, 'no sleep before')
  // kill(): the command and what it backgrounded (setsid too)
  const s = await p.spawn('sleep 60 & setsid sleep 61 & sleep 62; echo never')
  await until(async () => (await countProcs(h, 'sleep')) === 3, 10000, 'three sleeps')
  await s.kill()
  const code = await s.wait()
  eq(code, 137, 'kill() exit code (SIGKILL)')
  await until(async () => (await countProcs(h, 'sleep')) === 0, 10000, 'no sleep left after kill()')
  // kill('SIGTERM') reaches the command
  const t = await p.spawn('trap "echo term; exit 5" TERM; sleep 60 & wait')
  await until(async () => (await countProcs(h, 'sleep')) === 1, 10000, 'one sleep')
  await t.kill('SIGTERM')
  let tout = ''
  for await (const c of t.stdout) tout += c
  eq([tout, await t.wait()], ['term\n', 5], 'SIGTERM trapped')
  await p.exec('pkill -KILL sleep || true')
  await until(async () => (await countProcs(h, 'sleep')) === 0, 10000, 'cleanup')
  // AbortSignal on exec
  const ac = new AbortController()
  const pr = p.exec('sleep 60 & setsid sleep 61 & sleep 62', { signal: ac.signal })
  await until(async () => (await countProcs(h, 'sleep')) === 3, 10000, 'three sleeps (exec)')
  ac.abort()
  const r = await pr
  eq(r.exitCode, 137, 'an aborted exec resolves 137')
  await until(async () => (await countProcs(h, 'sleep')) === 0, 10000, 'no sleep left after abort')
  // AbortSignal on spawn
  const ac2 = new AbortController()
  const s2 = await p.spawn('sleep 60 & sleep 62', { signal: ac2.signal })
  await until(async () => (await countProcs(h, 'sleep')) === 2, 10000, 'two sleeps (spawn)')
  ac2.abort()
  eq(await s2.wait(), 137, 'an aborted spawn exits 137')
  await until(async () => (await countProcs(h, 'sleep')) === 0, 10000, 'no sleep left after spawn abort')
  await h.destroy()
}

CHECKS.env_secret = async () => {
  const h = await provider.create({ id: `env-${TAG}`, env: { FROM_CREATE: 'c1' } })
  await h.env.set({ RW_SECRET_VALUE: SECRET, PLAIN: 'p1' })
  const hashed = (await h.process.exec('printf %s "$RW_SECRET_VALUE" | sha256sum')).stdout.split(' ')[0]
  eq(hashed, sha(SECRET), 'the secret reaches exec')
  eq((await h.process.exec('printf %s "$FROM_CREATE/$PLAIN"')).stdout, 'c1/p1', 'create env + env.set')
  eq((await h.process.exec('printf %s "$PLAIN"', { env: { PLAIN: 'p2' } })).stdout, 'p2', 'per-exec env wins')
  const s = await h.process.spawn('printf %s "$RW_SECRET_VALUE" | sha256sum')
  let out = ''
  for await (const c of s.stdout) out += c
  eq(out.split(' ')[0], sha(SECRET), 'the secret reaches spawn')
  await s.wait()
  // a resume in this process keeps the env (it is held client-side only)
  const r = await provider.resume({ id: `env-${TAG}` })
  eq((await r.process.exec('printf %s "$PLAIN"')).stdout, 'p1', 'resume keeps the env')
  // never in a command string: the e2e test greps logs and state for SECRET
  return { sandbox: sid(`env-${TAG}`) }
}

CHECKS.snapshot_fork = async () => {
  const id = `snap-${TAG}`
  const h = await provider.create({ id })
  await h.env.set({ E: 'e1' })
  await h.fs.write('/workspace/f.txt', 'v1')
  const ref = await h.snapshot('s1')
  eq(ref.label, 's1', 'label')
  assert(ref.id.startsWith(`${id}:`), `the ref names its sandbox: ${ref.id}`)
  await h.fs.write('/workspace/f.txt', 'v2')
  const r = await provider.restoreSnapshot({ snapshotId: ref.id })
  assert(r.id !== id, 'restoreSnapshot returns a new sandbox')
  eq(await r.fs.read('/workspace/f.txt'), 'v1', 'restored content')
  eq(await h.fs.read('/workspace/f.txt'), 'v2', 'the source is untouched')
  const snaps = await api('GET', `/threads/${encodeURIComponent(sid(id))}/snapshots`)
  eq(snaps.status, 200, 'snapshot list')
  assert(snaps.body.snapshots.some((s) => s.label === 's1'), 'listed')
  // fork: snapshot + restore into a new id, env carried
  await h.fs.write('/workspace/g.txt', 'forked')
  const f = await h.fork()
  assert(f.id !== id && f.id !== r.id, 'fork is a new sandbox')
  eq(await f.fs.read('/workspace/g.txt'), 'forked', 'fork has the content')
  eq((await f.process.exec('printf %s "$E"')).stdout, 'e1', 'fork keeps the env')
  await f.fs.write('/workspace/g.txt', 'changed in fork')
  eq(await h.fs.read('/workspace/g.txt'), 'forked', 'fork is independent')
  await rejects(
    provider.restoreSnapshot({ snapshotId: `${id}:00000000-0000-4000-8000-000000000000` }),
    (e) => e instanceof RunwardenError && e.status === 404,
    'an unknown snapshot',
  )
  await rejects(provider.restoreSnapshot({ snapshotId: 'garbage' }), (e) => e.code === 'bad_snapshot_id', 'a bad ref')
  for (const x of [f, r, h]) await x.destroy()
  eq(await provider.resume({ id: f.id }), null, 'fork destroyed')
}

CHECKS.ports = async () => {
  const h = await provider.create({ id: `ports-${TAG}` })
  if (!h.capabilities.ports) {
    await rejects(h.ports.connect(8000), (e) => e instanceof UnsupportedCapabilityError, 'ports off')
    return { ports: false }
  }
  await h.fs.write('/workspace/www/index.html', '<h1>from the sandbox</h1>')
  const srv = await h.process.spawn('exec python3 -m http.server 8000 --bind 127.0.0.1 --directory www')
  const ch = await h.ports.connect(8000)
  assert(typeof ch.url === 'string' && ch.url.startsWith('http'), `a preview URL ${ch.url}`)
  // the preview's host name (<label>.preview.localhost) need not resolve here:
  // connect to the listener's address with that Host
  const u = new URL(ch.url)
  const get = () =>
    new Promise((res, rej) => {
      const req = httpRequest(
        { host: '127.0.0.1', port: u.port, path: '/index.html', headers: { ...(ch.headers ?? {}), host: u.host } },
        (r) => {
          let b = ''
          r.on('data', (d) => (b += d))
          r.on('end', () => res(r.statusCode === 200 ? b : null))
        },
      )
      req.on('error', rej)
      req.end()
    })
  const body = await until(() => get().catch(() => null), 15000, 'the preview')
  assert(body.includes('from the sandbox'), body)
  // another tenant's sandbox port is refused
  if (process.env.RW_TOKEN_B) {
    const other = runwardenSandbox({ url, token: process.env.RW_TOKEN_B, idPrefix: provider.idPrefix, WebSocket })
    const oh = await other.resume({ id: `ports-${TAG}` }).catch((e) => e)
    assert(oh instanceof RunwardenError && oh.status === 403, `another tenant: ${oh}`)
  }
  await srv.kill()
  await h.destroy()
  return { ports: true, url: ch.url }
}

CHECKS.git = async () => {
  const h = await provider.create({ id: `git-${TAG}` })
  await h.env.set({
    GIT_AUTHOR_NAME: 't', GIT_AUTHOR_EMAIL: 't@x', GIT_COMMITTER_NAME: 't', GIT_COMMITTER_EMAIL: 't@x',
  })
  eq((await h.process.exec('git init -q -b main .')).exitCode, 0, 'git init')
  await h.fs.write('/workspace/readme.md', '# hi\n')
  eq((await h.git.status()).trim(), '?? readme.md', 'status')
  await h.git.add(['readme.md'])
  await h.git.commit("first 'commit'")
  eq((await h.process.exec('git log --format=%s')).stdout, "first 'commit'\n", 'commit')
  eq(await h.git.branch(), 'main', 'branch')
  eq((await h.git.status()).trim(), '', 'clean')
  await h.destroy()
}

CHECKS.spawn_ndjson = async () => {
  const h = await provider.create({ id: `ndj-${TAG}` })
  const non = []
  const got = []
  for await (const e of spawnNdjson(h, `printf '{"a":1}\\nbanner\\n\\n{"b":2}\\n'`, { onNonJsonLine: (l) => non.push(l) })) {
    got.push(e)
  }
  eq([got, non], [[{ a: 1 }, { b: 2 }], ['banner']], 'NDJSON lines and the non-JSON one')
  const echoed = []
  for await (const e of spawnNdjson(h, 'while read l; do printf \'{"got":"%s"}\\n\' "$l"; done', { input: 'x\ny\n' })) {
    echoed.push(e)
  }
  eq(echoed, [{ got: 'x' }, { got: 'y' }], 'input over stdin')
  await rejects(
    (async () => {
      for await (const _ of spawnNdjson(h, 'echo broken >&2; exit 3')) void _
    })(),
    (e) => /exited with code 3: broken/.test(e.message),
    'a failing agent process',
  )
  await h.destroy()
}

CHECKS.watch = async () => {
  const h = await provider.create({ id: `watch-${TAG}` })
  assert(typeof h.fs.watch === 'function', 'fs.watch is there (no exec polling)')
  await h.fs.write('/workspace/pre.txt', 'x')
  const events = []
  const w = await watchWorkspace(h, { onEvent: (e) => events.push(`${e.type} ${e.path}`) })
  const seen = (s) => until(() => events.includes(s), 10000, s)
  await h.fs.write('/workspace/d/new.txt', 'one')
  await seen('create /workspace/d/new.txt')
  await h.process.exec('echo more >> d/new.txt')
  await seen('change /workspace/d/new.txt')
  await h.fs.write('/workspace/pre.txt', 'y')
  await seen('change /workspace/pre.txt')
  await h.fs.remove('/workspace/d/new.txt')
  await seen('delete /workspace/d/new.txt')
  await w.stop()
  const n = events.length
  await h.fs.write('/workspace/after.txt', 'z')
  await sleep(300)
  eq(events.length, n, 'nothing after stop()')
  await h.destroy()
  return { events }
}

async function replayInto(h, cli) {
  await h.fs.write(`/workspace/.bin/${cli}`, readFileSync(`${FIXTURES}/bin/replay`))
  await h.fs.write(`/workspace/.fixtures/${cli}/basic.jsonl`, readFileSync(`${FIXTURES}/${cli}/basic.jsonl`))
  eq((await h.process.exec(`chmod 755 .bin/${cli}`)).exitCode, 0, 'chmod')
}

CHECKS.ensure = async () => {
  const secrets = createSecrets({ API_KEY: SECRET })
  const store = new InMemorySandboxStore()
  const def = defineSandbox({
    id: `ens-${TAG}`,
    provider,
    workspace: defineWorkspace({
      source: { type: 'none' },
      secrets,
      instructions: 'Be brief.',
      setup: (b) => {
        b.serial('mkdir -p sub && export GREETING=hi && cd sub')
        b.serial('printf "%s|%s|%s" "$GREETING" "$(pwd)" "$(printf %s "$API_KEY" | sha256sum | cut -c1-64)" > out.txt')
        b.parallel(['pwd > p1.txt', 'pwd > p2.txt'])
      },
    }),
    lifecycle: { reuse: 'thread' },
  })
  const ctx = { threadId: `th-${TAG}`, runId: 'r1', store }
  const h = await def.ensure(ctx)
  const key = def.key(ctx)
  eq(h.id, key, 'the sandbox id is the definition key')
  eq(await h.fs.read('/workspace/sub/out.txt'), `hi|/workspace/sub|${sha(SECRET)}`, 'setup: export + cd carried, secret set')
  eq(await h.fs.read('/workspace/sub/p1.txt'), '/workspace/sub\n', 'parallel step in the cwd')
  eq(await h.fs.read('/workspace/AGENTS.md').then((s) => s.includes('Be brief.')), true, 'AGENTS.md')
  const rec = await store.get(key)
  assert(rec && rec.latestSnapshotId && rec.latestSnapshotId.startsWith(`${key}:`), `after-setup snapshot ${JSON.stringify(rec)}`)
  const snaps = await api('GET', `/threads/${encodeURIComponent(sid(key))}/snapshots`)
  assert(snaps.body.snapshots.some((s) => s.label === 'after-setup'), 'after-setup snapshot listed')
  await h.fs.write('/workspace/marker', 'first run')
  const h2 = await def.ensure({ ...ctx, runId: 'r2' })
  eq(h2.id, key, 'second ensure resumes the same sandbox')
  eq(await h2.fs.read('/workspace/marker'), 'first run', 'same workspace')
  const snaps2 = await api('GET', `/threads/${encodeURIComponent(sid(key))}/snapshots`)
  eq(snaps2.body.snapshots.length, snaps.body.snapshots.length, 'no second setup or snapshot on resume')
  // a record whose sandbox is gone comes back from its after-setup snapshot
  // (destroy would remove the snapshots too: they are the workspace's backups)
  await store.upsert({ ...rec, providerSandboxId: `gone-${TAG}` })
  const h3 = await def.ensure({ ...ctx, runId: 'r3' })
  assert(h3.id !== key, 'restored into a new sandbox')
  eq(await h3.fs.read('/workspace/sub/out.txt'), `hi|/workspace/sub|${sha(SECRET)}`, 'restored from the after-setup snapshot')
  eq(await h3.fs.exists('/workspace/marker'), false, 'the snapshot predates the marker')
  eq((await store.get(key)).providerSandboxId, h3.id, 'the record names the restored sandbox')
  await def.destroy({ ...ctx, runId: 'r4' })
  eq(await provider.resume({ id: h3.id }), null, 'definition destroy')
  await provider.destroy({ id: key })
  return { key, sandbox: sid(key) }
}

async function chatWith(cli) {
  const def = defineSandbox({
    id: `chat-${cli}-${TAG}`,
    provider,
    workspace: defineWorkspace({ source: { type: 'none' } }),
    lifecycle: { reuse: 'thread' },
    hooks: { onReady: (h) => replayInto(h, cli) },
  })
  const adapter =
    cli === 'claude'
      ? claudeCodeText('sonnet', { claudeExecutable: '/workspace/.bin/claude' })
      : codexText('gpt-5-codex', { codexExecutable: '/workspace/.bin/codex', sandboxMode: 'danger-full-access' })
  const chunks = []
  const stream = chat({
    adapter,
    threadId: `chat-${cli}-${TAG}`,
    messages: [{ role: 'user', content: 'fixture:basic' }],
    middleware: [withSandbox(def)],
  })
  for await (const c of stream) chunks.push(c)
  const types = chunks.map((c) => c.type)
  const errs = chunks.filter((c) => c.type === 'RUN_ERROR')
  eq(errs, [], 'no RUN_ERROR')
  eq(types[0], 'RUN_STARTED', 'first chunk')
  assert(types.includes('RUN_FINISHED'), `RUN_FINISHED in ${types}`)
  const text = chunks.filter((c) => c.type === 'TEXT_MESSAGE_CONTENT').map((c) => c.delta).join('')
  assert(text.length > 0, 'some text')
  const session = chunks.find((c) => c.type === 'CUSTOM' && c.name === `${cli === 'claude' ? 'claude-code' : 'codex'}.session-id`)
  assert(session, 'session id event')
  return { n: chunks.length, types: [...new Set(types)], text }
}

CHECKS.chat_claude = () => chatWith('claude')
CHECKS.chat_codex = () => chatWith('codex')

CHECKS.scope = async () => {
  // run with a token scoped threads=a-*: ids are mapped into the scope
  eq(provider.idPrefix, 'a-', 'prefix from the scope')
  const id = '0123456789abcdef'
  const h = await provider.create({ id })
  eq(h.id, id, 'the caller keeps its id')
  await h.fs.write('/workspace/t.txt', 'tenant a')
  eq((await h.process.exec('cat t.txt')).stdout, 'tenant a', 'exec in the mapped sandbox')
  const ref = await h.snapshot('s')
  const r = await provider.restoreSnapshot({ snapshotId: ref.id })
  eq(await r.fs.read('/workspace/t.txt'), 'tenant a', 'restore in scope')
  const wrong = runwardenSandbox({ url, token, idPrefix: 'b-', WebSocket })
  await rejects(wrong.create({ id }), (e) => e instanceof RunwardenError && e.status === 403 && e.code === 'thread_forbidden', 'outside the scope')
  await r.destroy()
  return { sandbox: sid(id) }
}

const names = checks.length ? checks : Object.keys(CHECKS)
for (const name of names) {
  const t0 = Date.now()
  const fn = CHECKS[name]
  try {
    if (!fn) throw new Error(`no check ${name}`)
    if (readyError) throw readyError
    const info = await fn()
    console.log(JSON.stringify({ check: name, ok: true, ms: Date.now() - t0, ...(info ? { info } : {}) }))
  } catch (e) {
    console.log(JSON.stringify({ check: name, ok: false, ms: Date.now() - t0, error: String(e?.stack ?? e) }))
  }
}
process.exit(0)
