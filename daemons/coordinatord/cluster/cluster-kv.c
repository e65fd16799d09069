/* SPDX-License-Identifier: MIT */
/*
 * cluster-kv.c — the stream and buckets at start, thread ownership
 * (rw_threads), run records (rw_runs) and inputs (rw_inputs), node
 * liveness of the nodes (rw_nodes; this node's heartbeats are
 * cluster-beat.c's). See cluster.h.
 *
 * Liveness: a KV bucket's TTL removes an expired key without publishing
 * anything (nats-server 2.9 has no delete marker for an expiry), so a watch
 * alone never says "gone". The watcher thread reports each heartbeat (and
 * explicit deletes) to the loop; a node silent for node_ttl_ms is then
 * looked up: NOT_FOUND (the server expired its key), or the same revision
 * as the last beat seen node_ttl_ms ago (nothing put since: the bucket's
 * MaxAge may be an earlier configuration's, and the server expires keys
 * when it gets to it), reports it lost.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "buf.h"
#include "cluster-internal.h"
#include "log.h"
#include "macro.h"
#include "time-util.h"

#define KEY_MAX 256
#define WATCH_POLL_MS 250

/* ---- ensure: the first worker job ---- */

static int
ensure_stream(Cluster *c)
{
	jsStreamInfo *si = NULL;
	jsErrCode code = 0;
	natsStatus s = js_GetStreamInfo(&si, c->js, CLUSTER_STREAM, NULL, &code);
	if (s == NATS_OK) {
		if (si->Config && si->Config->Replicas != c->replicas)
			log_warning("cluster: stream %s has %" PRId64 " replicas, not %d (kept)",
				    CLUSTER_STREAM, si->Config->Replicas, c->replicas);
		jsStreamInfo_Destroy(si);
		return 0;
	}
	if (code == JSClusterNotAvailErr) /* no meta leader (yet): transient */
		return -EAGAIN;
	if (s != NATS_NOT_FOUND && code != JSStreamNotFoundErr)
		return cluster_errno(s, code, "stream info " CLUSTER_STREAM);

	const char *subjects[] = {CLUSTER_SUBJECT_PREFIX "*"};
	jsStreamConfig cfg;
	jsStreamConfig_Init(&cfg);
	cfg.Name = CLUSTER_STREAM;
	cfg.Subjects = subjects;
	cfg.SubjectsLen = 1;
	cfg.Storage = js_FileStorage;
	cfg.Replicas = c->replicas;
	cfg.Duplicates = (int64_t)CLUSTER_DUP_WINDOW_S * 1000000000LL;
	cfg.AllowDirect = true;
	code = 0;
	s = js_AddStream(&si, c->js, &cfg, NULL, &code);
	jsStreamInfo_Destroy(si);
	if (s == NATS_OK || code == JSStreamNameExistErr) /* or another node was first */
		return 0;
	if (code == JSClusterNotAvailErr) /* lost its meta leader meanwhile: transient */
		return -EAGAIN;
	return cluster_errno(s, code, "add stream " CLUSTER_STREAM);
}

/* Whether JetStream answers "temporarily unavailable" (no meta leader: a
 * cluster without quorum) about bucket's stream. */
static bool
js_unavailable(Cluster *c, const char *bucket)
{
	char stream[64];
	jsStreamInfo *si = NULL;
	jsErrCode code = 0;
	snprintf(stream, sizeof(stream), "KV_%s", bucket);
	natsStatus s = js_GetStreamInfo(&si, c->js, stream, NULL, &code);
	jsStreamInfo_Destroy(si);
	return s != NATS_OK && (code == JSClusterNotAvailErr || s == NATS_TIMEOUT);
}

static int
ensure_bucket(Cluster *c, const char *name, int64_t ttl_ms, kvStore **ret)
{
	if (*ret) /* bound by an earlier try of an ensure that failed later */
		return 0;
	if (js_KeyValue(ret, c->js, name) == NATS_OK)
		return 0;
	kvConfig cfg;
	kvConfig_Init(&cfg);
	cfg.Bucket = name;
	cfg.History = 1;
	cfg.TTL = ttl_ms * 1000000; /* libnats 3.4: nanoseconds */
	cfg.StorageType = js_FileStorage;
	cfg.Replicas = c->replicas;
	natsStatus s = js_CreateKeyValue(ret, c->js, &cfg);
	if (s != NATS_OK && js_KeyValue(ret, c->js, name) == NATS_OK)
		return 0; /* created meanwhile by another node */
	if (s != NATS_OK && js_unavailable(c, name))
		return -EAGAIN; /* no meta leader: transient (the create says no code) */
	return cluster_errno(s, 0, name);
}

