/* SPDX-License-Identifier: MIT */
/*
 * tail.h — the tail layer (tail.c, tail-budget.c): the cursor, reads and
 * pushes, flow control; the budget of all tails' unsent output.
 * Layers: daemons/routerd/LAYERS.
 */
#pragma once

#include "transport.h"

/* tail.c */

/* A tail on c (upgraded already: it writes through sink, each event in
 * envelope) for run_id (copied) from cursor last_seq; record_json is the
 * record RUN_GET returned (may be NULL). Attaches to the watch. */
int tail_new(HttpConn *c, const TailSink *sink, TailEnvelope envelope, const char *run_id,
	     const char *thread_id, int64_t last_seq, const char *record_json, Tail **ret);
Tail *tail_free(Tail *t);
/* Continue: read, deliver, or finish, as the state allows. */
void tail_pump(Tail *t);
/* Close with code/reason and send nothing more. */
void tail_fail(Tail *t, uint16_t code, const char *reason);

/* tail-budget.c */

/* The total unsent output of all tails and Durable Streams SSE reads is
 * bounded by tails_max_queued_bytes (besides each one's ws_max_queue).
 * tail_budget_add/_remove keep the list of such connections (c->tail or
 * c->ds set); tail_budget_note() refreshes c's share after it wrote or its
 * output drained and, when the total is over the budget, closes the one
 * backed up longest (then the biggest) with 1013 and drops its connection at
 * once, until the total fits (c itself may be closed: check before writing
 * more). tail_budget_stalled() says whether c's output is backed up now.
 * tail_budget_release() forgets c's share (it sends nothing more). */
void tail_budget_add(HttpConn *c);
void tail_budget_remove(HttpConn *c);
void tail_budget_note(HttpConn *c);
void tail_budget_stalled(HttpConn *c, bool stalled);
void tail_budget_release(HttpConn *c);
