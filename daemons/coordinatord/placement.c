/* SPDX-License-Identifier: MIT */
/*
 * placement.c — thread ownership in cluster mode (docs/CLUSTER.md
 * "Placement and takeover").
 *
 * A thread's first run on this node claims the thread in rw_threads (a KV
 * create: of any number of nodes claiming at once, exactly one owns it).
 * RUN_START (and a thread's file and snapshot calls: its workspace is where
 * its files are) waits for the claim: the request is held (its frame copied)
 * and handled again once this node owns the thread. A request for a thread
 * another node owns is forwarded to it (forward.c), unless it was itself
 * forwarded here (then ERROR reason not_owner: the sender's view was stale;
 * never forwarded twice); a cluster not ready refuses with
 * cluster_unavailable. The threads this node owns are remembered while this
 * node's lease on its rw_nodes key holds (cluster_lease(): the same
 * generation, heartbeats acknowledged): after a pause or a partition that
 * may have let the key expire, other nodes may have taken the threads over,
 * so the cache is dropped and the next run of each thread asks again (the
 * claim finds this node's entry, or the new owner's). A restart asks again.
 * A takeover this node won adds the thread (placement_own()).
 *
 * Other nodes' threads are remembered too (Known: the owner a refused claim,
 * a placement or an owner look-up named): a thread's next RUN_START (and
 * forward.c's by-thread requests) go straight to that node, no claim the
 * cluster would refuse. Forgotten when the node is lost (takeover.c), when
 * this node owns the thread, and when the node did not run a request sent
 * on it (forward_known: not_owner, or nobody serving it), which is then
 * handled again without the entry.
 *
 * Capacity ([cluster] max_runs, 0 = no limit): when this node drives that
 * many runs not done, a new thread is claimed for the live node with the
 * fewest runs among those with room, per their last heartbeats ({"runs",
 * "max_runs"}: takeover.c), ties to the smaller name; the request is then
 * forwarded to it. When no node has room, this node claims it (its shim's
 * queue waits). A request forwarded here is never placed elsewhere.
 */
#include "config.h"

#include "cluster-mode.h"

#include <errno.h>
#include <inttypes.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/cluster.h"
#include "frame.h"
#include "json-util.h"
#include "macro.h"
#include "strcache.h"

typedef struct Owned {
	struct Owned *next;
	char thread[];
} Owned;

typedef struct Claim {
	struct Claim *next, *prev;
	Coordinator *c;
	PeerDeferred *d;
	PeerHandler h;
	void *ud;
	int type;
	bool forwarded; /* came from another node: never forwarded again */
	char *frame;	/* the request, encoded (frame_encode) */
	size_t len;
	char thread[];
} Claim;

/* At most this many other nodes' threads are remembered (the oldest go). */
#define KNOWN_MAX 4096

typedef struct Placement {
	Owned *owned;
	size_t n_owned;
	StrCache *known; /* other nodes' threads → their owner, as a claim or a
			  * look-up last said */
	uint64_t lease;	 /* cluster_lease() when owned was (re)started */
	Claim *claims;
} Placement;

static Placement *
placement_get(Coordinator *c)
{
	if (!c->placement)
		c->placement = calloc(1, sizeof(Placement));
	return c->placement;
}

static bool
owns(Placement *pl, const char *thread)
{
	for (Owned *o = pl->owned; o; o = o->next)
		if (streq(o->thread, thread))
			return true;
	return false;
}

static void
own(Placement *pl, const char *thread)
{
	if (pl->known)
		(void)strcache_drop(pl->known, thread);
	if (owns(pl, thread))
		return;
	size_t n = strlen(thread) + 1;
	Owned *o = malloc(sizeof(*o) + n);
	if (!o)
		return; /* asked again next time */
	memcpy(o->thread, thread, n);
	o->next = pl->owned;
	pl->owned = o;
	pl->n_owned++;
}

static void
forget_all(Placement *pl)
{
	while (pl->owned) {
		Owned *o = pl->owned;
		pl->owned = o->next;
		free(o);
	}
	pl->n_owned = 0;
}

void
placement_remember(Coordinator *c, const char *thread, const char *node)
{
	Placement *pl = c->cluster ? placement_get(c) : NULL;

	if (!pl || streq(node, cluster_node(c->cluster)) || strlen(node) >= CLUSTER_NODE_MAX)
		return;
	if (!pl->known)
		pl->known = strcache_new(KNOWN_MAX);
	if (pl->known) /* out of memory: looked up again next time */
		(void)strcache_put(pl->known, thread, node);
}

const char *
placement_known_owner(Coordinator *c, const char *thread)
{
	return c->placement && c->placement->known ? strcache_get(c->placement->known, thread)
						   : NULL;
}

