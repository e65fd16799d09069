/* SPDX-License-Identifier: MIT */
/*
 * cluster-watch.c — cluster_watch_run(): a run's events live, through an
 * ordered push consumer of RW_RUNS filtered on rw.run.<runId>. See cluster.h.
 *
 * Three owners: the ClusterWatch (the caller's, on the loop), the SubCtx (the
 * subscription's closure, read by libnats' delivery thread: the Cluster and
 * mailbox and the watch's id, never the watch), and the jobs. A delivered message becomes
 * a job posted to the loop carrying the watch's id; the loop finds the watch
 * by id in c->watches, so a message that arrives after cluster_watch_free()
 * finds none and is dropped. The consumer is created and deleted on the
 * worker (both are blocking JetStream requests); the SubCtx is freed by the
 * subscription's on-complete callback, after its last message was handed
 * over.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster-internal.h"
#include "log.h"
#include "macro.h"

typedef struct SubCtx {
	Mailbox *mb; /* not the Cluster: see Mailbox */
	uint64_t id;
	char subject[sizeof(CLUSTER_SUBJECT_PREFIX) + 128];
	uint64_t start_stream_seq;
	natsSubscription *sub; /* worker thread only */
} SubCtx;

struct ClusterWatch {
	ClusterWatch *next; /* c->watches */
	Cluster *c;
	uint64_t id;
	uint64_t next_seq;
	bool dead;
	SubCtx *ctx; /* NULL once handed to the unsubscribe job */
	ClusterWatchFn cb;
	void *userdata;
};

/* One message's events (cluster-msg.c). */
typedef struct EventJob {
	Job job;
	uint64_t id;
	int err;
	size_t n;
	ClusterReadEvent *ev; /* n, pointing into data */
	char data[];
} EventJob;

typedef struct SubJob {
	Job job;
	SubCtx *ctx;
	bool subscribe; /* else unsubscribe */
	int r;
} SubJob;

static ClusterWatch *
watch_find(Cluster *c, uint64_t id)
{
	for (ClusterWatch *w = c->watches; w; w = w->next)
		if (w->id == id)
			return w;
	return NULL;
}

static void
watch_end(Cluster *c, ClusterWatch *w, int err)
{
	if (w->dead)
		return;
	w->dead = true;
	w->cb(c, w, err, NULL, 0, w->userdata);
}

static void
event_done(Cluster *c, Job *job)
{
	EventJob *e = (EventJob *)job;
	ClusterWatch *w = c->closing ? NULL : watch_find(c, e->id);
	size_t k = 0;
	if (w && !w->dead && e->err < 0)
		watch_end(c, w, e->err);
	else if (w && !w->dead) {
		/* before from_seq, or a copy: skipped */
		while (k < e->n && e->ev[k].seq < w->next_seq)
			k++;
		if (k < e->n && e->ev[k].seq > w->next_seq)
			watch_end(c, w, -EPROTO); /* the run's log never has gaps */
		else if (k < e->n) {
			w->next_seq = e->ev[e->n - 1].seq + 1;
			w->cb(c, w, 0, e->ev + k, e->n - k, w->userdata);
		}
	}
	free(e);
}

/* libnats delivery thread */
static void
on_msg(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *closure)
{
	SubCtx *ctx = closure;
	int len = natsMsg_GetDataLength(m);
	size_t dl = len > 0 ? (size_t)len : 0;
	uint64_t first = 0, sseq = 0;
	ClusterEvent *ev = NULL;
	size_t n = 0;
	jsMsgMetaData *meta = NULL;
	int r = cluster_msg_events(m, &first, &ev, &n);
	if (natsMsg_GetMetaData(&meta, m) == NATS_OK) {
		sseq = meta->Sequence.Stream;
		jsMsgMetaData_Destroy(meta);
	}
	/* the job, its events and the payload in one block */
	EventJob *e = calloc(1, sizeof(*e) + n * sizeof(ClusterReadEvent) + dl);
	if (e) {
		e->job.done = event_done;
		e->id = ctx->id;
		e->err = r == -ENOMEM ? -ENOMEM : r < 0 ? -EBADMSG : 0;
		e->n = n;
		e->ev = (ClusterReadEvent *)(void *)e->data;
		char *data = e->data + n * sizeof(ClusterReadEvent);
		const char *base = natsMsg_GetData(m);
		if (dl)
			memcpy(data, base, dl);
		for (size_t k = 0; k < n; k++)
			e->ev[k] = (ClusterReadEvent){first + k, sseq,
						      data + ((const char *)ev[k].data - base),
						      ev[k].len, NULL};
		mailbox_post(ctx->mb, &e->job);
	}
	free(ev);
	natsMsg_Destroy(m);
}

