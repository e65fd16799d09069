/* SPDX-License-Identifier: MIT */
/*
 * sandbox-exec-keep.c — what coordinatord keeps of a sandbox exec's output
 * for someone who asks later (sandbox-exec-int.h): the output and end of an
 * exec another node forwarded here (cluster mode, SBX_RELAY_POLL; the
 * asking side is sbx-relay.c), and the last output of a background exec
 * (SBX_EXEC_READ). sandbox-exec.c hands the shim's output over.
 */
#include "config.h"

#include "driver.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "driver-int.h"
#include "log.h"
#include "macro.h"
#include "sandbox-exec-int.h"
#include "time-util.h"

/* ---------- cluster mode: execs another node's client started ----------
 *
 * On the thread's owner an exec forwarded from another node (its client is
 * the forwarding loopback, forward.c) keeps its output and its end here
 * until that node asks with SBX_RELAY_POLL (sbx-relay.c): offsets say what it
 * has, the answer carries what follows (at most RELAY_CHUNK per stream) and,
 * once everything was taken, the end. A poll with nothing to take waits up
 * to RELAY_HOLD_MS. A node that stops asking for RELAY_LEASE_MS lost its
 * client: the exec is killed (a background one runs on), as when a routerd
 * connection goes. More than RELAY_MAX_BUFFER not taken: killed too (the
 * asking node does not keep up). */
#define RELAY_CHUNK (256u << 10)
#define RELAY_MAX_BUFFER (8u << 20)
#define RELAY_HOLD_MS 1000
#define RELAY_LEASE_MS 15000

void
sbx_relay_release(SbxExec *x)
{
	for (int i = 0; i < 2; i++) {
		free(x->buf[i]);
		x->buf[i] = NULL;
		x->len[i] = 0;
	}
	x->poll = peer_deferred_free(x->poll);
	if (x->poll_timer) {
		event_free(x->poll_timer);
		x->poll_timer = NULL;
	}
	if (x->lease_timer) {
		event_free(x->lease_timer);
		x->lease_timer = NULL;
	}
}

/* Nobody asks any more: as a client gone (sbx_exec_client_gone). */
static void
relay_abandon(SbxExec *x)
{
	bool ended = x->relay_ended;

	sbx_relay_release(x);
	x->relayed = false;
	x->relay_ended = false;
	x->client = NULL;
	if (ended) {
		if (!x->background)
			sbx_drop(x);
		return;
	}
	if (!x->background && x->state == SBX_RUNNING)
		(void)sbx_kill_exec(x->c, x->exec_id, SIGKILL);
}

static void
relay_lease_cb(evutil_socket_t fd, short what, void *arg)
{
	SbxExec *x = arg;

	log_ctx(LOG_NOTICE, &(LogCtx){.thread_id = x->thread_id},
		"Cluster: the node that started exec %" PRIu64 " stopped asking for its output",
		x->exec_id);
	relay_abandon(x);
}

/* Answer the held poll with what there is (and the end once all was taken). */
void
sbx_relay_answer(SbxExec *x)
{
	Reply_SBX_RELAY_POLL r = {.out_off = x->base[0], .err_off = x->base[1]};
	bool ended;

	if (!x->poll)
		return;
	r.out = x->buf[0];
	r.out_len = MIN(x->len[0], (size_t)RELAY_CHUNK);
	r.has_out = r.out_len > 0;
	r.err = x->buf[1];
	r.err_len = MIN(x->len[1], (size_t)RELAY_CHUNK);
	r.has_err = r.err_len > 0;
	ended = x->relay_ended && r.out_len == x->len[0] && r.err_len == x->len[1];
	if (!r.has_out && !r.has_err && !ended && x->poll_timer &&
	    evtimer_pending(x->poll_timer, NULL))
		return; /* nothing yet: held */
	if (ended) {
		r.ended = r.has_ended = true;
		r.exit_code = x->exit_code;
		r.has_exit_code = true;
		r.signal = x->signal;
		r.has_signal = x->signal > 0;
		r.reason = x->reason;
	}
	if (x->poll_timer)
		evtimer_del(x->poll_timer);
	(void)reply_deferred_SBX_RELAY_POLL(TAKE_PTR(x->poll), &r);
	if (ended) {
		/* handed over: a lost answer is the asking node's "lost" */
		x->relay_ended = false;
		x->relayed = false;
		x->client = NULL;
		sbx_relay_release(x);
		if (!x->background) {
			sbx_drop(x);
			return;
		}
		sbx_trim(x->c, x->thread_id, SBX_EXEC_MAX_ENDED);
		sbx_trim(x->c, NULL, SBX_EXEC_MAX_ENDED_ALL);
	}
}

static void
relay_poll_cb(evutil_socket_t fd, short what, void *arg)
{
	sbx_relay_answer(arg); /* the timer is not pending now: answers even empty */
}

