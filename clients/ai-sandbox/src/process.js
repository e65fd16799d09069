// SPDX-License-Identifier: MIT
// handle.process: exec over POST /sandboxes/{id}/exec (NDJSON), spawn over the
// WebSocket GET /sandboxes/{id}/exec (writable stdin) or, without a WebSocket
// constructor, over the NDJSON route (stdin not writable). kill() and an
// AbortSignal go through the processes kill route or the socket's kill
// message; SIGKILL (the default) kills the exec's whole cgroup, so what the
// command backgrounded dies with it.
import { UnsupportedCapabilityError } from '@tanstack/ai-sandbox'
import { RunwardenError, base64ToBytes, concatBytes, seg, toBytes } from './http.js'

const SIGNALS = {
  SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGILL: 4, SIGTRAP: 5, SIGABRT: 6, SIGBUS: 7, SIGFPE: 8,
  SIGKILL: 9, SIGUSR1: 10, SIGSEGV: 11, SIGUSR2: 12, SIGPIPE: 13, SIGALRM: 14, SIGTERM: 15,
  SIGCONT: 18, SIGSTOP: 19, SIGTSTP: 20, SIGXCPU: 24, SIGXFSZ: 25, SIGWINCH: 28,
}

function signalNumber(sig) {
  if (typeof sig === 'number') return sig
  if (typeof sig === 'string') return SIGNALS[sig.toUpperCase()] ?? SIGNALS[`SIG${sig.toUpperCase()}`]
  return undefined
}

/** The shell-style exit code of an `exit` message: 128+signal when a signal ended it, else the code (124: a timeout without one). */
export function exitCodeOf(m) {
  const n = signalNumber(m.signal)
  if (n !== undefined && n > 0) return 128 + n
  if (typeof m.exitCode === 'number' && m.exitCode >= 0) return m.exitCode
  if (m.reason === 'timeout') return 124
  return 1
}

function chunkBytes(m) {
  return typeof m.dataBase64 === 'string' ? base64ToBytes(m.dataBase64) : toBytes(m.data ?? '')
}

/** An async iterable fed by push(); one consumer. */
class Channel {
  constructor() {
    this.queue = []
    this.waiters = []
    this.done = false
  }
  push(v) {
    if (this.done) return
    const w = this.waiters.shift()
    if (w) w({ value: v, done: false })
    else this.queue.push(v)
  }
  close() {
    if (this.done) return
    this.done = true
    for (const w of this.waiters.splice(0)) w({ value: undefined, done: true })
  }
  [Symbol.asyncIterator]() {
    return {
      next: () => {
        if (this.queue.length) return Promise.resolve({ value: this.queue.shift(), done: false })
        if (this.done) return Promise.resolve({ value: undefined, done: true })
        return new Promise((resolve) => this.waiters.push(resolve))
      },
      return: () => Promise.resolve({ value: undefined, done: true }),
    }
  }
}

/** Decodes a stream's chunks (`data` or `dataBase64`) into strings, UTF-8 split-safe. */
function textSink(channel) {
  const dec = new TextDecoder()
  return {
    chunk(m) {
      const s = dec.decode(chunkBytes(m), { stream: true })
      if (s) channel.push(s)
    },
    end() {
      const s = dec.decode()
      if (s) channel.push(s)
      channel.close()
    },
  }
}

/**
 * ctx: { name, client, sid, env() (the handle's env), caps (the handle's
 * capabilities), WebSocket (a constructor or undefined) }
 */
