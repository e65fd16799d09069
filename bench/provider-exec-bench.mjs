// SPDX-License-Identifier: MIT
// Exec round trip of `true`, three ways in one invocation (bench/README.md,
// "The provider's exec round trip"):
//   runwarden      @runwarden/ai-sandbox: handle.process.exec('true') into a
//                  live sandbox (POST /sandboxes/{id}/exec, NDJSON)
//   local-process  @tanstack/ai-sandbox-local-process: sh -c true on the host
//   crun exec      `crun exec NAME /bin/true` into a running container
// Samples are interleaved (one of each per round, the order rotated), so load
// changes hit all three alike; the ratios are the figures.
//
//   node bench/provider-exec-bench.mjs [--n 300] [--build build] [--url URL --token T]
//                                      [--sandbox-shell /bin/sh] [--command CMD]
//
// --command (default `true`) is the shell command runwarden and local-process
// run (crun exec runs `/bin/true`, or `/bin/sh -c CMD` for another); one with
// shell syntax (e.g. 'true;') measures an exec that needs the shell, since a
// plain command runs without bash in the sandbox (exec-direct.h).
//
// --sandbox-shell sets [coordinatord] sandbox_shell of the daemons it starts
// (default /bin/bash, with LANG=C.UTF-8: about 0.4 ms more per exec than the
// dash that local-process's `sh` is on Debian; bench/README.md).
// Without --url it starts the three daemons from --build (tests/e2e/rwtest.py,
// a private directory), then runs itself again in a private mount namespace
// without /sys/fs/cgroup/unified (crun 1.8 refuses this host's hybrid cgroup
// layout otherwise; runwarden keeps the host's). Needs root, crun, node and
// tests/js/node_modules (npm ci there).
import { spawn, spawnSync } from 'node:child_process'
import { closeSync, mkdtempSync, mkdirSync, openSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, dirname, resolve } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { performance } from 'node:perf_hooks'

const HERE = dirname(fileURLToPath(import.meta.url))
const TOP = resolve(HERE, '..')
const NM = join(TOP, 'tests', 'js', 'node_modules')

function arg(name, dflt) {
  const i = process.argv.indexOf(`--${name}`)
  return i > 0 ? process.argv[i + 1] : dflt
}
const N = Number(arg('n', '300'))
const COMMAND = arg('command', 'true')
const WARM = 20

if (!process.execArgv.includes('--preserve-symlinks')) {
  // the package is a symlink in tests/js/node_modules; its peer resolves there
  const r = spawnSync(process.execPath, ['--preserve-symlinks', ...process.argv.slice(1)], { stdio: 'inherit' })
  process.exit(r.status ?? 1)
}

async function outer() {
  const build = resolve(arg('build', join(TOP, 'build')))
  const shell = arg('sandbox-shell', '')
  if (!/^[A-Za-z0-9/._-]*$/.test(shell)) throw new Error('--sandbox-shell: a path')
  const py = `
import os, sys
sys.path.insert(0, ${JSON.stringify(join(TOP, 'tests', 'e2e'))})
os.environ["RW_BUILD_DIR"] = ${JSON.stringify(build)}
import rwtest
rwtest.BUILD = ${JSON.stringify(build)}
s = rwtest.Suite(${JSON.stringify(shell ? `[coordinatord]\nsandbox_shell = ${shell}\n` : '')}).start()
print(s.port, flush=True)
sys.stdin.read()
problems = s.stop()
s.cleanup()
print("\\n".join(problems), file=sys.stderr)
`
  const suite = spawn('/usr/bin/python3', ['-c', py], { stdio: ['pipe', 'pipe', 'inherit'] })
  const port = await new Promise((res, rej) => {
    let buf = ''
    suite.stdout.on('data', (d) => {
      buf += d
      if (buf.includes('\n')) res(buf.trim())
    })
    suite.on('exit', (c) => rej(new Error(`the daemons did not start (${c})`)))
  })
  const inner = spawnSync(
    'unshare',
    ['-m', '--propagation', 'private', 'sh', '-c', 'umount -l /sys/fs/cgroup/unified 2>/dev/null; exec "$@"', 'sh',
      process.execPath, '--preserve-symlinks', fileURLToPath(import.meta.url), '--url', `http://127.0.0.1:${port}`,
      '--n', String(N), '--command', COMMAND],
    { stdio: 'inherit' },
  )
  suite.stdin.end()
  await new Promise((r) => suite.on('exit', r))
  process.exit(inner.status ?? 1)
}

