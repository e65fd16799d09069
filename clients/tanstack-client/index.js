// SPDX-License-Identifier: MIT
// @runwarden/tanstack-client — the stock @tanstack/ai-client connection
// adapters, wrapped for runwarden's /chat. Each wrapper returns the stock
// adapter with three additions:
//
//  * Stop stops the run. The stock fetchServerSentEvents()/fetchHttpStream()
//    Stop only aborts the fetch, and a rejoined run (after a reload, or in a
//    second tab: joinRun) is only closed on every transport. An abort of a
//    stream that has not seen its run's end sends
//    POST /runs/{runId}/cancel?threadId= (the client's run id for a run this
//    tab started, runwarden's for a rejoined one; both are accepted).
//  * Live output in the messages. The shell harness streams a command's
//    output as CUSTOM process.stdout / process.stderr {text, toolCallId}
//    (valid AG-UI; stock useChat shows those only to onCustomEvent). The
//    wrappers also hand the client an interim TOOL_CALL_RESULT for that tool
//    call ({"status":"running","stdout","stderr"}, the last 16 KiB of each),
//    which the client's message builder puts in the tool call's tool-result
//    part; the run's own TOOL_CALL_RESULT then replaces it. The CUSTOM
//    events still reach onCustomEvent.
//  * runwardenWebSocket() has hydrate (the HTTP GET /chat?threadId= of
//    fetchServerSentEvents), so persistence: true restores the thread and
//    joins a run still going, and it takes `token` (sent as the WebSocket
//    subprotocol bearer.<base64url>, and as Authorization on the HTTP calls).
//    A RUN_ERROR "aborted" that follows this tab's own Stop is not passed on
//    (the client had already finished the turn: onError fired after onFinish).
import {
  fetchHttpStream,
  fetchServerSentEvents,
  webSocket,
} from '@tanstack/ai-client'

/** Bytes of each stream kept in the interim result (as the shell harness's final result). */
const KEEP = 16 * 1024
/** An aborted join followed this soon by a join of the same run is a re-attach. */
const JOIN_GRACE_MS = 150

function b64url(text) {
  const bytes = new TextEncoder().encode(text)
  let bin = ''
  for (const b of bytes) bin += String.fromCharCode(b)
  return btoa(bin).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '')
}

/** The http(s) base of a /chat URL: ws→http, the path up to /chat, no query. */
function httpBase(url) {
  const u = new URL(url, globalThis.location?.href)
  if (u.protocol === 'ws:') u.protocol = 'http:'
  if (u.protocol === 'wss:') u.protocol = 'https:'
  const path = u.pathname.replace(/\/chat\/?$/, '')
  return `${u.origin}${path}`
}

function httpChatUrl(url) {
  const u = new URL(url, globalThis.location?.href)
  if (u.protocol === 'ws:') u.protocol = 'http:'
  if (u.protocol === 'wss:') u.protocol = 'https:'
  u.search = ''
  return u.toString()
}

function authHeaders(options) {
  const h = { ...(options.headers ?? {}) }
  if (options.token) h.Authorization = `Bearer ${options.token}`
  return h
}

/**
 * Cancel a run: POST /runs/{runId}/cancel?threadId=. Never throws (a run that
 * already ended answers 409; the Stop has happened either way).
 */
export async function cancelRun(url, runId, threadId, options = {}) {
  if (!runId || !threadId) return undefined
  const target = `${httpBase(url)}/runs/${encodeURIComponent(runId)}/cancel?threadId=${encodeURIComponent(threadId)}`
  try {
    const res = await (options.fetchClient ?? fetch)(target, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...authHeaders(options) },
      body: '{}',
      credentials: options.credentials ?? 'same-origin',
      keepalive: true,
    })
    return res.status
  } catch {
    return undefined
  }
}

/**
 * Per-stream state turning CUSTOM process.stdout/stderr into interim
 * TOOL_CALL_RESULT chunks for the same tool call.
 */
function liveOutput() {
  const calls = new Map()
  let openCall
  const keep = (s) => (s.length > KEEP ? s.slice(s.length - KEEP) : s)
  return function* transform(chunk) {
    if (chunk.type === 'TOOL_CALL_START') openCall = chunk.toolCallId
    if (chunk.type === 'TOOL_CALL_RESULT') {
      calls.delete(chunk.toolCallId)
      if (openCall === chunk.toolCallId) openCall = undefined
    }
    yield chunk
    if (
      chunk.type === 'CUSTOM' &&
      (chunk.name === 'process.stdout' || chunk.name === 'process.stderr') &&
      chunk.value &&
      typeof chunk.value.text === 'string'
    ) {
      const id = chunk.value.toolCallId ?? openCall
      if (!id) return
      const out = calls.get(id) ?? { stdout: '', stderr: '' }
      const key = chunk.name === 'process.stdout' ? 'stdout' : 'stderr'
      out[key] = keep(out[key] + chunk.value.text)
      calls.set(id, out)
      yield {
        type: 'TOOL_CALL_RESULT',
        messageId: `${id}-live`,
        toolCallId: id,
        role: 'tool',
        content: JSON.stringify({ status: 'running', stdout: out.stdout, stderr: out.stderr }),
        timestamp: chunk.timestamp ?? Date.now(),
      }
    }
  }
}

