// SPDX-License-Identifier: MIT
// A TanStack AI app as a developer writes it: stock useChat, the connection
// from @runwarden/tanstack-client (docs/GUIDE.md's "Use it from TanStack AI" snippets), no other glue.
// Query: transport=sse|ndjson|ws, base=<runwarden URL or '' for same origin>,
// thread=<threadId>, token=<token>.
import React, { useState } from 'react'
import { createRoot } from 'react-dom/client'
import { useChat } from '@tanstack/ai-react'
import { runwardenSSE, runwardenHttpStream, runwardenWebSocket } from '@runwarden/tanstack-client'

const q = new URLSearchParams(location.search)
const transport = q.get('transport') || 'sse'
const base = q.get('base') || location.origin
const threadId = q.get('thread')
const token = q.get('token') || undefined
const body = { metadata: { harness: 'shell' } }
window.__events = []

function connection() {
  if (transport === 'ndjson') return runwardenHttpStream(`${base}/chat?format=ndjson`, { token, body })
  if (transport === 'ws') return runwardenWebSocket(`${base.replace(/^http/, 'ws')}/chat`, { token, body })
  return runwardenSSE(`${base}/chat`, { token, body })
}
const conn = connection()

function resultText(part) {
  try {
    const v = JSON.parse(part.content)
    return `${v.stdout ?? ''}${v.stderr ?? ''}`
  } catch {
    return String(part.content)
  }
}

function Part({ part }) {
  if (part.type === 'text') return <div className="text">{part.content}</div>
  if (part.type === 'tool-call') return <div className="tool-call" data-state={part.state}>{part.name}: {part.arguments}</div>
  if (part.type === 'tool-result') return <div className="tool-result" data-state={part.state}>{resultText(part)}</div>
  return null
}

function App() {
  const [input, setInput] = useState('')
  const chat = useChat({
    connection: conn,
    threadId,
    persistence: true,
    onFinish: () => window.__events.push('finish'),
    onError: (e) => window.__events.push(`error: ${e.message}`),
    onCustomEvent: (name, value, ctx) => window.__events.push(`custom ${name} ${ctx?.toolCallId ?? 'none'}`),
  })
  return (
    <div>
      <div id="status">{chat.status}</div>
      <div id="error">{chat.error ? chat.error.message : ''}</div>
      <div id="messages">
        {chat.messages.map((m) => (
          <div className="msg" data-role={m.role} key={m.id}>
            {m.parts.map((p, i) => <Part part={p} key={i} />)}
          </div>
        ))}
      </div>
      <input id="input" value={input} onChange={(e) => setInput(e.target.value)} />
      <button id="send" onClick={() => { chat.sendMessage(input); setInput('') }}>Send</button>
      <button id="stop" onClick={() => chat.stop()}>Stop</button>
    </div>
  )
}

createRoot(document.getElementById('root')).render(<App />)