void
sbx_relay_buffer(SbxExec *x, int stream, const void *data, size_t len)
{
	int i = stream == 2 ? 1 : 0;
	char *nb;

	if (x->len[0] + x->len[1] + len > RELAY_MAX_BUFFER) {
		if (x->state == SBX_RUNNING && !x->kill_signal) {
			log_ctx(LOG_WARNING, &(LogCtx){.thread_id = x->thread_id},
				"Cluster: exec %" PRIu64 " has more output waiting for the node "
				"that asked than %u bytes; killing it",
				x->exec_id, RELAY_MAX_BUFFER);
			x->kill_signal = SIGKILL;
			(void)sbx_kill_exec(x->c, x->exec_id, SIGKILL);
		}
		return;
	}
	nb = realloc(x->buf[i], x->len[i] + len);
	if (!nb)
		return;
	memcpy(nb + x->len[i], data, len);
	x->buf[i] = nb;
	x->len[i] += len;
	sbx_relay_answer(x);
}

/* Drop what the asking node has (below off). */
static void
relay_ack(SbxExec *x, int i, uint64_t off)
{
	size_t n;

	if (off <= x->base[i])
		return;
	n = (size_t)MIN(off - x->base[i], (uint64_t)x->len[i]);
	memmove(x->buf[i], x->buf[i] + n, x->len[i] - n);
	x->len[i] -= n;
	x->base[i] += n;
}

int
handle_sbx_relay_poll(Peer *p, const Frame *f, const Msg_SBX_RELAY_POLL *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	SbxExec *x = NULL;
	struct timeval tv;

	for (SbxExec *y = c->sbx_execs; y; y = y->next)
		if (y->relayed && y->client == cl && y->stream_id == m->stream_id &&
		    streq(y->thread_id, m->thread_id))
			x = y;
	if (!cl->forwarded || !x) {
		peer_reply_error_reason(p, f->req_id, -ENOENT, REASON_PROCESS_NOT_FOUND,
					"no exec of another node's on this stream");
		return 0;
	}
	relay_ack(x, 0, m->out_off);
	relay_ack(x, 1, m->err_off);
	if (x->poll) /* a poll the asking node gave up on: this one replaces it */
		(void)reply_deferred_SBX_RELAY_POLL(
		    TAKE_PTR(x->poll),
		    &(Reply_SBX_RELAY_POLL){.out_off = x->base[0], .err_off = x->base[1]});
	if (!x->poll_timer)
		x->poll_timer = evtimer_new(c->base, relay_poll_cb, x);
	if (!x->lease_timer)
		x->lease_timer = evtimer_new(c->base, relay_lease_cb, x);
	if (!x->poll_timer || !x->lease_timer || !(x->poll = peer_defer(p, f)))
		return -ENOMEM;
	evtimer_add(x->lease_timer, timeval_from_usec(&tv, (usec_t)RELAY_LEASE_MS * USEC_PER_MSEC));
	evtimer_add(x->poll_timer, timeval_from_usec(&tv, (usec_t)RELAY_HOLD_MS * USEC_PER_MSEC));
	sbx_relay_answer(x);
	return 0;
}

/* What a background exec printed last (BG_KEEP bytes a stream). */
#define BG_KEEP (16u << 10)

void
sbx_bg_keep(SbxExec *x, int stream, const char *data, size_t len)
{
	int i = stream == 2 ? 1 : 0;

	x->bg_end[i] += len;
	if (len >= BG_KEEP) {
		data += len - BG_KEEP;
		len = BG_KEEP;
	}
	if (!x->bg[i] && !(x->bg[i] = malloc(BG_KEEP)))
		return;
	if (x->bg_len[i] + len > BG_KEEP) {
		size_t drop = x->bg_len[i] + len - BG_KEEP;
		memmove(x->bg[i], x->bg[i] + drop, x->bg_len[i] - drop);
		x->bg_len[i] -= drop;
	}
	memcpy(x->bg[i] + x->bg_len[i], data, len);
	x->bg_len[i] += len;
}

int
handle_sbx_exec_read(Peer *p, const Frame *f, const Msg_SBX_EXEC_READ *m, void *ud)
{
	Client *cl = ud;
	SbxExec *x = sbx_lookup(cl->c, cl, m->thread_id, m->pid, true, 0, false);
	Reply_SBX_EXEC_READ r = {0};
	uint64_t want[2] = {m->has_out_off ? m->out_off : 0, m->has_err_off ? m->err_off : 0};
	const char *data[2];
	size_t len[2];
	uint64_t off[2];

	if (!x || !x->background) {
		peer_reply_error_reason(p, f->req_id, -ENOENT, REASON_PROCESS_NOT_FOUND,
					x ? "only a background exec's output is kept"
					  : "no such process");
		return 0;
	}
	for (int i = 0; i < 2; i++) {
		uint64_t first = x->bg_end[i] - x->bg_len[i]; /* the oldest byte kept */
		uint64_t from = want[i] > x->bg_end[i] ? x->bg_end[i] : MAX(want[i], first);
		off[i] = from;
		data[i] = x->bg[i] ? x->bg[i] + (from - first) : NULL;
		len[i] = (size_t)(x->bg_end[i] - from);
	}
	r.out_off = off[0];
	r.out = data[0];
	r.out_len = len[0];
	r.has_out = len[0] > 0;
	r.err_off = off[1];
	r.err = data[1];
	r.err_len = len[1];
	r.has_err = len[1] > 0;
	r.out_end = x->bg_end[0];
	r.err_end = x->bg_end[1];
	r.running = x->state != SBX_ENDED;
	if (x->state == SBX_ENDED) {
		r.exit_code = x->exit_code;
		r.has_exit_code = true;
		r.reason = x->reason;
	}
	return reply_send_SBX_EXEC_READ(p, f->req_id, &r);
}
