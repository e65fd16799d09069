/* SPDX-License-Identifier: MIT */
/*
 * tail-budget.c — the unsent output of all tails together stays under
 * tails_max_queued_bytes (issue 30 item 7).
 *
 * Each tail holds at most about ws_max_queue/2 unsent bytes (tail.c), but a
 * client may open many tails and read none: without a total, routerd's
 * memory would be bounded only by max_connections × ws_max_queue. The total
 * is kept as a sum of each tail's unsent output as last seen (refreshed when
 * the tail writes and when its output drains): it can only overstate what is
 * queued, so it is exact again (every tail looked at) before anything is
 * closed for it. Over the budget, the tail whose output has been backed up
 * longest goes first (a client that stopped reading), then the one with the
 * most queued; it is closed with 1013 "try again later" and its connection
 * dropped at once (a close frame behind half a megabyte the client does not
 * read would hold that memory until the close deadline). The client
 * resumes with lastSeq like after any dropped tail.
 */
#include "config.h"

#include "routerd.h"

#include <inttypes.h>

#include "log.h"

#define BUDGET_REASON "tail output budget full: resume from lastSeq"

void
tail_budget_add(Tail *t)
{
	Router *r = t->router;

	t->budget_prev = r->tails_last;
	t->budget_next = NULL;
	if (r->tails_last)
		r->tails_last->budget_next = t;
	else
		r->tails_first = t;
	r->tails_last = t;
	t->budget_linked = true;
}

void
tail_budget_release(Tail *t)
{
	t->router->tails_queued -= MIN(t->queued, t->router->tails_queued);
	t->queued = 0;
}

void
tail_budget_remove(Tail *t)
{
	Router *r = t->router;

	if (!t->budget_linked)
		return;
	tail_budget_release(t);
	if (t->budget_prev)
		t->budget_prev->budget_next = t->budget_next;
	else
		r->tails_first = t->budget_next;
	if (t->budget_next)
		t->budget_next->budget_prev = t->budget_prev;
	else
		r->tails_last = t->budget_prev;
	t->budget_linked = false;
	t->budget_prev = t->budget_next = NULL;
}

static bool
tail_live(const Tail *t)
{
	return !t->finished && t->sink->open(t->conn);
}

static void
tail_refresh(Tail *t)
{
	size_t p = tail_live(t) ? t->sink->pending(t->conn) : 0;

	t->router->tails_queued -= MIN(t->queued, t->router->tails_queued);
	t->router->tails_queued += p;
	t->queued = p;
}

/* Whether a goes before b: backed up since earlier, then more queued. */
static bool
tail_worse(const Tail *a, const Tail *b)
{
	if (a->stalled_at && b->stalled_at && a->stalled_at != b->stalled_at)
		return a->stalled_at < b->stalled_at;
	if (!a->stalled_at != !b->stalled_at)
		return a->stalled_at != 0;
	return a->queued > b->queued;
}

static Tail *
tail_budget_victim(Router *r)
{
	Tail *best = NULL;

	for (Tail *t = r->tails_first; t; t = t->budget_next)
		if (tail_live(t) && t->queued > 0 && (!best || tail_worse(t, best)))
			best = t;
	return best;
}

static void
tail_budget_enforce(Router *r)
{
	size_t budget = (size_t)r->conf->tails_max_queued_bytes;

	for (Tail *t = r->tails_first; t; t = t->budget_next)
		tail_refresh(t);
	while (r->tails_queued > budget) {
		Tail *v = tail_budget_victim(r);
		HttpConn *c;

		if (!v)
			break;
		c = v->conn;
		log_debug("%s: tail of run %s closed with %zu bytes unsent: all tails hold %zu, "
			  "over tails_max_queued_bytes",
			  c->addr, v->run_id, v->queued, r->tails_queued);
		r->tails_budget_closed++;
		tail_fail(v, 1013, BUDGET_REASON); /* releases its share */
		http_conn_abort(c);		   /* frees its output now */
	}
}

void
tail_budget_note(Tail *t)
{
	tail_refresh(t);
	if (t->router->tails_queued > (size_t)t->router->conf->tails_max_queued_bytes)
		tail_budget_enforce(t->router);
}
