/* SPDX-License-Identifier: MIT */
/*
 * idem-cluster.c — a run's Idempotency-Key across the cluster (issue 35 F;
 * docs/CLUSTER.md "Idempotency keys across owners").
 *
 * The owner's LMDB keeps a key (runlog_create_keyed()); a takeover moves
 * the thread to a node whose log does not know it, so the same key posted
 * there used to make a second run. In cluster mode a RUN_START with a key
 * its owner's log does not know is held while rw_idem is asked: a KV create
 * of sha256(threadId, key) → a new run id, which exactly one of two racing
 * posters wins. The winner's request is handled again with that run id
 * (idem_cluster_run_id() hands it to handle_run_start); a loser, or a
 * poster after a takeover, is answered the run id the key named. A create
 * the cluster did not answer is refused (cluster_unavailable): the run was
 * not started. A retry with the key may find the entry naming a run that
 * never started (the refused create was stored after all, or the old owner
 * died before the run's start reached the cluster): a key's run that this
 * node's log, rw_runs and the stream all lack is started here, with the
 * key's run id (before, it was answered and never existed: a GET said 404
 * for good — the nemesis' converge check).
 */
#include "config.h"

#include "cluster-mode.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "frame.h"
#include "log.h"
#include "macro.h"

typedef struct IdemHold {
	Coordinator *c;
	PeerDeferred *d;
	char *frame;
	size_t len;
	PeerHandler h;
	void *ud;
	char run_id[RUN_ID_LEN + 1];
	char thread[];
} IdemHold;

/* The request being handled again (one loop: set around the call only). */
static const IdemHold *redoing;

static int
idem_key(const char *thread_id, const char *key, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	EVP_MD_CTX *ctx = EVP_MD_CTX_new();
	int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) &&
		 EVP_DigestUpdate(ctx, thread_id, strlen(thread_id) + 1) &&
		 EVP_DigestUpdate(ctx, key, strlen(key)) && EVP_DigestFinal_ex(ctx, md, &n);
	EVP_MD_CTX_free(ctx);
	if (!ok || n != 32)
		return -EIO;
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	return 0;
}

static void
hold_free(IdemHold *h)
{
	peer_deferred_free(h->d);
	free(h->frame);
	free(h);
}

/* The request handled again, with h->run_id for the key's run. */
static void
redo(IdemHold *h, Peer *p)
{
	Frame f;
	int r = frame_parse(h->frame + 4, h->len - 4, &f);
	if (r == 0) {
		redoing = h;
		r = h->h(p, &f, h->ud);
		redoing = NULL;
		frame_done(&f);
	}
	/* answered by the handler (a reply to the request's id) */
	if (r < 0)
		(void)peer_deferred_error(TAKE_PTR(h->d), r, NULL, NULL);
}

/* The key names h->run_id, which exists (or may: a look-up failed). */
static void
answer_existing(IdemHold *h)
{
	log_ctx(LOG_INFO, &(LogCtx){.thread_id = h->thread},
		"Idempotency-Key known to the cluster: run %s", h->run_id);
	(void)reply_deferred_RUN_START(TAKE_PTR(h->d), &(Reply_RUN_START){.run_id = h->run_id});
	hold_free(h);
}

/* The key's run has no record in rw_runs: has it events in the stream? */
static void
on_key_run_last(Cluster *cl, int err, const ClusterRunLast *last, void *userdata)
{
	IdemHold *h = userdata;
	Peer *p = peer_deferred_peer(h->d);
	if (!p) {
		hold_free(h);
		return;
	}
	if (err != -ENOENT) {
		answer_existing(h);
		return;
	}
	LogCtx lc = {.thread_id = h->thread, .run_id = h->run_id};
	log_ctx(LOG_NOTICE, &lc, "Idempotency-Key names a run that never started: starting it now");
	redo(h, p);
	hold_free(h);
}

static void
on_key_run_record(Cluster *cl, int err, const void *data, size_t len, void *userdata)
{
	IdemHold *h = userdata;
	if (err == -ENOENT && peer_deferred_peer(h->d) &&
	    cluster_run_last(cl, h->run_id, on_key_run_last, h) == 0)
		return;
	answer_existing(h);
}

static void
on_claimed(Cluster *cl, int err, const void *data, size_t len, void *userdata)
{
	IdemHold *h = userdata;
	LogCtx lc = {.thread_id = h->thread};
	Peer *p = peer_deferred_peer(h->d);

	if (!p) {
		hold_free(h); /* its client went away */
		return;
	}
	if (err == 0) {
		redo(h, p);
	} else if (err == -EEXIST && len > 0 && len <= RUN_ID_LEN) {
		json_t *rec = NULL;
		memcpy(h->run_id, data, len);
		h->run_id[len] = '\0';
		/* in this node's log, or in rw_runs: it exists; else it may never
		 * have started */
		if (runlog_get(h->c->runlog, h->run_id, &rec) == 0 ||
		    cluster_get(cl, CLUSTER_RUNS, h->run_id, on_key_run_record, h) < 0) {
			json_decref(rec);
			answer_existing(h);
		}
		return;
	} else {
		log_ctx_errno(LOG_WARNING, err, &lc,
			      "Idempotency-Key not recorded in the cluster: %m");
		(void)peer_deferred_error(TAKE_PTR(h->d), -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
					  "the cluster did not record the Idempotency-Key; the "
					  "run was not started");
	}
	hold_free(h);
}

const char *
idem_cluster_run_id(Coordinator *c, const char *thread_id, const char *key)
{
	(void)c;
	if (redoing && streq(redoing->thread, thread_id) && key)
		return redoing->run_id;
	return NULL;
}

bool
idem_cluster_run_start(Coordinator *c, Peer *p, const Frame *f, const char *thread_id,
		       const char *key, PeerHandler handler, void *ud)
{
	char k[65];
	if (!c->cluster || !key || idem_cluster_run_id(c, thread_id, key))
		return false;
	size_t tl = strlen(thread_id) + 1;
	IdemHold *h = calloc(1, sizeof(*h) + tl);
	int r = h ? idem_key(thread_id, key, k) : -ENOMEM;
	if (r == 0)
		r = forward_encode(f, &h->frame, &h->len);
	if (r == 0 && !(h->d = peer_defer(p, f)))
		r = -ENOMEM;
	if (r == 0) {
		h->c = c;
		h->h = handler;
		h->ud = ud;
		memcpy(h->thread, thread_id, tl);
		run_uuid(h->run_id);
		r = cluster_idem_claim(c->cluster, k, h->run_id, on_claimed, h);
		if (r == 0)
			return true;
		h->d = peer_deferred_free(h->d); /* answered below */
	}
	if (h)
		hold_free(h);
	(void)peer_reply_error_reason(p, f->req_id, -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
				      "the cluster cannot record the Idempotency-Key now");
	return true;
}
