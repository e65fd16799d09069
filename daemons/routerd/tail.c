/* SPDX-License-Identifier: MIT */
/*
 * tail.c — one tail of a run log, whatever carries it: the route that
 * opens it upgrades the connection and names its TailSink (ws.c: WebSocket;
 * sse.c: SSE or NDJSON) and envelope; nothing here knows the transport.
 *
 * The tail keeps an exclusive cursor (the seq of the last event sent) and
 * moves it forward only by exactly one per event, so the client sees no gap
 * and no duplicate whatever order reads and pushes arrive in:
 *   - backlog: RUN_READ {from_seq: cursor, max} until the cursor reaches the
 *     highest lastSeq of any record seen (the watch is active before the
 *     first read, so every later commit arrives as a push);
 *   - live: a RUN_EVENTS push that starts at cursor+1 (or overlaps it) is
 *     delivered directly; one that starts further on means a read is due;
 *     while a read is in flight, pushes only raise the known head.
 * A RUN_READ asks for at most tail_read_batch events and ws_max_queue/2 bytes
 * (coordinatord also caps it by read_max_bytes, and always returns at least
 * one event), so a batch of big events never outgrows a frame or the queue.
 * Flow control: with more than ws_max_queue/4 bytes unsent, reads and direct
 * deliveries wait (the write-drained callback pumps again), and a delivery
 * stops once ws_max_queue/2 bytes are unsent (the rest of a RUN_READ batch or
 * a push is dropped and read again later: the log is the queue, so a burst
 * never holds more than half the cap plus one event per tail). A tail that
 * stays paused — output above the low mark — for ws_stall_timeout_ms is a
 * client that stopped reading: it is closed with 1008.
 * Once the best record is terminal and the cursor has reached its lastSeq,
 * the status frame and close 1000 "run complete" end the tail.
 */
#include "config.h"

#include "tail.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/bufferevent.h>
#include <event2/event.h>
#include <limits.h>
#include <sys/socket.h>

#include "json-util.h"
#include "log.h"
#include "macro.h"

/* Adopt rec when it is at least as new as what we hold: a terminal record is
 * final; otherwise a higher (or equal, later-arrived) lastSeq wins. */
static void
tail_update_record(Tail *t, const RunRecord *rec)
{
	if (!rec || (t->record && t->terminal))
		return;
	if (t->record && !rec->terminal && rec->last_seq < t->head)
		return;
	char *copy = strndup(rec->text, rec->len);
	if (!copy)
		return; /* keep the older record; head still advances below */
	free(t->record);
	t->record = copy;
	t->terminal = rec->terminal;
	t->head = MAX(t->head, rec->last_seq);
}

/* Nothing more goes out: the tail ended itself, or its transport is closing
 * (the client's close, a protocol error, an abort, shutdown). */
static bool
tail_done(const Tail *t)
{
	return t->finished || !t->sink->open(t->conn);
}

static void
tail_close(Tail *t, uint16_t code, const char *reason)
{
	t->finished = true;
	tail_budget_release(t->conn);
	t->sink->close(t->conn, code, reason);
}

static size_t
tail_pending(const Tail *t)
{
	return t->sink->pending(t->conn);
}

static size_t
tail_low_water(const Tail *t)
{
	return (size_t)t->router->conf->ws_max_queue / 4;
}

static size_t
tail_high_water(const Tail *t)
{
	return (size_t)t->router->conf->ws_max_queue / 2;
}

static void
tail_stall_cb(evutil_socket_t fd, short what, void *arg)
{
	Tail *t = arg;

	if (tail_done(t) || tail_pending(t) <= tail_low_water(t))
		return;
	log_debug("%s: tail of run %s has not drained its output in %" PRId64 " ms, dropping",
		  t->conn->addr, t->run_id, t->router->conf->ws_stall_timeout_ms);
	tail_fail(t, 1008, "client too slow");
}

