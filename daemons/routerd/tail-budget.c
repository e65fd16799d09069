/* SPDX-License-Identifier: MIT */
/*
 * tail-budget.c — the unsent output of all tails (and Durable Streams SSE
 * reads) together stays under tails_max_queued_bytes (issue 30 item 7).
 *
 * Each tail holds at most about ws_max_queue/2 unsent bytes (tail.c), a DS
 * SSE read half of it plus one read (routes-ds.c), but a client may open many
 * and read none: without a total, routerd's memory would be bounded only by
 * max_connections × ws_max_queue. The total is kept as a sum of each
 * connection's unsent output as last seen (refreshed when it writes and when
 * its output drains): it can only overstate what is queued, so it is made
 * exact (every connection looked at) before anything is closed for it. Over
 * the budget, the connection whose output has been backed up longest goes
 * first (a client that stopped reading), then the one with the most queued:
 * a tail is closed with 1013 "try again later" (a DS read ends) and the
 * connection dropped at once (a close frame behind half a megabyte the
 * client does not read would hold that memory until the close deadline).
 * The client resumes with lastSeq (or its offset) like after any drop.
 * A sandbox exec's stream (routes-exec.c, HttpConn.budget_stream) counts
 * too; dropped, it takes its exec along (nothing resumes it).
 */
#include "config.h"

#include "tail.h"

#include <inttypes.h>

#include "log.h"

#define BUDGET_REASON "tail output budget full: resume from lastSeq"

void
tail_budget_add(HttpConn *c)
{
	Router *r = c->router;

	if (c->budget_linked)
		return;
	c->budget_prev = r->budget_last;
	c->budget_next = NULL;
	if (r->budget_last)
		r->budget_last->budget_next = c;
	else
		r->budget_first = c;
	r->budget_last = c;
	c->budget_linked = true;
	c->budget_stalled_at = 0;
}

void
tail_budget_release(HttpConn *c)
{
	c->router->tails_queued -= MIN(c->budget_queued, c->router->tails_queued);
	c->budget_queued = 0;
}

void
tail_budget_remove(HttpConn *c)
{
	Router *r = c->router;

	if (!c->budget_linked)
		return;
	tail_budget_release(c);
	if (c->budget_prev)
		c->budget_prev->budget_next = c->budget_next;
	else
		r->budget_first = c->budget_next;
	if (c->budget_next)
		c->budget_next->budget_prev = c->budget_prev;
	else
		r->budget_last = c->budget_prev;
	c->budget_linked = false;
	c->budget_prev = c->budget_next = NULL;
}

void
tail_budget_stalled(HttpConn *c, bool stalled)
{
	if (!stalled)
		c->budget_stalled_at = 0;
	else if (!c->budget_stalled_at)
		c->budget_stalled_at = now_usec();
}

/* Still sending: a tail that did not end, or a DS SSE read. */
static bool
budget_live(const HttpConn *c)
{
	if (c->tail)
		return !c->tail->finished && c->tail->sink->open(c);
	if (c->budget_stream) /* a sandbox exec's stream (routes-exec.c) */
		return c->state == CONN_SSE || c->state == CONN_WS;
	return c->ds && c->state == CONN_SSE;
}

static void
budget_refresh(HttpConn *c)
{
	size_t p = !budget_live(c) ? 0
		   : c->tail	   ? c->tail->sink->pending(c)
				   : http_conn_output_pending(c);

	c->router->tails_queued -= MIN(c->budget_queued, c->router->tails_queued);
	c->router->tails_queued += p;
	c->budget_queued = p;
}

/* Whether a goes before b: backed up since earlier, then more queued. */
static bool
budget_worse(const HttpConn *a, const HttpConn *b)
{
	if (a->budget_stalled_at && b->budget_stalled_at &&
	    a->budget_stalled_at != b->budget_stalled_at)
		return a->budget_stalled_at < b->budget_stalled_at;
	if (!a->budget_stalled_at != !b->budget_stalled_at)
		return a->budget_stalled_at != 0;
	return a->budget_queued > b->budget_queued;
}

static HttpConn *
budget_victim(Router *r)
{
	HttpConn *best = NULL;

	for (HttpConn *c = r->budget_first; c; c = c->budget_next)
		if (budget_live(c) && c->budget_queued > 0 && (!best || budget_worse(c, best)))
			best = c;
	return best;
}

static void
budget_enforce(Router *r)
{
	size_t budget = (size_t)r->conf->tails_max_queued_bytes;

	for (HttpConn *c = r->budget_first; c; c = c->budget_next)
		budget_refresh(c);
	while (r->tails_queued > budget) {
		HttpConn *v = budget_victim(r);

		if (!v)
			break;
		log_debug("%s: %s closed with %zu bytes unsent: all tails hold %zu, over "
			  "tails_max_queued_bytes",
			  v->addr, v->tail ? "tail" : "stream read", v->budget_queued,
			  r->tails_queued);
		r->tails_budget_closed++;
		if (v->tail)
			tail_fail(v->tail, 1013, BUDGET_REASON); /* releases its share */
		else if (!v->budget_stream) /* an exec's is only dropped: it dies with it */
			sse_close(v, 1013, BUDGET_REASON);
		tail_budget_release(v);
		http_conn_abort(v); /* frees its output now */
	}
}

void
tail_budget_note(HttpConn *c)
{
	budget_refresh(c);
	if (c->router->tails_queued > (size_t)c->router->conf->tails_max_queued_bytes)
		budget_enforce(c->router);
}