/* Owner reads must see the latest owner: a KV bucket answers gets from any
 * replica (direct gets, AllowDirect), which may lag a create by a moment.
 * rw_threads is read at its stream's leader instead: AllowDirect off, then
 * bound again (libnats decides at binding). */
static int
no_direct_gets(Cluster *c, const char *bucket, kvStore **kv)
{
	char stream[64];
	jsStreamInfo *si = NULL, *si2 = NULL;
	jsErrCode code = 0;
	snprintf(stream, sizeof(stream), "KV_%s", bucket);
	natsStatus s = js_GetStreamInfo(&si, c->js, stream, NULL, &code);
	if (s != NATS_OK)
		return code == JSClusterNotAvailErr ? -EAGAIN : cluster_errno(s, code, stream);
	if (si->Config->AllowDirect) {
		si->Config->AllowDirect = false;
		s = js_UpdateStream(&si2, c->js, si->Config, NULL, &code);
		jsStreamInfo_Destroy(si2);
		if (s == NATS_OK) {
			kvStore_Destroy(*kv);
			*kv = NULL;
			s = js_KeyValue(kv, c->js, bucket);
		}
	}
	jsStreamInfo_Destroy(si);
	if (s != NATS_OK && code == JSClusterNotAvailErr)
		return -EAGAIN; /* no meta leader meanwhile: transient (t_cluster_up) */
	return cluster_errno(s, code, stream);
}

int
cluster_ensure(Cluster *c)
{
	int r = ensure_stream(c);
	if (r >= 0)
		r = ensure_bucket(c, CLUSTER_BUCKET_THREADS, 0, &c->kv_threads);
	if (r >= 0)
		r = no_direct_gets(c, CLUSTER_BUCKET_THREADS, &c->kv_threads);
	if (r >= 0)
		r = ensure_bucket(c, CLUSTER_BUCKET_NODES, c->node_ttl_ms, &c->kv_nodes);
	if (r >= 0) /* before rw_runs: kv_runs set says every bucket is */
		r = ensure_bucket(c, CLUSTER_BUCKET_INPUTS, 0, &c->kv_inputs);
	if (r >= 0)
		r = ensure_bucket(c, CLUSTER_BUCKET_IDEM, 0, &c->kv_idem);
	if (r >= 0) /* a refused create is read at the leader (idem_claim) */
		r = no_direct_gets(c, CLUSTER_BUCKET_IDEM, &c->kv_idem);
	if (r >= 0)
		r = ensure_bucket(c, CLUSTER_BUCKET_RUNS, 0, &c->kv_runs);
	if (r >= 0)
		r = cluster_apply_max_age(c);
	return r;
}

/* ---- KV jobs ---- */

typedef enum KvOp {
	KV_CLAIM,
	KV_TAKE,
	KV_OWNER,
	KV_PUT_RUN,
	KV_GET_RUN,
	KV_PUT_INPUT,
	KV_GET_INPUT,
	KV_CHECK_NODE,
	KV_IDEM_CLAIM
} KvOp;

typedef struct KvJob {
	Job job;
	KvOp op;
	char key[KEY_MAX + 1];
	char node[CLUSTER_NODE_MAX];
	uint64_t expected;
	/* KV_TAKE: the lost node whose thread it takes, and the revision of its
	 * last beat seen before the loss (ClusterLost); lost[0] == 0: none */
	char lost[CLUSTER_NODE_MAX];
	uint64_t lost_rev;
	void *data;
	size_t len;
	int r;
	ClusterOwner owner;
	uint64_t rev;
	ClusterOwnerFn owner_cb;
	ClusterDoneFn done_cb;
	ClusterValueFn value_cb; /* KV_GET_RUN, KV_GET_INPUT: data, len are the value */
	void *userdata;
} KvJob;