/* Output backed up: the client has ws_stall_timeout_ms to drain it. */
static void
tail_stall_arm(Tail *t)
{
	struct timeval tv;

	if (t->stall_timer && !evtimer_pending(t->stall_timer, NULL)) {
		evtimer_add(t->stall_timer,
			    timeval_from_usec(&tv, (usec_t)t->router->conf->ws_stall_timeout_ms *
						       USEC_PER_MSEC));
		tail_budget_stalled(t->conn, true);
	}
}

/* Send one event in the tail's envelope; the chunk text is spliced in
 * verbatim (it is the JSON the harness adapter produced). */
static int
tail_send_event(Tail *t, int64_t seq, const char *chunk, size_t len)
{
	char prefix[48];

	if (t->envelope == TAIL_BARE)
		return t->sink->send(t->conn, seq, chunk, len);
	int n = t->envelope == TAIL_ID
		    ? snprintf(prefix, sizeof(prefix), "{\"id\":\"%" PRId64 "\",\"chunk\":", seq)
		    : snprintf(prefix, sizeof(prefix), "{\"seq\":%" PRId64 ",\"chunk\":", seq);
	_cleanup_free_ char *msg = malloc((size_t)n + len + 1);

	if (!msg)
		return -ENOMEM;
	memcpy(msg, prefix, (size_t)n);
	memcpy(msg + n, chunk, len);
	msg[(size_t)n + len] = '}';
	return t->sink->send(t->conn, seq, msg, (size_t)n + len + 1);
}

/* Deliver events[] (seqs first_seq, first_seq+1, …) past the cursor. Returns
 * the number sent, or a negative errno after failing the tail. */
static int
tail_deliver(Tail *t, int64_t first_seq, const msgpack_object_array *events)
{
	int sent = 0, r = 0;

	/* several events: one write for all of them (the tail's pending count
	 * includes what is gathered) */
	if (events && events->size > 1)
		http_conn_cork(t->conn);
	for (uint32_t i = 0; events && i < events->size; i++) {
		const msgpack_object *o = &events->ptr[i];
		int64_t seq = first_seq + (int64_t)i;

		if (seq <= t->cursor)
			continue; /* already delivered */
		if (tail_pending(t) > tail_high_water(t)) {
			/* backpressure: read the rest again once drained */
			t->need_read = true;
			t->paused = true;
			tail_stall_arm(t);
			break;
		}
		if (seq != t->cursor + 1) {
			tail_fail(t, 1011, "event log gap");
			r = -EPROTO;
			break;
		}
		if (o->type != MSGPACK_OBJECT_STR && o->type != MSGPACK_OBJECT_BIN) {
			tail_fail(t, 1011, "malformed event from coordinator");
			r = -EBADMSG;
			break;
		}
		r = tail_send_event(t, seq, o->via.str.ptr, o->via.str.size);
		if (r < 0) {
			if (!tail_done(t))
				tail_fail(t, 1011, "internal error");
			break;
		}
		t->cursor = seq;
		sent++;
	}
	/* also after a failure: a close frame may be among what was gathered */
	if (http_conn_uncork(t->conn) < 0 && r >= 0) {
		tail_fail(t, 1011, "connection lost");
		r = -ECONNRESET;
	}
	if (r >= 0)
		tail_budget_note(t->conn); /* may close t (the budget) */
	if (r >= 0 && tail_done(t))
		r = -ECONNRESET;
	return r < 0 ? r : sent;
}

static void
tail_finish(Tail *t)
{
	static const char pre[] = "{\"type\":\"status\",\"record\":";
	size_t rl;

	if (t->chat) {
		/* no status event: the terminal chunk was the last word. A
		 * conversation socket stays open for the next run. */
		if (t->keep_open)
			t->finished = true;
		else
			tail_close(t, 1000, "run complete");
		return;
	}
	rl = strlen(t->record);
	_cleanup_free_ char *msg = malloc(STRLEN(pre) + rl + 2);

	if (!msg) {
		tail_fail(t, 1011, "internal error");
		return;
	}
	memcpy(msg, pre, STRLEN(pre));
	memcpy(msg + STRLEN(pre), t->record, rl);
	memcpy(msg + STRLEN(pre) + rl, "}", 2);
	if (t->sink->send(t->conn, -1, msg, STRLEN(pre) + rl + 1) < 0) {
		tail_fail(t, 1011, "internal error");
		return;
	}
	tail_close(t, 1000, "run complete");
}