static void
on_complete(void *closure)
{
	free(closure); /* the SubCtx: no message will use it any more */
}

static void
sub_exec(Cluster *c, Job *job)
{
	SubJob *j = (SubJob *)job;
	SubCtx *ctx = j->ctx;
	if (!j->subscribe) {
		natsSubscription *sub = ctx->sub;
		if (sub) {
			/* on_complete frees ctx, on another thread, from here on */
			(void)natsSubscription_Unsubscribe(sub);
			natsSubscription_Destroy(sub);
		} else
			free(ctx);
		j->ctx = NULL;
		return;
	}
	jsSubOptions so;
	jsErrCode code = 0;
	jsSubOptions_Init(&so);
	so.Stream = CLUSTER_STREAM;
	so.Ordered = true;
	if (ctx->start_stream_seq > 1) {
		so.Config.DeliverPolicy = js_DeliverByStartSequence;
		so.Config.OptStartSeq = ctx->start_stream_seq;
	}
	natsStatus s = js_Subscribe(&ctx->sub, c->js, ctx->subject, on_msg, ctx, NULL, &so, &code);
	if (s == NATS_OK)
		s = natsSubscription_SetOnCompleteCB(ctx->sub, on_complete, ctx);
	if (s != NATS_OK && ctx->sub) {
		natsSubscription_Destroy(ctx->sub);
		ctx->sub = NULL;
	}
	j->r = cluster_errno(s, code, "watch subscribe");
}

static void
sub_done(Cluster *c, Job *job)
{
	SubJob *j = (SubJob *)job;
	if (j->subscribe && !c->closing && j->r < 0) {
		ClusterWatch *w = watch_find(c, j->ctx->id);
		if (w)
			watch_end(c, w, j->r);
	}
	free(j);
}

static int
sub_submit(Cluster *c, SubCtx *ctx, bool subscribe)
{
	SubJob *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->job.exec = sub_exec;
	j->job.done = sub_done;
	j->ctx = ctx;
	j->subscribe = subscribe;
	cluster_submit(c, &j->job);
	return 0;
}

int
cluster_watch_run(Cluster *c, const char *run_id, uint64_t from_seq, uint64_t start_stream_seq,
		  ClusterWatchFn cb, void *userdata, ClusterWatch **ret)
{
	if (!cluster_valid_token(run_id, 128) || !cb)
		return -EINVAL;
	if (!c->kv_runs)
		return -ENOTCONN;
	ClusterWatch *w = calloc(1, sizeof(*w));
	SubCtx *ctx = calloc(1, sizeof(*ctx));
	if (!w || !ctx) {
		free(w);
		free(ctx);
		return -ENOMEM;
	}
	w->c = c;
	ctx->mb = c->mb;
	w->id = ctx->id = ++c->next_watch_id;
	snprintf(ctx->subject, sizeof(ctx->subject), "%s%s", CLUSTER_SUBJECT_PREFIX, run_id);
	ctx->start_stream_seq = start_stream_seq;
	if (sub_submit(c, ctx, true) < 0) { /* ctx is the worker's from here */
		free(w);
		free(ctx);
		return -ENOMEM;
	}
	w->next_seq = from_seq;
	w->ctx = ctx;
	w->cb = cb;
	w->userdata = userdata;
	w->next = c->watches;
	c->watches = w;
	*ret = w;
	return 0;
}

ClusterWatch *
cluster_watch_free(ClusterWatch *w)
{
	if (!w)
		return NULL;
	Cluster *c = w->c;
	for (ClusterWatch **p = &c->watches; *p; p = &(*p)->next)
		if (*p == w) {
			*p = w->next;
			break;
		}
	if (w->ctx && sub_submit(c, w->ctx, false) < 0)
		log_warning("cluster: out of memory: a watch's consumer is left to expire");
	free(w);
	return NULL;
}

void
cluster_watch_free_all(Cluster *c)
{
	while (c->watches) {
		ClusterWatch *w = c->watches;
		c->watches = w->next;
		free(w);
	}
}