function crunBundle() {
  const dir = mkdtempSync(join(tmpdir(), 'rw-crun-bench-'))
  const root = join(dir, 'rootfs')
  for (const d of ['usr', 'proc', 'dev', 'sys', 'tmp', 'etc']) mkdirSync(join(root, d), { recursive: true })
  for (const l of ['bin', 'lib', 'lib64', 'sbin']) symlinkSync(`usr/${l}`, join(root, l))
  const r = spawnSync('crun', ['spec'], { cwd: dir })
  if (r.status !== 0) throw new Error(`crun spec: ${r.stderr}`)
  const c = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'))
  c.process.terminal = false
  c.process.args = ['sleep', 'infinity']
  c.root = { path: 'rootfs', readonly: true }
  c.mounts.push({ destination: '/usr', type: 'bind', source: '/usr', options: ['rbind', 'ro'] })
  writeFileSync(join(dir, 'config.json'), JSON.stringify(c))
  return dir
}

function runOnce(cmd, args) {
  return new Promise((res, rej) => {
    const t0 = performance.now()
    const p = spawn(cmd, args, { stdio: 'ignore' })
    p.on('error', rej)
    p.on('exit', (code) => (code === 0 ? res(performance.now() - t0) : rej(new Error(`${cmd} ${args.join(' ')}: exit ${code}`))))
  })
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]
}

async function main() {
  const url = arg('url')
  const token = arg('token')
  const { runwardenSandbox } = await import(pathToFileURL(join(NM, '@runwarden', 'ai-sandbox', 'index.js')))
  const { localProcessSandbox } = await import(
    pathToFileURL(join(NM, '@tanstack', 'ai-sandbox-local-process', 'dist', 'esm', 'index.js'))
  )
  const rw = await runwardenSandbox({ url, token }).create({ id: `bench-${process.pid}` })
  const local = await localProcessSandbox().create({})
  const bundle = crunBundle()
  const name = `rw-bench-${process.pid}`
  // the container keeps the stdio crun gave it: no pipe here, or spawnSync
  // would wait for its end
  const errFile = join(bundle, 'run.err')
  const errFd = openSync(errFile, 'w')
  const started = spawnSync('crun', ['run', '-d', '--bundle', bundle, name], { stdio: ['ignore', 'ignore', errFd] })
  closeSync(errFd)
  if (started.status !== 0) throw new Error(`crun run: ${readFileSync(errFile, 'utf8')}`)
  const contenders = {
    runwarden: async () => {
      const t0 = performance.now()
      const r = await rw.process.exec(COMMAND)
      if (r.exitCode !== 0) throw new Error(`runwarden exec: ${r.exitCode} ${r.stderr}`)
      return performance.now() - t0
    },
    'local-process': async () => {
      const t0 = performance.now()
      const r = await local.process.exec(COMMAND)
      if (r.exitCode !== 0) throw new Error('local-process exec failed')
      return performance.now() - t0
    },
    'crun exec': () =>
      runOnce('crun', ['exec', name, ...(COMMAND === 'true' ? ['/bin/true'] : ['/bin/sh', '-c', COMMAND])]),
  }
  const names = Object.keys(contenders)
  const times = Object.fromEntries(names.map((n) => [n, []]))
  try {
    for (let i = 0; i < WARM + N; i++) {
      for (let k = 0; k < names.length; k++) {
        const n = names[(i + k) % names.length]
        const t = await contenders[n]()
        if (i >= WARM) times[n].push(t)
      }
    }
  } finally {
    spawnSync('crun', ['delete', '-f', name])
    rmSync(bundle, { recursive: true, force: true })
    await rw.destroy().catch(() => {})
    await local.destroy().catch(() => {})
  }
  const load = readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')
  const stats = Object.fromEntries(
    names.map((n) => [n, { p50: pct(times[n], 50), p90: pct(times[n], 90), p99: pct(times[n], 99) }]),
  )
  const f = (x) => x.toFixed(2)
  console.log(`exec round trip of \`${COMMAND}\`, ${N} each, interleaved (load ${load})`)
  console.log('contender        p50 ms   p90 ms   p99 ms')
  for (const n of names) {
    console.log(`${n.padEnd(15)} ${f(stats[n].p50).padStart(7)} ${f(stats[n].p90).padStart(8)} ${f(stats[n].p99).padStart(8)}`)
  }
  const r = (a, b, k) => stats[a][k] / stats[b][k]
  for (const ref of ['local-process', 'crun exec']) {
    const k = ['p50', 'p90', 'p99'].map((q) => `${q} ${f(r('runwarden', ref, q))}×`).join(', ')
    console.log(`runwarden ÷ ${ref}: ${k}`)
  }
  console.log(JSON.stringify({ n: N, command: COMMAND, load, at: new Date().toISOString(), stats }))
}

if (arg('url')) await main()
else await outer()