void
tail_fail(Tail *t, uint16_t code, const char *reason)
{
	if (tail_done(t))
		return;
	tail_close(t, code, reason);
}

static void
tail_read_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	Tail *t = userdata;
	const msgpack_object_array *events = NULL;
	const char *rec_text = NULL;
	int64_t first_seq = 0;
	RunRecord rec;
	MpReader mr;

	t->reading = false;
	if (tail_done(t))
		return;
	if (err < 0) {
		char reason[121];
		size_t ml = 0;
		const char *m =
		    err == -ECONNRESET || err == -ETIMEDOUT ? NULL : coord_error_message(body, &ml);
		if (m)
			snprintf(reason, sizeof(reason), "storage read failed: %.*s", (int)ml, m);
		else
			snprintf(reason, sizeof(reason), "%s",
				 err == -ECONNRESET  ? "coordinator unavailable"
				 : err == -ETIMEDOUT ? "coordinator timeout"
						     : "storage read failed");
		log_warning_errno(err, "RUN_READ of run %s failed: %m", t->run_id);
		tail_fail(t, 1011, reason);
		return;
	}
	mp_reader_init(&mr, body);
	mp_read_int(&mr, "first_seq", &first_seq);
	mp_read_array(&mr, "events", &events);
	mp_read_str(&mr, "record", &rec_text);
	if (mr.err < 0 || run_record_parse(rec_text, strlen(rec_text), &rec) < 0) {
		log_warning("Malformed RUN_READ reply for run %s (field '%s')", t->run_id,
			    mr.field ? mr.field : "record");
		mp_reader_done(&mr);
		tail_fail(t, 1011, "malformed reply from coordinator");
		return;
	}
	tail_update_record(t, &rec);
	mp_reader_done(&mr);
	t->need_read = false;
	if (events && events->size > 0 && first_seq > t->cursor + 1) {
		tail_fail(t, 1011, "event log gap");
		return;
	}
	t->paused = false;
	int n = tail_deliver(t, first_seq, events);
	if (n < 0)
		return;
	if (n == 0 && t->cursor < t->head && !t->paused) {
		/* The log claims events it does not return: never spin on it. */
		tail_fail(t, 1011, "event log inconsistent");
		return;
	}
	tail_pump(t);
}

static void
tail_start_read(Tail *t)
{
	int r;

	r = COORD_CALL(t->router, RUN_READ,
		       &((Msg_RUN_READ){
			   .run_id = t->run_id,
			   .thread_id = t->thread_id,
			   .from_seq = t->cursor,
			   .max = (uint64_t)t->router->conf->tail_read_batch,
			   /* no more than a delivery can take before it pauses (half
			    * the queue): the rest of a bigger batch would be dropped
			    * and read again */
			   .max_bytes = (int64_t)tail_high_water(t),
			   .has_max_bytes = true,
		       }),
		       tail_read_reply, t);
	if (r < 0) {
		tail_fail(t, 1011, "coordinator unavailable");
		return;
	}
	t->reading = true;
}

void
tail_pump(Tail *t)
{
	if (tail_done(t) || t->reading || !watch_active(&t->sub))
		return;
	tail_budget_note(t->conn);
	if (tail_done(t))
		return;
	if (tail_pending(t) > tail_low_water(t)) {
		if (t->need_read || t->cursor < t->head)
			tail_stall_arm(t);
		return; /* the write-drained callback pumps again */
	}
	if (t->stall_timer)
		evtimer_del(t->stall_timer);
	tail_budget_stalled(t->conn, false);
	if (t->need_read || t->cursor < t->head) {
		tail_start_read(t);
		return;
	}
	if (t->terminal && t->cursor >= t->head)
		tail_finish(t);
}