static bool
valid_key(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n > KEY_MAX || s[0] == '.' || s[n - 1] == '.')
		return false;
	for (size_t i = 0; i < n; i++) {
		char ch = s[i];
		if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		      (ch >= '0' && ch <= '9') || strchr("-_=./", ch)))
			return false;
	}
	return true;
}

/* The owner entry of a thread: the node's name; its revision is the epoch.
 * 0, -ENOENT, or an error. */
static int
get_owner(Cluster *c, const char *key, ClusterOwner *o)
{
	kvEntry *e = NULL;
	natsStatus s = kvStore_Get(&e, c->kv_threads, key);
	memset(o, 0, sizeof(*o));
	if (s != NATS_OK)
		return cluster_errno(s, 0, "get thread owner");
	const char *v = kvEntry_ValueString(e);
	if (!v || !cluster_valid_token(v, CLUSTER_NODE_MAX - 1)) {
		kvEntry_Destroy(e);
		return log_warning_errno(SYNTHETIC_ERRNO(EBADMSG),
					 "cluster: thread %s has a malformed owner entry", key);
	}
	snprintf(o->node, sizeof(o->node), "%s", v);
	o->epoch = o->revision = kvEntry_Revision(e);
	kvEntry_Destroy(e);
	return 0;
}

/* KV gets may be answered by a replica that has not applied the newest
 * write yet (direct gets): after a refused create or update, read until the
 * entry that won shows, for at most READ_AFTER_REFUSAL_MS. */
