// SPDX-License-Identifier: MIT
// The HTTP side of the provider: one client per provider (base URL, bearer
// token, fetch), errors as RunwardenError with the server's `code`, NDJSON
// streams read line by line, and the small byte helpers the rest shares.

/** An HTTP error of the runwarden API: `status` and the `code` of its JSON body. */
export class RunwardenError extends Error {
  constructor(message, { status, code, method, path } = {}) {
    super(message)
    this.name = 'RunwardenError'
    this.status = status
    this.code = code
    this.method = method
    this.path = path
  }
}

const enc = new TextEncoder()

export function toBytes(data) {
  if (typeof data === 'string') return enc.encode(data)
  if (data instanceof Uint8Array) return data
  if (data instanceof ArrayBuffer) return new Uint8Array(data)
  throw new TypeError('expected a string or a Uint8Array')
}

export function base64ToBytes(s) {
  if (globalThis.Buffer) return new Uint8Array(globalThis.Buffer.from(s, 'base64'))
  const bin = atob(s)
  const out = new Uint8Array(bin.length)
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i)
  return out
}

export function bytesToBase64(bytes) {
  if (globalThis.Buffer) {
    return globalThis.Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64')
  }
  let bin = ''
  for (let i = 0; i < bytes.length; i += 0x8000) {
    bin += String.fromCharCode(...bytes.subarray(i, i + 0x8000))
  }
  return btoa(bin)
}

export function concatBytes(chunks) {
  let n = 0
  for (const c of chunks) n += c.length
  const out = new Uint8Array(n)
  let o = 0
  for (const c of chunks) {
    out.set(c, o)
    o += c.length
  }
  return out
}

/** One path segment (a sandbox id, a snapshot id) for a URL. */
export const seg = (s) => encodeURIComponent(s)

async function errorFrom(res, method, path) {
  let body
  try {
    body = await res.json()
  } catch {
    body = undefined
  }
  const code = body && typeof body.code === 'string' ? body.code : `http_${res.status}`
  const text = body && typeof body.error === 'string' ? body.error : res.statusText
  return new RunwardenError(`runwarden: ${method} ${path}: ${res.status} ${code}: ${text}`, {
    status: res.status,
    code,
    method,
    path,
  })
}

export function createClient({ url, token, fetch: fetchImpl }) {
  if (typeof url !== 'string' || !/^https?:\/\//.test(url)) {
    throw new TypeError('runwardenSandbox: `url` must be an http(s) URL')
  }
  const base = url.replace(/\/+$/, '')
  const doFetch = fetchImpl ?? globalThis.fetch
  if (typeof doFetch !== 'function') {
    throw new TypeError('runwardenSandbox: no fetch (pass the `fetch` option)')
  }

  /** fetch; throws RunwardenError unless res.ok or its status is in `allow`. */
  async function request(method, path, { json, body, headers, signal, allow = [] } = {}) {
    const h = { ...headers }
    if (token) h.authorization = `Bearer ${token}`
    if (json !== undefined) {
      h['content-type'] = 'application/json'
      body = JSON.stringify(json)
    }
    const res = await doFetch(base + path, { method, headers: h, body, signal })
    if (!res.ok && !allow.includes(res.status)) throw await errorFrom(res, method, path)
    return res
  }

  async function json(method, path, opts) {
    const res = await request(method, path, opts)
    if (res.status === 204) return null
    const text = await res.text()
    return text ? JSON.parse(text) : null
  }

  /** ws:// or wss:// URL of a path, and the subprotocols carrying the token. */
  function wsTarget(path) {
    const protocols = ['runwarden']
    if (token) {
      const b64 = bytesToBase64(enc.encode(token))
        .replace(/\+/g, '-')
        .replace(/\//g, '_')
        .replace(/=+$/, '')
      protocols.push(`bearer.${b64}`)
    }
    return { url: base.replace(/^http/, 'ws') + path, protocols }
  }

  /**
   * POST an NDJSON request and yield its lines. Under Node with the default
   * fetch this goes through node:http(s) with a keep-alive agent: an exec's
   * round trip through undici's fetch and a web stream cost 0.2–0.35 ms more
   * (bench/README.md, issue 36). With a `fetch` option, or elsewhere, fetch.
   */
  async function* ndjsonRequest(method, path, { json: j, signal } = {}) {
    const nodeHttp = fetchImpl ? null : await nodeTransport(base)
    if (!nodeHttp) {
      yield* ndjson(await request(method, path, { json: j, signal }))
      return
    }
    const h = { 'content-type': 'application/json' }
    if (token) h.authorization = `Bearer ${token}`
    const body = JSON.stringify(j)
    h['content-length'] = String(Buffer.byteLength(body))
    const res = await nodeHttp.send(method, base + path, h, body, signal)
    if (res.statusCode < 200 || res.statusCode > 299) {
      const chunks = []
      for await (const c of res) chunks.push(c)
      let b
      try {
        b = JSON.parse(Buffer.concat(chunks).toString('utf8'))
      } catch {
        b = undefined
      }
      const code = b && typeof b.code === 'string' ? b.code : `http_${res.statusCode}`
      const text = b && typeof b.error === 'string' ? b.error : res.statusMessage
      throw new RunwardenError(`runwarden: ${method} ${path}: ${res.statusCode} ${code}: ${text}`, {
        status: res.statusCode,
        code,
        method,
        path,
      })
    }
    res.setEncoding('utf8')
    let buf = ''
    let complete = false
    try {
      for await (const piece of res) {
        buf += piece
        let i
        while ((i = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, i).trim()
          buf = buf.slice(i + 1)
          if (line) yield JSON.parse(line)
        }
      }
      complete = true
      if (buf.trim()) yield JSON.parse(buf)
    } finally {
      // an early return (an abort, an error line) must not leave the socket
      // to the agent with a body half read
      if (!complete) res.destroy()
    }
  }

  return { base, request, json, wsTarget, ndjsonRequest }
}

let transports // base URL -> Promise<{ send } | null>

/** node:http(s) with a keep-alive agent, or null outside Node. */
function nodeTransport(base) {
  if (typeof process === 'undefined' || !process.versions?.node || typeof Buffer === 'undefined') {
    return Promise.resolve(null)
  }
  transports ??= new Map()
  const https = base.startsWith('https:')
  let t = transports.get(https)
  if (!t) {
    t = import(https ? 'node:https' : 'node:http')
      .then((mod) => {
        const agent = new mod.Agent({ keepAlive: true })
        const send = (method, url, headers, body, signal) =>
          new Promise((resolve, reject) => {
            if (signal?.aborted) return reject(signal.reason ?? new Error('aborted'))
            const req = mod.request(url, { method, headers, agent, signal }, resolve)
            req.on('error', reject)
            req.end(body)
          })
        return { send }
      })
      .catch(() => null)
    transports.set(https, t)
  }
  return t
}

/** Each line of an NDJSON response body, parsed. */
export async function* ndjson(res) {
  const reader = res.body.getReader()
  const dec = new TextDecoder()
  let buf = ''
  try {
    for (;;) {
      const { value, done } = await reader.read()
      if (done) break
      buf += dec.decode(value, { stream: true })
      let i
      while ((i = buf.indexOf('\n')) >= 0) {
        const line = buf.slice(0, i).trim()
        buf = buf.slice(i + 1)
        if (line) yield JSON.parse(line)
      }
    }
    buf += dec.decode()
    if (buf.trim()) yield JSON.parse(buf)
  } finally {
    // an early return (the exit seen, an abort) frees the connection
    await reader.cancel().catch(() => {})
  }
}
