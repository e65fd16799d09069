// SPDX-License-Identifier: MIT
// handle.fs: paths under /workspace (absolute virtual paths, or relative ones)
// go through the files API (/threads/{id}/files/…, openat2-confined on the
// server); any other absolute path (the adapters' /tmp prompt files) goes
// through an argv exec in the sandbox — the path is an argument, never part of
// a shell string. watch() is the long-poll GET /sandboxes/{id}/watch.
import { RunwardenError, bytesToBase64, seg, toBytes } from './http.js'

export const WORKSPACE_ROOT = '/workspace'

/** '' for the workspace root, 'a/b' for '/workspace/a/b' or 'a/b'; null outside. */
export function workspaceRel(p) {
  if (typeof p !== 'string' || p === '') throw new TypeError('runwarden: a path must be a non-empty string')
  let rel
  if (p === WORKSPACE_ROOT || p === `${WORKSPACE_ROOT}/`) rel = ''
  else if (p.startsWith(`${WORKSPACE_ROOT}/`)) rel = p.slice(WORKSPACE_ROOT.length + 1)
  else if (p.startsWith('/')) return null
  else rel = p
  // normalise: no empty or '.' components, no trailing slash ('..' is refused by the server)
  return rel
    .split('/')
    .filter((c) => c !== '' && c !== '.')
    .join('/')
}

const virtual = (rel) => (rel === '' ? WORKSPACE_ROOT : `${WORKSPACE_ROOT}/${rel}`)
const LSTAT_TYPES = { file: 'file', directory: 'dir', symlink: 'symlink' }

function notFound(p) {
  const e = new RunwardenError(`runwarden: ${p}: no such file or directory`, { status: 404, code: 'ENOENT' })
  return e
}