function isTerminal(chunk) {
  return chunk.type === 'RUN_FINISHED' || chunk.type === 'RUN_ERROR'
}

/**
 * Wrap an async iterable of chunks: live output, and a cancel when `signal`
 * aborts before the run's end was seen.
 */
async function* tracked(source, signal, state, cancel, options, joins) {
  const transform = options.liveOutput === false ? null : liveOutput()
  let ended = false
  const me = {}
  if (joins) joins.set(state.runId, me)
  const onAbort = () => {
    if (ended || options.cancelOnStop === false) return
    if (!joins) {
      void cancel(state.runId, state.threadId)
      return
    }
    // useChat detaches (aborts the join) when its view unmounts, and React's
    // StrictMode unmounts and remounts at once: a join of the same run opened
    // right after is a re-attach, not a Stop.
    setTimeout(() => {
      if (joins.get(state.runId) === me) void cancel(state.runId, state.threadId)
    }, JOIN_GRACE_MS)
  }
  signal?.addEventListener('abort', onAbort, { once: true })
  try {
    for await (const chunk of source) {
      if (chunk.type === 'RUN_STARTED' && !state.runId) state.runId = chunk.runId
      if (isTerminal(chunk)) ended = true
      if (transform) yield* transform(chunk)
      else yield chunk
    }
    ended = true
  } finally {
    signal?.removeEventListener('abort', onAbort)
  }
}

function wrapHttp(make, url, options) {
  const headers = authHeaders(options)
  const stockOptions = { ...options, headers }
  delete stockOptions.token
  delete stockOptions.liveOutput
  delete stockOptions.cancelOnStop
  const stock = make(url, stockOptions)
  const chatUrl = typeof url === 'function' ? url : () => url
  let hydratedThread
  const joins = new Map()
  const cancel = (runId, threadId) =>
    cancelRun(chatUrl(), runId, threadId ?? hydratedThread, options)
  return {
    ...stock,
    connect(messages, data, abortSignal, runContext) {
      const state = { runId: runContext?.runId, threadId: runContext?.threadId }
      return tracked(stock.connect(messages, data, abortSignal, runContext), abortSignal, state, cancel, options)
    },
    joinRun(runId, abortSignal) {
      const state = { runId, threadId: hydratedThread }
      return tracked(stock.joinRun(runId, abortSignal), abortSignal, state, cancel, options, joins)
    },
    async hydrate(threadId, hydrateOptions) {
      hydratedThread = threadId
      return stock.hydrate(threadId, hydrateOptions)
    },
  }
}

/** fetchServerSentEvents() for runwarden's /chat (see the module comment). */
export function runwardenSSE(url, options = {}) {
  return wrapHttp(fetchServerSentEvents, url, options)
}

/** fetchHttpStream() for runwarden's /chat?format=ndjson (see the module comment). */
export function runwardenHttpStream(url, options = {}) {
  return wrapHttp(fetchHttpStream, url, options)
}

/** webSocket() for runwarden's /chat (see the module comment). */
export function runwardenWebSocket(url, options = {}) {
  const stockOptions = { ...options }
  delete stockOptions.token
  delete stockOptions.liveOutput
  delete stockOptions.cancelOnStop
  delete stockOptions.headers
  delete stockOptions.credentials
  if (options.token) {
    stockOptions.protocols = [...(options.protocols ?? []), `bearer.${b64url(options.token)}`]
  }
  const stock = webSocket(url, stockOptions)
  const chatUrl = typeof url === 'function' ? url : () => url
  const http = fetchServerSentEvents(() => httpChatUrl(chatUrl()), {
    headers: authHeaders(options),
    credentials: options.credentials,
  })
  let hydratedThread
  const joins = new Map()
  // client run ids this tab stopped: their RUN_ERROR "aborted" is not passed on
  const stopped = new Set()
  const cancel = (runId, threadId) =>
    cancelRun(chatUrl(), runId, threadId ?? hydratedThread, options)
  return {
    ...stock,
    subscribe(abortSignal) {
      const source = stock.subscribe(abortSignal)
      const transform = options.liveOutput === false ? null : liveOutput()
      return (async function* () {
        for await (const chunk of source) {
          if (chunk.type === 'RUN_ERROR' && stopped.size > 0 && (chunk.code === 'aborted' || chunk.rawEvent?.code === 'aborted')) {
            stopped.clear()
            continue
          }
          if (transform) yield* transform(chunk)
          else yield chunk
        }
      })()
    },
    async send(messages, data, abortSignal, runContext) {
      // the stock send() sends {"type":"abort"} on the conversation socket
      abortSignal?.addEventListener('abort', () => {
        if (runContext?.runId) stopped.add(runContext.runId)
      }, { once: true })
      return stock.send(messages, data, abortSignal, runContext)
    },
    joinRun(runId, abortSignal) {
      // a joinRun socket is read-only: its close does not stop the run
      const state = { runId, threadId: hydratedThread }
      return tracked(stock.joinRun(runId, abortSignal), abortSignal, state, cancel, options, joins)
    },
    async hydrate(threadId, hydrateOptions) {
      hydratedThread = threadId
      return http.hydrate(threadId, hydrateOptions)
    },
  }
}
