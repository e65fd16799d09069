// ds-read.mjs — read a runwarden run as a Durable Streams JSON-mode stream
// with the real @durable-streams/client and @durable-streams/tanstack-ai-transport.
//
//   node ds-read.mjs <url> <mode>
//
// mode: catchup | long-poll | sse (the client's stream(), until streamClosed),
// snapshot (the transport's materializeSnapshotFromDurableStream), subscribe
// (the transport's durableStreamConnection().subscribe()). Prints one JSON
// object: {items, batches, offset, upToDate, streamClosed} or {chunks} / {messages}.
import { writeFileSync } from "node:fs";
import { stream } from "@durable-streams/client";
import {
  durableStreamConnection,
  materializeSnapshotFromDurableStream,
} from "@durable-streams/tanstack-ai-transport";

const [url, mode] = process.argv.slice(2);
// DS_READY=<file>: created once the first batch (or chunk) arrived
let ready = false;
const markReady = () => {
  if (!ready && process.env.DS_READY) writeFileSync(process.env.DS_READY, "");
  ready = true;
};
// DS_DEBUG=1: log each request the clients make, and its answer, on stderr
const debugFetch = async (input, init) => {
  const r = await fetch(input, init);
  if (process.env.DS_DEBUG) {
    console.error(init?.method ?? "GET", String(input), r.status, JSON.stringify([...r.headers]));
  }
  return r;
};
const out = {};
const timer = setTimeout(() => {
  process.stdout.write(JSON.stringify({ ...out, error: "timeout" }) + "\n");
  process.exit(3);
}, 90000);

try {
  if (mode === "snapshot") {
    const r = await materializeSnapshotFromDurableStream({ readUrl: url });
    out.messages = r.messages;
    out.offset = r.offset;
  } else if (mode === "subscribe") {
    const conn = durableStreamConnection({ sendUrl: url, readUrl: url, initialOffset: "-1" });
    out.chunks = [];
    for await (const c of conn.subscribe()) {
      out.chunks.push(c);
      markReady();
      if (c.type === "RUN_FINISHED" || c.type === "RUN_ERROR") break;
    }
  } else {
    const res = await stream({
      url,
      offset: "-1",
      live: mode === "catchup" ? false : mode,
      json: true,
      fetch: debugFetch,
    });
    out.items = [];
    out.batches = 0;
    await new Promise((resolve, reject) => {
      res.subscribeJson(async (batch) => {
        out.batches++;
        markReady();
        out.items.push(...batch.items);
        out.offset = batch.offset;
        out.upToDate = batch.upToDate;
        out.streamClosed = batch.streamClosed;
        if (batch.streamClosed || (mode === "catchup" && batch.upToDate)) resolve();
      });
      // (res.closed settles before the subscriber has seen the last batch)
    });
  }
} catch (e) {
  out.error = String(e && e.stack ? e.stack : e);
}
clearTimeout(timer);
process.stdout.write(JSON.stringify(out) + "\n");
process.exit(0);
