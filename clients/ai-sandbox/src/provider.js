// SPDX-License-Identifier: MIT
// runwardenSandbox(): the SandboxProvider and its handles.
import { UnsupportedCapabilityError, createExecBackedGit } from '@tanstack/ai-sandbox'
import { RunwardenError, createClient, seg } from './http.js'
import { WORKSPACE_ROOT, createFs } from './fs.js'
import { createProcess } from './process.js'

const NAME = 'runwarden'

/** What is claimed before GET /capabilities answered: only what always holds. */
const CONSERVATIVE = Object.freeze({
  fs: true,
  exec: true,
  env: true,
  ports: false,
  backgroundProcesses: false,
  writableStdin: false,
  snapshots: false,
  networkPolicy: false,
  durableFilesystem: false,
  fork: false,
  killableProcesses: false,
})

function randomId(tag) {
  const b = new Uint8Array(8)
  globalThis.crypto.getRandomValues(b)
  return `${tag}-${Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('')}`
}

/** SandboxCapabilities from the server's answer (writableStdin needs a WebSocket here). */
export function mapCapabilities(raw, haveWebSocket) {
  const s = (raw && raw.sandbox) || {}
  return Object.freeze({
    fs: true,
    exec: s.exec !== false,
    env: true,
    ports: s.ports === true,
    backgroundProcesses: s.backgroundProcesses === true,
    writableStdin: s.writableStdin === true && haveWebSocket,
    snapshots: s.snapshots === true,
    networkPolicy: s.networkPolicy === true,
    durableFilesystem: s.durableFilesystem === true,
    fork: s.fork === true && s.snapshots === true,
    killableProcesses: s.killableProcesses !== false && s.exec !== false,
  })
}

/** The prefix of the first `PREFIX*` item of the token's thread scope ('' when unscoped). */
export function scopePrefix(raw) {
  const items = raw && raw.scope && Array.isArray(raw.scope.threads) ? raw.scope.threads : null
  if (!items) return ''
  const wild = items.find((t) => typeof t === 'string' && t.endsWith('*'))
  return wild ? wild.slice(0, -1) : ''
}

/** A snapshot ref id: `<sandbox id>:<snapshot id>` (the caller's sandbox id). */
export function parseSnapshotRef(ref) {
  const i = typeof ref === 'string' ? ref.lastIndexOf(':') : -1
  if (i <= 0 || i === ref.length - 1) {
    throw new RunwardenError(`runwarden: not a runwarden snapshot id: ${ref}`, { code: 'bad_snapshot_id' })
  }
  return { sandboxId: ref.slice(0, i), snapshotId: ref.slice(i + 1) }
}