/** ctx: { client, sid, proc (createProcess's result) } */
export function createFs(ctx) {
  const files = (rel, q = '') => `/threads/${seg(ctx.sid)}/files/${rel.split('/').map(seg).join('/')}${q}`
  const dec = (b) => new TextDecoder().decode(b)

  // --- outside /workspace: argv execs ---
  async function sh(argv, opts = {}) {
    return ctx.proc.run(ctx.proc.startBody(argv, opts), {})
  }
  async function shOk(argv, p, opts) {
    const r = await sh(argv, opts)
    if (r.exitCode !== 0) {
      const msg = dec(r.stderr).trim()
      if (/No such file|cannot stat|cannot access/.test(msg)) throw notFound(p)
      throw new RunwardenError(`runwarden: ${argv[0]} ${p}: ${msg || `exit ${r.exitCode}`}`, { code: 'exec_failed' })
    }
    return r
  }

  async function readBytes(p) {
    const rel = workspaceRel(p)
    if (rel === null) return (await shOk(['cat', '--', p], p)).stdout
    const res = await ctx.client.request('GET', files(rel))
    if ((res.headers.get('content-type') ?? '').startsWith('application/json')) {
      await res.body?.cancel()
      throw new RunwardenError(`runwarden: ${p} is a directory`, { status: 400, code: 'EISDIR' })
    }
    return new Uint8Array(await res.arrayBuffer())
  }

  async function write(p, data) {
    const bytes = toBytes(data)
    const rel = workspaceRel(p)
    if (rel === null) {
      await shOk(['sh', '-c', 'mkdir -p -- "$(dirname -- "$1")" && cat > "$1"', 'sh', p], p, {
        stdinBase64: bytesToBase64(bytes),
      })
      return
    }
    await ctx.client.request('PUT', files(rel, '?parents=1'), {
      body: bytes,
      headers: { 'content-type': 'application/octet-stream' },
    })
  }

  async function list(p) {
    const rel = workspaceRel(p)
    const base = p.replace(/\/+$/, '') || '/'
    const join = (name) => (base === '/' ? `/${name}` : `${base}/${name}`)
    if (rel === null) {
      const r = await shOk(['find', p, '-mindepth', '1', '-maxdepth', '1', '-printf', '%y\\t%f\\n'], p)
      return dec(r.stdout)
        .split('\n')
        .filter(Boolean)
        .map((line) => {
          const [y, name] = [line.slice(0, 1), line.slice(2)]
          return { name, path: join(name), type: y === 'd' ? 'dir' : 'file' }
        })
    }
    const res = await ctx.client.json('GET', files(rel))
    if (!res || res.type !== 'directory') {
      throw new RunwardenError(`runwarden: ${p} is not a directory`, { status: 400, code: 'ENOTDIR' })
    }
    const vbase = virtual(rel)
    return res.entries.map((e) => ({
      name: e.name,
      path: `${vbase}/${e.name}`,
      type: e.type === 'directory' ? 'dir' : 'file',
    }))
  }

  async function mkdir(p) {
    const rel = workspaceRel(p)
    if (rel === null) return void (await shOk(['mkdir', '-p', '--', p], p))
    if (rel === '') return
    await ctx.client.request('POST', files(rel, '?op=mkdir&parents=1'))
  }

  async function remove(p) {
    const rel = workspaceRel(p)
    if (rel === null) return void (await shOk(['rm', '-rf', '--', p], p))
    if (rel === '') throw new RunwardenError('runwarden: refusing to remove the workspace root', { code: 'bad_request' })
    await ctx.client.request('DELETE', files(rel, '?recursive=1&force=1'), { allow: [404] })
  }

  async function rename(from, to) {
    const a = workspaceRel(from)
    const b = workspaceRel(to)
    if (a === null || b === null) {
      await shOk(['mv', '-f', '-T', '--', from, to], from)
      return
    }
    const q = `?op=rename&to=${encodeURIComponent(b)}&overwrite=1`
    await ctx.client.request('POST', files(a, q))
  }

  async function lstat(p) {
    const rel = workspaceRel(p)
    if (rel === null) {
      const r = await sh(['stat', '-c', '%F\t%a\t%s', '--', p])
      if (r.exitCode !== 0) return undefined
      const [f, mode, size] = dec(r.stdout).trim().split('\t')
      const type =
        f === 'directory' ? 'dir' : f === 'symbolic link' ? 'symlink' : f.includes('regular') ? 'file' : 'other'
      return { type, mode: parseInt(mode, 8), size: Number(size) }
    }
    const res = await ctx.client.request('GET', files(rel, '?stat=1'), { allow: [404] })
    if (res.status === 404) {
      await res.body?.cancel()
      return undefined
    }
    const st = await res.json()
    return { type: LSTAT_TYPES[st.type] ?? 'other', mode: parseInt(st.mode, 8), size: st.size }
  }

  async function exists(p) {
    return (await lstat(p)) !== undefined
  }

  /**
   * Long-poll watch: resolves once the server's watch has started, so every
   * change after it is reported. Event paths are virtual (/workspace/…).
   */
  async function watch(p, onEvent) {
    const rel = workspaceRel(p)
    if (rel === null) {
      throw new RunwardenError(`runwarden: fs.watch works under ${WORKSPACE_ROOT} only`, { code: 'bad_request' })
    }
    const route = `/sandboxes/${seg(ctx.sid)}/watch`
    const q = (extra) => `?${new URLSearchParams({ ...(rel ? { path: rel } : {}), ...extra })}`
    const ac = new AbortController()
    let stopped = false
    const start = async () => (await ctx.client.json('GET', route + q({}), { signal: ac.signal })).cursor ?? 0
    let cursor = await start()
    const loop = (async () => {
      while (!stopped) {
        try {
          const r = await ctx.client.json('GET', route + q({ cursor: String(cursor), waitMs: '25000' }), {
            signal: ac.signal,
          })
          cursor = r.cursor ?? cursor
          for (const e of r.events ?? []) {
            if (stopped) break
            const type = e.type === 'modify' ? 'change' : e.type
            try {
              onEvent({ type, path: virtual(workspaceRel(e.path)) })
            } catch {
              // a throwing callback must not end the watch
            }
          }
        } catch (e) {
          if (stopped) return
          if (e?.code === 'watch_expired') {
            cursor = await start().catch(() => cursor)
            continue
          }
          await new Promise((r) => setTimeout(r, 500))
        }
      }
    })()
    return {
      stop: async () => {
        stopped = true
        ac.abort()
        await loop
      },
    }
  }

  return {
    read: async (p) => dec(await readBytes(p)),
    readBytes,
    write,
    list,
    mkdir,
    remove,
    rename,
    exists,
    lstat,
    watch,
  }
}