void
placement_forget(Coordinator *c, const char *thread)
{
	if (c->placement && c->placement->known)
		(void)strcache_drop(c->placement->known, thread);
}

void
placement_forget_node(Coordinator *c, const char *node)
{
	if (c->placement && c->placement->known)
		(void)strcache_drop_value(c->placement->known, node);
}

/* The cache of owned threads holds while the lease's generation does. */
static void
check_lease(Coordinator *c, Placement *pl)
{
	uint64_t g = cluster_lease(c->cluster);
	if (g != 0 && g == pl->lease)
		return;
	/* once per lapse: while it lasts (g 0), what was owned since is
	 * forgotten at each check, unsaid */
	if (pl->owned && pl->lease != 0)
		log_notice("Cluster: this node's lease on its heartbeat key lapsed; its %zu "
			   "thread(s) are checked again at their next run",
			   pl->n_owned);
	forget_all(pl);
	pl->lease = g;
}

void
placement_own(Coordinator *c, const char *thread)
{
	Placement *pl = c->cluster ? placement_get(c) : NULL;
	if (pl) {
		check_lease(c, pl);
		own(pl, thread);
	}
}

size_t
placement_owned_count(Coordinator *c)
{
	return c->placement ? c->placement->n_owned : 0;
}

static void
claim_free(Placement *pl, Claim *cl)
{
	if (cl->prev)
		cl->prev->next = cl->next;
	else
		pl->claims = cl->next;
	if (cl->next)
		cl->next->prev = cl->prev;
	peer_deferred_free(cl->d);
	free(cl->frame);
	free(cl);
}

/* Handle the held request again, now that this node owns its thread. */
static void
redispatch(Claim *cl)
{
	Peer *p = peer_deferred_peer(cl->d);
	Frame f;

	if (!p)
		return; /* its client went away */
	int r = frame_parse(cl->frame + 4, cl->len - 4, &f);
	if (r == 0) {
		r = cl->h(p, &f, cl->ud);
		frame_done(&f);
		if (r >= 0)
			return;
	}
	(void)peer_deferred_error(TAKE_PTR(cl->d), r, NULL, NULL);
}

static void
on_claimed(Cluster *cluster, int err, const ClusterOwner *owner, void *userdata)
{
	Claim *cl = userdata;
	Coordinator *c = cl->c;
	Placement *pl = c->placement;
	const char *me = cluster_node(cluster);
	LogCtx lc = {.thread_id = cl->thread};

	if (err == 0 && !streq(owner->node, me) && !cl->forwarded) {
		/* claimed for a node with room (pick_node()) */
		placement_remember(c, cl->thread, owner->node);
		forward_deferred(c, TAKE_PTR(cl->d), cl->type, cl->frame, cl->len, owner->node);
	} else if (err == 0 || (err == -EEXIST && streq(owner->node, me))) {
		if (err == 0)
			log_ctx(LOG_INFO, &lc,
				"Thread claimed for this node (%s, epoch %" PRIu64 ")", me,
				owner->epoch);
		own(pl, cl->thread);
		redispatch(cl);
	} else if (err == -EEXIST && owner->node[0] && !cl->forwarded) {
		placement_remember(c, cl->thread, owner->node);
		forward_deferred(c, TAKE_PTR(cl->d), cl->type, cl->frame, cl->len, owner->node);
	} else if (err == -EEXIST) {
		char m[160];
		snprintf(m, sizeof(m), "thread is owned by cluster node '%s'",
			 owner->node[0] ? owner->node : "(unknown)");
		(void)peer_deferred_error(TAKE_PTR(cl->d), -EREMOTE, REASON_NOT_OWNER, m);
	} else {
		log_ctx_errno(LOG_WARNING, err, &lc, "Cannot claim the thread: %m");
		(void)peer_deferred_error(TAKE_PTR(cl->d), -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
					  "the cluster did not answer the thread's claim");
	}
	claim_free(pl, cl);
}

size_t
placement_active_runs(Coordinator *c)
{
	size_t n = 0;
	for (Run *run = c->runs; run; run = run->next)
		n += run->state != RUN_DONE;
	return n;
}

typedef struct Pick {
	const char *me;
	bool found;
	int64_t runs;
	char node[CLUSTER_NODE_MAX];
} Pick;

