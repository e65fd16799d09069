// SPDX-License-Identifier: MIT
// The stock @tanstack/ai-client against runwarden's /chat, with no code of
// ours between them: ChatClient plus the stock connection adapters. Driven by
// tests/e2e/t_chat.py: `node chat.mjs <scenario> <base URL> <threadId> [arg]`;
// prints one JSON line (the result) and exits 0, or prints the error and
// exits 1.
import net from "node:net";
import {
  ChatClient,
  fetchHttpStream,
  fetchServerSentEvents,
  webSocket,
} from "@tanstack/ai-client";
import WebSocket from "ws";

const [scenario, base, threadId, arg] = process.argv.slice(2);
const url = `${base}/chat`;

// CHAT_HARNESS picks the run's harness the stock way: the adapter's body
// option, which the client sends as forwardedProps
const opts = process.env.CHAT_HARNESS ? { body: { metadata: { harness: process.env.CHAT_HARNESS } } } : {};

function adapter(kind, u = url) {
  if (kind === "sse") return fetchServerSentEvents(u, opts);
  if (kind === "ndjson") return fetchHttpStream(`${u}?format=ndjson`, opts);
  if (kind === "ws") return webSocket(u.replace(/^http/, "ws"), { WebSocketImpl: WebSocket, ...opts });
  throw new Error(`unknown adapter ${kind}`);
}

function strip(messages) {
  // createdAt is the client's clock; everything else must match
  return JSON.parse(JSON.stringify(messages, (k, v) => (k === "createdAt" ? undefined : v)));
}

function client(kind, extra = {}, u = url) {
  const chunks = [];
  const errors = [];
  const c = new ChatClient({
    connection: adapter(kind, u),
    threadId,
    onChunk: (ch) => chunks.push(ch),
    onError: (e) => errors.push(String(e && e.message ? e.message : e)),
    ...extra,
  });
  return { c, chunks, errors };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function until(cond, what, ms = 60000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}

// A TCP proxy to routerd that cuts the first response connection once it has
// forwarded `cutAfter` bytes of an event stream: a dropped connection mid-run.
function cuttingProxy(target, cutAfter) {
  const t = new URL(target);
  const stats = { connections: 0, cut: false, requests: [] };
  let cutConn = 0;
  const server = net.createServer((down) => {
    const n = ++stats.connections;
    const up = net.connect(Number(t.port), t.hostname);
    let seen = 0;
    down.on("data", (d) => {
      const line = d.toString("latin1").split("\r\n")[0];
      if (/^(GET|POST) /.test(line)) stats.requests.push(line);
      // the connection to cut is the one that carries the first request
      // (not the first accepted: a stray connect may come first under load)
      if (/^(GET|POST) /.test(line) && cutConn === 0) cutConn = n;
      const lei = /\r\nLast-Event-ID: *([^\r]*)/i.exec(d.toString("latin1"));
      if (lei) stats.requests.push(`Last-Event-ID ${lei[1]}`);
      // routerd checks Host: name itself, not the proxy
      up.write(Buffer.from(d.toString("latin1").replace(/\r\nHost: [^\r]*/i, `\r\nHost: ${t.host}`), "latin1"));
    });
    up.on("data", (d) => {
      down.write(d);
      seen += d.length;
      const body = d.toString("latin1");
      if (n === cutConn && !stats.cut && seen >= cutAfter && /id: |"id":"/.test(body)) {
        stats.cut = true;
        // mid-line: the stock reader sees unterminated data
        down.write("{\"partial");
        down.destroy();
        up.destroy();
      }
    });
    up.on("error", () => down.destroy());
    down.on("error", () => up.destroy());
    up.on("close", () => down.destroy());
    down.on("close", () => up.destroy());
  });
  return new Promise((resolve) =>
    server.listen(0, "127.0.0.1", () =>
      resolve({ server, stats, url: `http://127.0.0.1:${server.address().port}` }),
    ),
  );
}

async function main() {
  const out = {};
  if (scenario === "run") {
    // arg: adapter kind; the command prints two lines
    const { c, chunks, errors } = client(arg);
    await c.sendMessage(`echo one-${arg}; echo two-${arg}`);
    out.messages = strip(c.getMessages());
    out.types = chunks.map((ch) => ch.type);
    out.stdout = chunks
      .filter((ch) => ch.type === "CUSTOM" && ch.name === "process.stdout")
      .map((ch) => ch.value?.data ?? ch.value?.text ?? JSON.stringify(ch.value))
      .join("");
    out.errors = errors;
    out.status = c.getStatus?.() ?? null;
    // a second turn on the same client and thread
    await c.sendMessage(`echo three-${arg}`);
    out.messages2 = strip(c.getMessages());
    c.dispose?.();
  } else if (scenario === "cut") {
    // arg: adapter kind (sse, ndjson)
    const proxy = await cuttingProxy(base, 600);
    const { c, chunks, errors } = client(arg || "sse", {}, `${proxy.url}/chat`);
    await c.sendMessage("for i in 1 2 3 4 5 6; do echo line$i; sleep 0.2; done");
    out.types = chunks.map((ch) => ch.type);
    out.stdout = chunks
      .filter((ch) => ch.type === "CUSTOM" && ch.name === "process.stdout")
      .map((ch) => JSON.stringify(ch.value))
      .join("");
    out.messages = strip(c.getMessages());
    out.errors = errors;
    out.proxy = proxy.stats;
    proxy.server.close();
  } else if (scenario === "join") {
    // tab A starts a slow run; tab B (persistence: hydrate + joinRun) follows it
    const a = client("sse");
    const sent = a.c.sendMessage("for i in 1 2 3 4 5; do echo tick$i; sleep 0.3; done");
    await until(() => a.chunks.some((ch) => ch.type === "TOOL_CALL_START"), "tab A's run");
    const b = client(arg || "sse", { persistence: true });
    b.c.attach();
    await sent;
    await until(
      () => b.chunks.some((ch) => ch.type === "RUN_FINISHED" || ch.type === "RUN_ERROR"),
      "tab B's join to see the end",
    );
    await sleep(100);
    out.a = strip(a.c.getMessages());
    out.b = strip(b.c.getMessages());
    out.bTypes = b.chunks.map((ch) => ch.type);
    out.errors = a.errors.concat(b.errors);
  } else if (scenario === "hydrate") {
    // a finished conversation of two turns, then a "reload": a new client
    // that only hydrates
    const a = client(arg || "sse");
    await a.c.sendMessage("echo first");
    await a.c.sendMessage("echo second");
    const b = client(arg || "sse", { persistence: true });
    b.c.attach();
    await until(() => b.c.getMessages().length >= a.c.getMessages().length, "the hydrate");
    await sleep(100);
    out.a = strip(a.c.getMessages());
    out.b = strip(b.c.getMessages());
    out.errors = a.errors.concat(b.errors);
  } else if (scenario === "stop") {
    // the stock Stop on the webSocket() adapter cancels the agent
    const { c, chunks, errors } = client(arg || "ws");
    const sent = c.sendMessage("echo started; sleep 301.37");
    await until(
      () => chunks.some((ch) => ch.type === "CUSTOM" && ch.name === "process.stdout"),
      "the command's output",
    );
    c.stop();
    await sent.catch(() => {});
    out.types = chunks.map((ch) => ch.type);
    out.errors = errors;
  } else {
    throw new Error(`unknown scenario ${scenario}`);
  }
  console.log(JSON.stringify(out));
  process.exit(0);
}

main().catch((e) => {
  console.error(e && e.stack ? e.stack : String(e));
  process.exit(1);
});