export function runwardenSandbox(options = {}) {
  const { url, token, fetch, idPrefix, WebSocket: WSOption, keepWorkspaceOnDestroy = false, egress } = options
  if (egress !== undefined && !(Array.isArray(egress) && egress.every((e) => typeof e === 'string'))) {
    throw new TypeError('runwardenSandbox: `egress` must be an array of host names')
  }
  const client = createClient({ url, token, fetch })
  const WS = WSOption ?? globalThis.WebSocket
  let caps = null
  let raw = null
  let prefix = idPrefix
  let pending = null
  const envs = new Map() // caller id -> env object, kept in this process only

  async function ready() {
    if (caps) return caps
    pending ??= client
      .json('GET', '/capabilities')
      .then((r) => {
        raw = r
        caps = mapCapabilities(r, typeof WS === 'function')
        if (prefix === undefined) prefix = scopePrefix(r)
        return caps
      })
      .finally(() => {
        pending = null
      })
    return pending
  }

  const serverId = (id) => {
    if (typeof id !== 'string' || id === '') throw new TypeError('runwarden: a sandbox id must be a non-empty string')
    return `${prefix ?? ''}${id}`
  }
  const envOf = (id) => {
    let e = envs.get(id)
    if (!e) envs.set(id, (e = {}))
    return e
  }

  function makeHandle(id) {
    const sid = serverId(id)
    const env = envOf(id)
    const hcaps = caps
    const base = `/sandboxes/${seg(sid)}`
    const proc = createProcess({ name: NAME, client, sid, env: () => env, caps: hcaps, WebSocket: WS })
    const process = { exec: proc.exec, spawn: proc.spawn }
    const fs = createFs({ client, sid, proc })
    if (raw?.sandbox?.fsWatch !== true) delete fs.watch

    async function snapshot(label) {
      if (!hcaps.snapshots) throw new UnsupportedCapabilityError(NAME, 'snapshots')
      const r = await client.json('POST', `/threads/${seg(sid)}/snapshots`, { json: label ? { label } : {} })
      const snap = r && r.id
      if (typeof snap !== 'string' || snap === '') {
        throw new RunwardenError('runwarden: the snapshot answer has no short id (a runwarden without the sandbox API?)', {
          code: 'no_snapshot_id',
        })
      }
      return label ? { id: `${id}:${snap}`, label } : { id: `${id}:${snap}` }
    }

    const handle = {
      id,
      provider: NAME,
      workspaceRoot: WORKSPACE_ROOT,
      capabilities: hcaps,
      fs,
      process,
      git: createExecBackedGit(process, WORKSPACE_ROOT),
      ports: {
        connect: async (port) => {
          if (!hcaps.ports) {
            throw new UnsupportedCapabilityError(NAME, 'ports', 'The server has no [routerd] preview_listen.')
          }
          const r = await client.json('POST', `${base}/ports/${encodeURIComponent(String(port))}`)
          return r.headers && Object.keys(r.headers).length ? { url: r.url, headers: r.headers } : { url: r.url }
        },
      },
      env: {
        set: async (vars) => {
          for (const [k, v] of Object.entries(vars ?? {})) {
            if (typeof v !== 'string') throw new TypeError(`runwarden: env ${k} must be a string`)
            env[k] = v
          }
        },
      },
      snapshot,
      fork: async () => {
        if (!hcaps.fork) throw new UnsupportedCapabilityError(NAME, 'fork')
        const ref = await snapshot('fork')
        return restoreInto(randomId('fork'), ref.id, { ...env })
      },
      destroy: () => destroy({ id }),
    }
    return handle
  }

  /** The egress allow-list of the options, on a sandbox just made. */
  async function applyEgress(id, signal) {
    if (egress === undefined) return
    await client.json('PUT', `/sandboxes/${seg(serverId(id))}/egress`, { json: { allow: egress }, signal })
  }

  async function restoreInto(newId, ref, env) {
    const { sandboxId, snapshotId } = parseSnapshotRef(ref)
    await client.json('POST', `/sandboxes/${seg(serverId(newId))}/restore`, {
      json: { from: serverId(sandboxId), snapshotId },
    })
    await applyEgress(newId)
    if (env) Object.assign(envOf(newId), env)
    return makeHandle(newId)
  }

  async function create(input = {}) {
    await ready()
    const id = input.id ?? randomId('sbx')
    await client.json('PUT', `/sandboxes/${seg(serverId(id))}`, { json: {}, signal: input.signal })
    await applyEgress(id, input.signal)
    if (input.env) Object.assign(envOf(id), input.env)
    return makeHandle(id)
  }

  async function resume(input) {
    await ready()
    const res = await client.request('GET', `/sandboxes/${seg(serverId(input.id))}`, {
      signal: input.signal,
      allow: [404],
    })
    if (res.status === 404) {
      await res.body?.cancel()
      return null
    }
    await res.body?.cancel()
    return makeHandle(input.id)
  }

  async function destroy(input) {
    await ready()
    const q = keepWorkspaceOnDestroy ? '?keep=workspace' : ''
    await client.request('DELETE', `/sandboxes/${seg(serverId(input.id))}${q}`, { signal: input.signal })
    envs.delete(input.id)
  }

  async function restoreSnapshot(input) {
    await ready()
    if (!caps.snapshots) throw new UnsupportedCapabilityError(NAME, 'snapshots')
    return restoreInto(randomId('restore'), input.snapshotId, input.env)
  }

  return {
    name: NAME,
    capabilities: () => caps ?? CONSERVATIVE,
    ready,
    /** The server's GET /capabilities answer (null before ready()). */
    get serverCapabilities() {
      return raw
    },
    /** The id prefix in use (known after ready()). */
    get idPrefix() {
      return prefix
    },
    create,
    resume,
    destroy,
    restoreSnapshot,
  }
}