static void
consider_node(Cluster *cluster, const char *node, const char *info, void *userdata)
{
	Pick *pk = userdata;
	json_auto_t *j = NULL;

	if (streq(node, pk->me) || strlen(node) >= sizeof(pk->node))
		return;
	j = json_loads(info, 0, NULL);
	json_t *runs = json_object_get(j, "runs"), *max = json_object_get(j, "max_runs");
	if (!json_is_integer(runs))
		return; /* no load known (an older node, or no heartbeat with it yet) */
	int64_t r = json_integer_value(runs), m = json_integer_value(max); /* absent: 0 */
	if (m > 0 && r >= m)
		return;
	if (!pk->found || r < pk->runs || (r == pk->runs && strcmp(node, pk->node) < 0)) {
		pk->found = true;
		pk->runs = r;
		snprintf(pk->node, sizeof(pk->node), "%s", node);
	}
}

/* The node a new thread is claimed for: this one unless it is at capacity
 * and another live node has room (see the top of this file). */
static const char *
pick_node(Coordinator *c, const Claim *cl, Pick *pk)
{
	const char *me = cluster_node(c->cluster);
	int64_t max = c->conf.shared.cluster.max_runs;
	size_t here = placement_active_runs(c);
	LogCtx lc = {.thread_id = cl->thread};

	if (cl->forwarded || max <= 0 || here < (size_t)max)
		return me;
	*pk = (Pick){.me = me};
	cluster_foreach_node(c->cluster, consider_node, pk);
	if (!pk->found) {
		log_ctx(LOG_INFO, &lc,
			"Placement: this node is at capacity (%zu runs, max_runs %" PRId64
			") and no other live node has room; the new thread stays here",
			here, max);
		return me;
	}
	log_ctx(LOG_INFO, &lc,
		"Placement: this node is at capacity (%zu runs, max_runs %" PRId64
		"); the new thread goes to node '%s' (%" PRId64 " runs)",
		here, max, pk->node, pk->runs);
	return pk->node;
}

bool
placement_refuse_unready(Coordinator *c, Peer *p, const Frame *f)
{
	if (cluster_ready(c->cluster))
		return false;
	(void)peer_reply_error_reason(p, f->req_id, -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
				      "the cluster (NATS) is not reachable");
	return true;
}

bool
placement_run_start(Coordinator *c, Peer *p, const Frame *f, const char *thread_id, PeerHandler h,
		    void *ud)
{
	if (!c->cluster)
		return false;
	Placement *pl = placement_get(c);
	if (pl)
		check_lease(c, pl);
	if (pl && owns(pl, thread_id))
		return false;
	if (placement_refuse_unready(c, p, f))
		return true;
	/* another node's, as last heard: forwarded without a claim (which
	 * would be refused); a stale entry is dropped and the request claims */
	const char *known = pl ? placement_known_owner(c, thread_id) : NULL;
	if (known && !((Client *)ud)->forwarded && forward_known(c, p, f, thread_id, known, h, ud))
		return true;
	size_t tl = strlen(thread_id) + 1;
	Claim *cl = pl ? calloc(1, sizeof(*cl) + tl) : NULL;
	int r = cl ? forward_encode(f, &cl->frame, &cl->len) : -ENOMEM;

	if (r == 0 && !(cl->d = peer_defer(p, f)))
		r = -ENOMEM;
	if (r == 0) {
		memcpy(cl->thread, thread_id, tl);
		cl->c = c;
		cl->h = h;
		cl->ud = ud;
		cl->type = f->type;
		cl->forwarded = ((Client *)ud)->forwarded;
		cl->next = pl->claims;
		if (pl->claims)
			pl->claims->prev = cl;
		pl->claims = cl;
		Pick pk;
		r = cluster_claim_thread(c->cluster, thread_id, pick_node(c, cl, &pk), on_claimed,
					 cl);
		if (r == 0)
			return true;
		/* not answered: the error below answers it */
		cl->d = peer_deferred_free(cl->d);
		claim_free(pl, cl);
	} else if (cl) {
		peer_deferred_free(cl->d);
		free(cl->frame);
		free(cl);
	}
	(void)peer_reply_error_reason(
	    p, f->req_id, r == -EINVAL ? -EINVAL : -EAGAIN,
	    r == -EINVAL ? REASON_BAD_REQUEST : REASON_CLUSTER_UNAVAILABLE,
	    r == -EINVAL ? "threadId cannot be a cluster key (A-Z a-z 0-9 "
			   "- _ . = /)"
			 : "the cluster cannot claim the thread now");
	return true;
}

bool
placement_owns(Coordinator *c, const char *thread_id)
{
	if (!c->placement)
		return false;
	check_lease(c, c->placement); /* a lapsed lease: nothing is known owned */
	return owns(c->placement, thread_id);
}

void
placement_teardown(Coordinator *c)
{
	Placement *pl = c->placement;

	if (!pl)
		return;
	while (pl->claims)
		claim_free(pl, pl->claims);
	forget_all(pl);
	strcache_free(pl->known);
	free(pl);
	c->placement = NULL;
}