export function createProcess(ctx) {
  const base = `/sandboxes/${seg(ctx.sid)}`

  function startBody(command, opts = {}) {
    const body = typeof command === 'string' ? { command } : { argv: command }
    if (opts.cwd !== undefined) body.cwd = opts.cwd
    const env = { ...ctx.env(), ...opts.env }
    if (Object.keys(env).length > 0) body.env = env
    if (opts.timeoutMs !== undefined) body.timeoutMs = opts.timeoutMs
    if (opts.stdin !== undefined) body.stdin = opts.stdin
    if (opts.stdinBase64 !== undefined) body.stdinBase64 = opts.stdinBase64
    return body
  }

  async function killPid(pid, signal = 'SIGKILL') {
    const sig = typeof signal === 'number' ? String(signal) : signal
    await ctx.client.request('POST', `${base}/processes/${pid}/kill?signal=${encodeURIComponent(sig)}`, {
      allow: [404],
    })
  }

  /**
   * One NDJSON exec: resolves { pid, stdout: Uint8Array, stderr: Uint8Array,
   * exitCode, exit } once the exit line came. An abort kills the exec
   * (SIGKILL, whole cgroup) and still resolves with its exit.
   */
  async function run(body, { signal, onStarted, onStdout, onStderr } = {}) {
    if (signal?.aborted) throw signal.reason ?? new Error('aborted')
    const ac = new AbortController()
    let pid
    let aborted = false
    const onAbort = () => {
      aborted = true
      if (pid === undefined) ac.abort()
      else killPid(pid).catch(() => ac.abort())
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    const out = []
    const err = []
    try {
      const lines = ctx.client.ndjsonRequest('POST', `${base}/exec`, { json: body, signal: ac.signal })
      let done
      let first = true
      try {
        for await (const m of lines) {
          first = false
          if (done) continue
          if (m.type === 'started') {
            pid = m.pid
            onStarted?.(m.pid)
            if (aborted) onAbort()
          } else if (m.type === 'stdout') {
            if (onStdout) onStdout(m)
            else out.push(chunkBytes(m))
          } else if (m.type === 'stderr') {
            if (onStderr) onStderr(m)
            else err.push(chunkBytes(m))
          } else if (m.type === 'exit') {
            // read on to the body's end (it follows at once): a chunked body
            // read to its end leaves the connection to the keep-alive agent
            done = { pid, stdout: concatBytes(out), stderr: concatBytes(err), exitCode: exitCodeOf(m), exit: m }
          } else if (m.type === 'error') {
            throw new RunwardenError(`runwarden: exec: ${m.code}: ${m.error}`, { code: m.code })
          }
        }
      } catch (e) {
        if (first && aborted) return { pid, stdout: new Uint8Array(), stderr: new Uint8Array(), exitCode: 137, exit: null }
        if (!done && !aborted) throw e
      }
      if (done) return done
      if (aborted) {
        return { pid, stdout: concatBytes(out), stderr: concatBytes(err), exitCode: 137, exit: null }
      }
      throw new RunwardenError('runwarden: the exec stream ended before its exit', { code: 'stream_ended' })
    } finally {
      signal?.removeEventListener('abort', onAbort)
    }
  }

  const dec = (b) => new TextDecoder().decode(b)

  async function exec(command, opts = {}) {
    const r = await run(startBody(command, opts), { signal: opts.signal })
    return { stdout: dec(r.stdout), stderr: dec(r.stderr), exitCode: r.exitCode }
  }

  /** spawn over NDJSON: streamed output, no writable stdin. */
  function spawnNdjsonRoute(command, opts) {
    return new Promise((resolve, reject) => {
      const stdout = new Channel()
      const stderr = new Channel()
      const so = textSink(stdout)
      const se = textSink(stderr)
      let pid
      const done = run(startBody(command, opts), {
        signal: opts.signal,
        onStarted: (p) => {
          pid = p
          resolve(handle)
        },
        onStdout: (m) => so.chunk(m),
        onStderr: (m) => se.chunk(m),
      }).finally(() => {
        so.end()
        se.end()
      })
      done.catch(reject) // before the start: the spawn fails
      const noStdin = () =>
        Promise.reject(
          new UnsupportedCapabilityError(
            ctx.name,
            'writableStdin',
            'Pass a WebSocket constructor to runwardenSandbox({ WebSocket }) (Node 20 has no global WebSocket).',
          ),
        )
      const handle = {
        get pid() {
          return pid
        },
        stdout,
        stderr,
        stdin: { write: noStdin, end: () => Promise.resolve() },
        wait: () => done.then((r) => r.exitCode),
        kill: (signal) => (pid === undefined ? Promise.resolve() : killPid(pid, signal ?? 'SIGKILL')),
      }
    })
  }

  /** spawn over the WebSocket: full duplex. */
  function spawnWs(command, opts) {
    const WS = ctx.WebSocket
    const { url, protocols } = ctx.client.wsTarget(`${base}/exec`)
    return new Promise((resolve, reject) => {
      if (opts.signal?.aborted) {
        reject(opts.signal.reason ?? new Error('aborted'))
        return
      }
      const ws = new WS(url, protocols)
      ws.binaryType = 'arraybuffer'
      const stdout = new Channel()
      const stderr = new Channel()
      const so = textSink(stdout)
      const se = textSink(stderr)
      let pid
      let started = false
      let exited = false
      let exitResolve, exitReject
      const exitP = new Promise((res, rej) => {
        exitResolve = res
        exitReject = rej
      })
      exitP.catch(() => {})
      const send = (obj) => {
        if (ws.readyState === 1) ws.send(typeof obj === 'string' ? obj : JSON.stringify(obj))
      }
      const kill = (signal) => {
        if (!exited) send({ type: 'kill', signal: signal ?? 'SIGKILL' })
        return Promise.resolve()
      }
      const onAbort = () => void kill('SIGKILL')
      opts.signal?.addEventListener('abort', onAbort, { once: true })
      const finish = () => {
        opts.signal?.removeEventListener('abort', onAbort)
        so.end()
        se.end()
      }
      const handle = {
        get pid() {
          return pid
        },
        stdout,
        stderr,
        stdin: {
          write: async (data) => {
            if (exited || ws.readyState !== 1) throw new Error('runwarden: stdin is closed (the process ended)')
            if (typeof data === 'string') send({ type: 'stdin', data })
            else ws.send(toBytes(data))
          },
          end: async () => {
            send({ type: 'eof' })
          },
        },
        wait: () => exitP,
        kill,
      }
      ws.onopen = () => send(startBody(command, opts))
      ws.onmessage = (ev) => {
        if (typeof ev.data !== 'string') return
        let m
        try {
          m = JSON.parse(ev.data)
        } catch {
          return
        }
        if (m.type === 'started') {
          pid = m.pid
          started = true
          resolve(handle)
          if (opts.signal?.aborted) onAbort()
        } else if (m.type === 'stdout') so.chunk(m)
        else if (m.type === 'stderr') se.chunk(m)
        else if (m.type === 'exit') {
          exited = true
          finish()
          exitResolve(exitCodeOf(m))
        } else if (m.type === 'error') {
          const e = new RunwardenError(`runwarden: exec: ${m.code}: ${m.error}`, { code: m.code, status: m.status })
          if (!started) reject(e)
          else exitReject(e)
        }
      }
      ws.onerror = (ev) => {
        const e = new RunwardenError(`runwarden: exec socket: ${ev?.message ?? ev?.error?.message ?? 'error'}`, {
          code: 'socket_error',
        })
        if (!started) reject(e)
      }
      ws.onclose = (ev) => {
        finish()
        if (!exited) {
          const e = new RunwardenError(
            `runwarden: the exec socket closed before the exit (${ev.code}${ev.reason ? ` ${ev.reason}` : ''})`,
            { code: 'socket_closed' },
          )
          if (!started) reject(e)
          exitReject(e)
        }
      }
    })
  }

  async function spawn(command, opts = {}) {
    if (ctx.WebSocket && ctx.caps.writableStdin) return spawnWs(command, opts)
    return spawnNdjsonRoute(command, opts)
  }

  return { exec, spawn, run, killPid, startBody }
}
