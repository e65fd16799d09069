// SPDX-License-Identifier: MIT
// Node `ws` client: tail a run, drop the socket after `dropAfter` events,
// resume with the last seq seen, and print one JSON summary line.
// usage: node ws-tail.js <base ws url> <runId> <threadId> <dropAfter>
'use strict';
const WebSocket = require('ws');

const [base, runId, threadId, dropAfterArg] = process.argv.slice(2);
const dropAfter = Number(dropAfterArg);
const events = [];
const closes = [];
let status = null;
let pingsSeen = 0;

function tail(lastSeq, limit) {
  return new Promise((resolve, reject) => {
    const url = `${base}/runs/${runId}/stream?threadId=${encodeURIComponent(threadId)}` +
      (lastSeq === undefined ? '' : `&lastSeq=${lastSeq}`);
    const ws = new WebSocket(url);
    let got = 0;
    let dropped = false;
    ws.on('ping', () => { pingsSeen++; });  // ws answers with a pong itself
    ws.on('message', (data, isBinary) => {
      // terminate() does not stop the frames already read in the same chunk
      // from being emitted; after a real drop they would never arrive
      if (dropped) return;
      if (isBinary) return reject(new Error('binary frame from the server'));
      const msg = JSON.parse(data.toString('utf8'));
      if (msg.type === 'status') {
        if (status) return reject(new Error('two status frames'));
        status = msg.record;
        return;
      }
      if (status) return reject(new Error('event after status'));
      events.push(msg);
      got++;
      if (limit && got >= limit) {  // a drop, not a clean close
        dropped = true;
        ws.terminate();
      }
    });
    ws.on('close', (code, reason) => {
      closes.push([code, reason.toString()]);
      resolve();
    });
    ws.on('error', reject);
  });
}

(async () => {
  await tail(undefined, dropAfter);
  const last = events.length ? events[events.length - 1].seq : -1;
  await tail(last, 0);
  const stdout = events
    .filter(e => e.chunk.type === 'CUSTOM' && e.chunk.name === 'process.stdout')
    .map(e => e.chunk.value.text).join('');
  console.log(JSON.stringify({ seqs: events.map(e => e.seq), stdout, status, closes, pingsSeen }));
})().catch(e => { console.error(e.stack || String(e)); process.exit(1); });