#define READ_AFTER_REFUSAL_MS 2000
static int
get_owner_after(Cluster *c, const char *key, uint64_t not_rev, ClusterOwner *o)
{
	usec_t deadline = now_usec() + READ_AFTER_REFUSAL_MS * USEC_PER_MSEC;
	int r;
	for (;;) {
		r = get_owner(c, key, o);
		if ((r == 0 && o->revision != not_rev) || (r < 0 && r != -ENOENT) ||
		    now_usec() >= deadline)
			return r;
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

static int
put_owner(Cluster *c, KvJob *j, bool create)
{
	uint64_t rev = 0;
	natsStatus s =
	    create ? kvStore_CreateString(&rev, c->kv_threads, j->key, j->node)
		   : kvStore_UpdateString(&rev, c->kv_threads, j->key, j->node, j->expected);
	if (s != NATS_OK)
		return -EAGAIN; /* the caller reads the entry to say why */
	snprintf(j->owner.node, sizeof(j->owner.node), "%s", j->node);
	j->owner.epoch = j->owner.revision = rev;
	return 0;
}

static int
claim(Cluster *c, KvJob *j)
{
	if (put_owner(c, j, true) == 0)
		return 0;
	int r = get_owner_after(c, j->key, 0, &j->owner);
	return r == 0 ? -EEXIST : r == -ENOENT ? -EIO : r;
}

/* The revision of a node's heartbeat key, read at rw_nodes' stream leader
 * (js_GetLastMsg: not a direct get, which any replica may answer with an
 * older view). 0 and *rev, -ENOENT (expired, deleted, never put), or an
 * error (no leader: a partition, a failover). */
static int
node_rev_at_leader(Cluster *c, const char *node, uint64_t *rev)
{
	char subject[KEY_MAX + 32];
	natsMsg *m = NULL;
	jsErrCode code = 0;
	const char *op = NULL;

	snprintf(subject, sizeof(subject), "$KV.%s.%s", CLUSTER_BUCKET_NODES, node);
	natsStatus s = js_GetLastMsg(&m, c->js, "KV_" CLUSTER_BUCKET_NODES, subject, NULL, &code);
	if (s == NATS_NOT_FOUND || code == JSNoMessageFoundErr)
		return -ENOENT;
	if (s != NATS_OK)
		return cluster_errno(s, code, "node key at the leader");
	int r = 0;
	if (natsMsgHeader_Get(m, "KV-Operation", &op) == NATS_OK && op)
		r = -ENOENT; /* a delete or purge marker: a node that left */
	else
		*rev = natsMsg_GetSequence(m);
	natsMsg_Destroy(m);
	return r;
}

/* No read of the owner first: the update on the revision is the test, done
 * by the stream's leader, where a read could be a replica's older view. A
 * take from a lost node reads that node's key at the leader first: a beat
 * since the loss (a newer revision) means it is back — after a heal, before
 * this node's watch of rw_nodes shows it (issue 35 D) — and the take does
 * not go ahead: -EALREADY, j->rev its revision. */
static int
take(Cluster *c, KvJob *j)
{
	if (j->lost[0]) {
		uint64_t rev = 0;
		int r = node_rev_at_leader(c, j->lost, &rev);
		if (r == 0 && rev > j->lost_rev) {
			j->rev = rev;
			return -EALREADY;
		}
		if (r < 0 && r != -ENOENT)
			return r;
	}
	if (put_owner(c, j, false) == 0)
		return 0;
	int r = get_owner_after(c, j->key, j->expected, &j->owner);
	if (r == -ENOENT)
		return -ENOENT;
	return r == 0 && j->owner.revision != j->expected ? -ESTALE : r < 0 ? r : -EIO;
}

/* An Idempotency-Key's entry: created with this run id (0), or the run id
 * of the entry already there (-EEXIST, j->data), read at the leader. */
static int
idem_claim(Cluster *c, KvJob *j)
{
	uint64_t rev = 0;
	if (kvStore_Create(&rev, c->kv_idem, j->key, j->data, (int)j->len) == NATS_OK)
		return 0;
	usec_t deadline = now_usec() + READ_AFTER_REFUSAL_MS * USEC_PER_MSEC;
	for (;;) {
		kvEntry *e = NULL;
		natsStatus s = kvStore_Get(&e, c->kv_idem, j->key);
		if (s == NATS_OK) {
			int n = kvEntry_ValueLen(e);
			size_t len = n > 0 ? (size_t)n : 0;
			void *v = realloc(j->data, len + 1);
			if (!v) {
				kvEntry_Destroy(e);
				return -ENOMEM;
			}
			memcpy(v, kvEntry_Value(e), len);
			((char *)v)[len] = '\0';
			j->data = v;
			j->len = len;
			kvEntry_Destroy(e);
			return -EEXIST;
		}
		kvEntry_Destroy(e);
		if (s != NATS_NOT_FOUND || now_usec() >= deadline)
			return s == NATS_NOT_FOUND ? -EIO
						   : cluster_errno(s, 0, "get idempotency key");
		struct timespec ts = {0, 20 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
}

static void
kv_exec(Cluster *c, Job *job)
{
	KvJob *j = (KvJob *)job;
	kvEntry *e = NULL;
	switch (j->op) {
	case KV_CLAIM: j->r = claim(c, j); break;
	case KV_TAKE: j->r = take(c, j); break;
	case KV_IDEM_CLAIM: j->r = idem_claim(c, j); break;
	case KV_OWNER: j->r = get_owner(c, j->key, &j->owner); break;
	case KV_PUT_RUN:
	case KV_PUT_INPUT:
		j->r = cluster_errno(kvStore_Put(&j->rev,
						 j->op == KV_PUT_RUN ? c->kv_runs : c->kv_inputs,
						 j->key, j->data, (int)j->len),
				     0, j->op == KV_PUT_RUN ? "put run record" : "put run input");
		break;
	case KV_GET_RUN:
	case KV_GET_INPUT:
		j->r = cluster_errno(
		    kvStore_Get(&e, j->op == KV_GET_RUN ? c->kv_runs : c->kv_inputs, j->key), 0,
		    j->op == KV_GET_RUN ? "get run record" : "get run input");
		if (j->r >= 0) {
			int n = kvEntry_ValueLen(e);
			j->len = n > 0 ? (size_t)n : 0;
			j->data = malloc(j->len + 1);
			if (j->data) {
				memcpy(j->data, kvEntry_Value(e), j->len);
				((char *)j->data)[j->len] = '\0';
			} else
				j->r = -ENOMEM;
		}
		kvEntry_Destroy(e);
		break;
	case KV_CHECK_NODE: /* at the leader: a lagging replica would show an old beat */
		j->r = node_rev_at_leader(c, j->key, &j->rev);
		break;
	}
}

static void node_checked(Cluster *c, KvJob *j);
static void node_beats(Cluster *c, const char *name, uint64_t rev, const char *info);

static void
kv_done(Cluster *c, Job *job)
{
	KvJob *j = (KvJob *)job;
	if (!c->closing) {
		if (j->op == KV_TAKE && j->r == -EALREADY)
			node_beats(c, j->lost, j->rev, NULL); /* read at the leader */
		if (j->op == KV_CHECK_NODE)
			node_checked(c, j);
		else if (j->value_cb)
			j->value_cb(c, j->r, j->data, j->r < 0 && j->r != -EEXIST ? 0 : j->len,
				    j->userdata);
		else if (j->owner_cb)
			j->owner_cb(c, j->r, &j->owner, j->userdata);
		else if (j->done_cb)
			j->done_cb(c, j->r, j->rev, j->userdata);
	}
	free(j->data);
	free(j);
}

static int
kv_submit(Cluster *c, KvOp op, const char *key, const char *node, uint64_t expected,
	  ClusterOwnerFn ocb, ClusterDoneFn dcb, void *userdata, KvJob **ret)
{
	if (!valid_key(key) || (node && !cluster_valid_token(node, CLUSTER_NODE_MAX - 1)))
		return -EINVAL;
	if (!c->kv_runs)
		return -ENOTCONN; /* the buckets are not ensured yet */
	KvJob *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->job.exec = kv_exec;
	j->job.done = kv_done;
	j->op = op;
	snprintf(j->key, sizeof(j->key), "%s", key);
	snprintf(j->node, sizeof(j->node), "%s", node ? node : "");
	j->expected = expected;
	j->owner_cb = ocb;
	j->done_cb = dcb;
	j->userdata = userdata;
	if (ret)
		*ret = j;
	else
		cluster_submit(c, &j->job);
	return 0;
}

int
cluster_claim_thread(Cluster *c, const char *thread, const char *node, ClusterOwnerFn cb,
		     void *userdata)
{
	return kv_submit(c, KV_CLAIM, thread, node, 0, cb, NULL, userdata, NULL);
}

int
cluster_take_thread(Cluster *c, const char *thread, const char *node, uint64_t expected_revision,
		    const ClusterLost *lost, ClusterOwnerFn cb, void *userdata)
{
	KvJob *j;
	if (lost && !cluster_valid_token(lost->node, CLUSTER_NODE_MAX - 1))
		return -EINVAL;
	int r = kv_submit(c, KV_TAKE, thread, node, expected_revision, cb, NULL, userdata, &j);
	if (r < 0)
		return r;
	if (lost) {
		snprintf(j->lost, sizeof(j->lost), "%s", lost->node);
		j->lost_rev = lost->revision;
	}
	cluster_submit(c, &j->job);
	return 0;
}

int
cluster_owner(Cluster *c, const char *thread, ClusterOwnerFn cb, void *userdata)
{
	return kv_submit(c, KV_OWNER, thread, NULL, 0, cb, NULL, userdata, NULL);
}

static int
kv_put(Cluster *c, KvOp op, const char *run_id, const void *data, size_t len, ClusterDoneFn cb,
       void *userdata)
{
	KvJob *j;
	int r = kv_submit(c, op, run_id, NULL, 0, NULL, cb, userdata, &j);
	if (r < 0)
		return r;
	j->data = malloc(len ? len : 1);
	if (!j->data) {
		free(j);
		return -ENOMEM;
	}
	memcpy(j->data, data, len);
	j->len = len;
	cluster_submit(c, &j->job);
	return 0;
}

static int
kv_get(Cluster *c, KvOp op, const char *run_id, ClusterValueFn cb, void *userdata)
{
	KvJob *j;
	int r = kv_submit(c, op, run_id, NULL, 0, NULL, NULL, userdata, &j);
	if (r < 0)
		return r;
	j->value_cb = cb;
	cluster_submit(c, &j->job);
	return 0;
}

int
cluster_put(Cluster *c, ClusterBucket bucket, const char *key, const void *data, size_t len,
	    ClusterDoneFn cb, void *userdata)
{
	if (bucket != CLUSTER_RUNS && bucket != CLUSTER_INPUTS)
		return -EINVAL;
	return kv_put(c, bucket == CLUSTER_RUNS ? KV_PUT_RUN : KV_PUT_INPUT, key, data, len, cb,
		      userdata);
}

int
cluster_get(Cluster *c, ClusterBucket bucket, const char *key, ClusterValueFn cb, void *userdata)
{
	if (bucket != CLUSTER_RUNS && bucket != CLUSTER_INPUTS)
		return -EINVAL;
	return kv_get(c, bucket == CLUSTER_RUNS ? KV_GET_RUN : KV_GET_INPUT, key, cb, userdata);
}

int
cluster_idem_claim(Cluster *c, const char *key, const char *run_id, ClusterValueFn cb,
		   void *userdata)
{
	KvJob *j;
	int r = kv_submit(c, KV_IDEM_CLAIM, key, NULL, 0, NULL, NULL, userdata, &j);
	if (r < 0)
		return r;
	if (!(j->data = strdup(run_id))) {
		free(j);
		return -ENOMEM;
	}
	j->len = strlen(run_id);
	j->value_cb = cb;
	cluster_submit(c, &j->job);
	return 0;
}

/* ---- liveness (loop thread) ---- */

struct NodeSeen {
	NodeSeen *next;
	char name[CLUSTER_NODE_MAX];
	char *info; /* its last heartbeat's value */
	usec_t last_seen;
	uint64_t rev;
	bool alive, checking;
};

static NodeSeen *
node_find(Cluster *c, const char *name, bool create)
{
	for (NodeSeen *n = c->nodes; n; n = n->next)
		if (strcmp(n->name, name) == 0)
			return n;
	if (!create)
		return NULL;
	NodeSeen *n = calloc(1, sizeof(*n));
	if (!n)
		return NULL;
	snprintf(n->name, sizeof(n->name), "%s", name);
	n->next = c->nodes;
	c->nodes = n;
	return n;
}

static void
node_lost(Cluster *c, NodeSeen *n)
{
	if (!n->alive)
		return;
	n->alive = false;
	log_notice("cluster: node %s lost (no heartbeat for %lld ms)", n->name,
		   (long long)c->node_ttl_ms);
	if (c->cbs.on_node_lost)
		c->cbs.on_node_lost(c, n->name, c->userdata);
}

static void
node_checked(Cluster *c, KvJob *j)
{
	NodeSeen *n = node_find(c, j->key, false);
	if (!n)
		return;
	n->checking = false;
	if (j->r == -ENOENT)
		node_lost(c, n);
	else if (j->r == 0 && j->rev > n->rev)
		node_beats(c, n->name, j->rev, NULL); /* a beat the watcher has not delivered yet */
	else if (j->r == 0 && j->rev == n->rev &&
		 now_usec() - n->last_seen >= (usec_t)c->node_ttl_ms * USEC_PER_MSEC) {
		/* The entry is the one seen node_ttl_ms ago or more: the node put
		 * nothing since. Its own age decides, not the server's expiry,
		 * which follows the bucket's MaxAge — set by whichever
		 * configuration created the bucket (another node_ttl_ms) — and
		 * comes when the server gets to it (issue 35 I). */
		node_lost(c, n);
	}
	/* an older revision: a lagging replica answered; the next pass asks again */
}

/* A beat of node name at revision rev (the watch's, or one a take read at the
 * leader: info NULL, the last one kept): alive from now on. An older revision
 * than the one seen (a watch that lags a leader read) changes nothing. */
static void
node_beats(Cluster *c, const char *name, uint64_t rev, const char *info)
{
	NodeSeen *n = node_find(c, name, true);
	if (!n || rev < n->rev)
		return;
	n->last_seen = now_usec();
	n->rev = rev;
	char *copy = info ? strdup(info) : NULL;
	if (copy) {
		free(n->info);
		n->info = copy;
	}
	if (!n->alive) {
		n->alive = true;
		if (c->cbs.on_node_up)
			c->cbs.on_node_up(c, n->name, c->userdata);
	}
}

typedef struct WatchJob {
	Job job;
	char name[CLUSTER_NODE_MAX];
	kvOperation op;
	uint64_t rev;
	char info[]; /* the value, NUL-terminated (one block: see Mailbox) */
} WatchJob;

static void
watch_done(Cluster *c, Job *job)
{
	WatchJob *w = (WatchJob *)job;
	if (c->closing)
		;
	else if (w->op == kvOp_Put)
		node_beats(c, w->name, w->rev, w->info);
	else {
		NodeSeen *n = node_find(c, w->name, true);
		if (n)
			node_lost(c, n); /* deleted or purged: a node that left */
	}
	free(w);
}

static void *
watcher_main(void *arg)
{
	Cluster *c = arg;
	kvWatcher *w = NULL;
	while (!atomic_load(&c->watch_stop)) {
		kvEntry *e = NULL;
		if (!w && kvStore_WatchAll(&w, c->kv_nodes, NULL) != NATS_OK) {
			w = NULL;
			struct timespec ts = {0, WATCH_POLL_MS * 1000 * 1000};
			nanosleep(&ts, NULL);
			continue;
		}
		natsStatus s = kvWatcher_Next(&e, w, WATCH_POLL_MS);
		if (s == NATS_OK && e &&
		    cluster_valid_token(kvEntry_Key(e), CLUSTER_NODE_MAX - 1)) {
			int len = kvEntry_ValueLen(e);
			len = len < 0 ? 0 : MIN(len, CLUSTER_NODE_INFO_MAX);
			WatchJob *wj = calloc(1, sizeof(*wj) + (size_t)len + 1);
			if (wj) {
				if (len)
					memcpy(wj->info, kvEntry_Value(e), (size_t)len);
				wj->job.done = watch_done;
				snprintf(wj->name, sizeof(wj->name), "%s", kvEntry_Key(e));
				wj->op = kvEntry_Operation(e);
				wj->rev = kvEntry_Revision(e);
				cluster_post(c, &wj->job);
			}
		} else if (s == NATS_ILLEGAL_STATE || s == NATS_CONNECTION_CLOSED) {
			kvWatcher_Destroy(w); /* stopped: watch again */
			w = NULL;
		}
		kvEntry_Destroy(e);
	}
	kvWatcher_Destroy(w);
	return NULL;
}

static void
sweep(Cluster *c)
{
	usec_t now = now_usec();
	for (NodeSeen *n = c->nodes; n; n = n->next) {
		if (!n->alive || n->checking ||
		    now - n->last_seen < (usec_t)c->node_ttl_ms * USEC_PER_MSEC)
			continue;
		KvJob *j;
		if (kv_submit(c, KV_CHECK_NODE, n->name, NULL, 0, NULL, NULL, NULL, &j) < 0)
			continue;
		n->checking = true;
		cluster_submit(c, &j->job);
	}
}

/* Every heartbeat_ms on the loop: the loop's tick for the heartbeat
 * thread's guard (cluster-beat.c), and the other nodes' liveness. */
static void
on_beat(evutil_socket_t fd, short what, void *arg)
{
	Cluster *c = arg;
	cluster_beat_loop_tick(c);
	if (c->watch_nodes)
		sweep(c);
}

int
cluster_nodes_start(Cluster *c)
{
	int64_t period = c->heartbeat_ms > 0 ? c->heartbeat_ms : 250;
	struct timeval tv = {period / 1000, (period % 1000) * 1000};
	c->ev_beat = event_new(c->base, -1, EV_PERSIST, on_beat, c);
	if (!c->ev_beat || event_add(c->ev_beat, &tv) < 0)
		return -ENOMEM;
	on_beat(-1, 0, c);
	int r = cluster_beat_start(c); /* the first beat now */
	if (r < 0)
		return r;
	if (c->watch_nodes) {
		r = -pthread_create(&c->watcher, NULL, watcher_main, c);
		if (r < 0)
			return log_error_errno(r, "cluster: watcher thread: %m");
		c->watcher_started = true;
	}
	return 0;
}

void
cluster_nodes_stop(Cluster *c)
{
	atomic_store(&c->watch_stop, true);
	if (c->ev_beat)
		event_free(c->ev_beat);
	c->ev_beat = NULL;
	while (c->nodes) {
		NodeSeen *n = c->nodes;
		c->nodes = n->next;
		free(n->info);
		free(n);
	}
}

void
cluster_foreach_node(Cluster *c, ClusterNodeFn fn, void *userdata)
{
	for (NodeSeen *n = c->nodes; n; n = n->next)
		if (n->alive)
			fn(c, n->name, n->info ? n->info : "", userdata);
}

uint64_t
cluster_node_revision(Cluster *c, const char *node)
{
	NodeSeen *n = node_find(c, node, false);
	return n ? n->rev : 0;
}

/* ---- listing a bucket (worker) ---- */

typedef struct ListJob {
	Job job;
	ClusterBucket bucket;
	int r;
	ClusterKv *kv;
	size_t n, cap;
	ClusterListFn cb;
	void *userdata;
} ListJob;

static int
list_add(ListJob *j, const char *key, const void *value, size_t vl, uint64_t revision)
{
	if (ARRAY_GROW(j->kv, j->n, j->cap, 32) < 0)
		return -ENOMEM;
	size_t kl = strlen(key) + 1;
	char *b = malloc(vl + 1 + kl); /* value, NUL, key: one block */
	if (!b)
		return -ENOMEM;
	memcpy(b, value, vl);
	b[vl] = 0;
	memcpy(b + vl + 1, key, kl);
	j->kv[j->n++] = (ClusterKv){b + vl + 1, b, vl, revision};
	return 0;
}

/* Not through a watcher: its ordered consumer is an ephemeral consumer that
 * nats-server 2.9 may place on a server that is down (seen after a kill -9 of
 * one of three: the watch then times out, again and again). The bucket's
 * stream lists its subjects (stream info with a subject filter), and each
 * key's last message is read at the stream's leader: no consumer, only the
 * stream's own Raft group, which a majority keeps. */
static void
list_exec(Cluster *c, Job *job)
{
	ListJob *j = (ListJob *)job;
	const char *bucket = j->bucket == CLUSTER_THREADS ? CLUSTER_BUCKET_THREADS
			     : j->bucket == CLUSTER_NODES ? CLUSTER_BUCKET_NODES
							  : CLUSTER_BUCKET_RUNS;
	char stream[64], filter[64];
	jsOptions o;
	jsStreamInfo *si = NULL;
	jsErrCode code = 0;

	snprintf(stream, sizeof(stream), "KV_%s", bucket);
	snprintf(filter, sizeof(filter), "$KV.%s.>", bucket);
	size_t pl = strlen(filter) - 1; /* "$KV.<bucket>." */
	jsOptions_Init(&o);
	o.Stream.Info.SubjectsFilter = filter;
	natsStatus s = js_GetStreamInfo(&si, c->js, stream, &o, &code);
	if (s != NATS_OK) {
		j->r = cluster_errno(s, code, "list bucket");
		return;
	}
	jsStreamStateSubjects *subj = si->State.Subjects;
	for (int i = 0; subj && i < subj->Count && j->r == 0; i++) {
		const char *subject = subj->List[i].Subject;
		natsMsg *m = NULL;
		const char *op = NULL;
		if (!subject || strlen(subject) <= pl)
			continue;
		code = 0;
		s = js_GetLastMsg(&m, c->js, stream, subject, NULL, &code);
		if (s == NATS_NOT_FOUND || code == JSNoMessageFoundErr)
			continue; /* gone since (a heartbeat key expired) */
		if (s != NATS_OK) {
			j->r = cluster_errno(s, code, "list bucket");
			break;
		}
		/* a delete or purge marker: the key is gone */
		if (natsMsgHeader_Get(m, "KV-Operation", &op) != NATS_OK || !op) {
			int len = natsMsg_GetDataLength(m);
			j->r = list_add(j, subject + pl, natsMsg_GetData(m),
					len > 0 ? (size_t)len : 0, natsMsg_GetSequence(m));
		}
		natsMsg_Destroy(m);
	}
	jsStreamInfo_Destroy(si);
}

static void
list_done(Cluster *c, Job *job)
{
	ListJob *j = (ListJob *)job;
	if (!c->closing)
		j->cb(c, j->r, j->kv, j->r < 0 ? 0 : j->n, j->userdata);
	for (size_t i = 0; i < j->n; i++)
		free((void *)j->kv[i].value);
	free(j->kv);
	free(j);
}

int
cluster_list(Cluster *c, ClusterBucket bucket, ClusterListFn cb, void *userdata)
{
	if (!cb || bucket < CLUSTER_THREADS || bucket > CLUSTER_RUNS)
		return -EINVAL;
	if (!c->kv_runs)
		return -ENOTCONN;
	ListJob *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->job.exec = list_exec;
	j->job.done = list_done;
	j->bucket = bucket;
	j->cb = cb;
	j->userdata = userdata;
	cluster_submit(c, &j->job);
	return 0;
}