/* WatchSubOps.events: a RUN_EVENTS push for the tail's run. */
static void
tail_on_push(WatchSub *s, int64_t first_seq, const msgpack_object_array *events,
	     const RunRecord *rec)
{
	Tail *t = container_of(s, Tail, sub);

	if (tail_done(t))
		return;
	tail_update_record(t, rec);
	if (!t->reading && !t->need_read && first_seq <= t->cursor + 1 &&
	    tail_pending(t) <= tail_low_water(t) && tail_deliver(t, first_seq, events) < 0)
		return;
	tail_pump(t);
}

/* WatchSubOps.active: the watch is up, pushes follow; read what came before. */
static void
tail_watch_active(WatchSub *s)
{
	tail_pump(container_of(s, Tail, sub));
}

/* WatchSubOps.lost: no more pushes will come; the client resumes elsewhere. */
static void
tail_watch_lost(WatchSub *s, const char *reason)
{
	tail_fail(container_of(s, Tail, sub), 1011, reason);
}

static const WatchSubOps tail_watch_ops = {
    .active = tail_watch_active,
    .events = tail_on_push,
    .lost = tail_watch_lost,
};

/* HttpConn.on_drained: the output fell below the low mark. */
static void
tail_conn_drained(HttpConn *c)
{
	if (c->tail)
		tail_pump(c->tail);
}

int
tail_new(HttpConn *c, const TailSink *sink, TailEnvelope envelope, const char *run_id,
	 const char *thread_id, int64_t last_seq, const char *record_json, Tail **ret)
{
	Tail *t = calloc(1, sizeof(*t));
	RunRecord rec;
	int r;

	if (!t)
		return -ENOMEM;
	t->router = c->router;
	t->conn = c;
	t->sink = sink;
	t->envelope = envelope;
	c->on_drained = tail_conn_drained;
	t->chat = envelope != TAIL_SEQ;
	t->cursor = last_seq;
	t->head = -1;
	t->need_read = true; /* the RUN_GET record may predate the watch */
	/* Bound the kernel's share of the queue too: without this, Linux grows
	 * a loopback socket's send buffer to 4 MiB for a client that reads
	 * nothing, and routerd never sees the backlog. (The kernel doubles it.) */
	int sndbuf = (int)MIN(c->router->conf->ws_max_queue / 2, (int64_t)INT_MAX / 2);
	(void)setsockopt(bufferevent_getfd(c->bev), SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	t->stall_timer = evtimer_new(c->router->base, tail_stall_cb, t);
	if (!t->stall_timer) {
		tail_free(t);
		return -ENOMEM;
	}
	t->run_id = strdup(run_id);
	t->thread_id = thread_id ? strdup(thread_id) : NULL;
	if (!t->run_id || (thread_id && !t->thread_id)) {
		tail_free(t);
		return -ENOMEM;
	}
	if (record_json && run_record_parse(record_json, strlen(record_json), &rec) == 0)
		tail_update_record(t, &rec);
	c->router->n_tails++;
	t->counted = true;
	tail_budget_add(c);
	LogCtx lc = {.run_id = t->run_id, .thread_id = t->thread_id};
	log_ctx(LOG_INFO, &lc, "Tail opened by %s after seq %" PRId64, c->addr, last_seq);
	t->sub.ops = &tail_watch_ops;
	r = watch_attach(c->router, &t->sub, t->run_id, t->thread_id);
	if (r < 0) {
		tail_free(t);
		return r;
	}
	*ret = t;
	return 0;
}

Tail *
tail_free(Tail *t)
{
	if (!t)
		return NULL;
	if (t->counted) {
		LogCtx lc = {.run_id = t->run_id, .thread_id = t->thread_id};
		log_ctx(LOG_INFO, &lc, "Tail closed at seq %" PRId64 "%s", t->cursor,
			t->terminal && t->cursor >= t->head ? " (run complete)" : "");
	}
	coord_cancel(t->router, t);
	watch_detach(&t->sub);
	tail_budget_remove(t->conn);
	if (t->stall_timer)
		event_free(t->stall_timer);
	if (t->counted)
		t->router->n_tails--;
	free(t->run_id);
	free(t->thread_id);
	free(t->record);
	free(t);
	return NULL;
}
