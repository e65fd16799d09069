// agui-check.mjs — is a stored runwarden stream valid for strict AG-UI
// consumers, and what does a stock TanStack client make of it?
//
//   node agui-check.mjs < chunks.jsonl      (one chunk per line)
//
// Prints one JSON object: {ok, schemaErrors, orderError, messages, chatMessages,
// chatError}. ok is true when every chunk passes @ag-ui/core's EventSchemas
// and the stream passes @ag-ui/client's verifyEvents; messages are
// @tanstack/ai's StreamProcessor's UIMessages, chatMessages those of a stock
// @tanstack/ai-client ChatClient fed the same chunks through stream().
import { readFileSync } from "node:fs";
import { EventSchemas } from "@ag-ui/core/schemas";
import { verifyEvents } from "@ag-ui/client";
import { from, lastValueFrom, toArray } from "rxjs";
import { StreamProcessor } from "@tanstack/ai";
import { ChatClient, stream } from "@tanstack/ai-client";

const text = readFileSync(0, "utf8");
const chunks = text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
const out = { ok: true, n: chunks.length, schemaErrors: [], orderError: null };

chunks.forEach((c, i) => {
  const r = EventSchemas.safeParse(c);
  if (!r.success) {
    out.ok = false;
    out.schemaErrors.push({ index: i, type: c.type, issues: r.error.issues.slice(0, 3) });
  }
});

try {
  await lastValueFrom(from(chunks).pipe(verifyEvents(false), toArray()));
} catch (e) {
  out.ok = false;
  out.orderError = String(e && e.message ? e.message : e);
}

const quiet = console.error;
console.error = () => {};
console.warn = () => {};
try {
  const p = new StreamProcessor();
  for (const c of chunks) p.processChunk(c);
  out.messages = p.getMessages();
} catch (e) {
  out.processorError = String(e && e.stack ? e.stack : e);
}

try {
  const client = new ChatClient({
    connection: stream(async function* () {
      for (const c of chunks) yield c;
    }),
    onError: (e) => {
      out.chatError = String(e && e.message ? e.message : e);
    },
  });
  await client.sendMessage("go");
  out.chatMessages = client.getMessages();
} catch (e) {
  out.chatError = out.chatError || String(e && e.message ? e.message : e);
}
console.error = quiet;
process.stdout.write(JSON.stringify(out) + "\n");
