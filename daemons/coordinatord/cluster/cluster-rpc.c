/* SPDX-License-Identifier: MIT */
/*
 * cluster-rpc.c — request/reply between nodes over core NATS: a node serves
 * rw.node.<node>.rpc (cluster_serve), others send it requests
 * (cluster_request) and get the reply on their own inbox. See cluster.h.
 *
 * Both subscriptions are plain core-NATS subscriptions, made on the loop
 * thread (natsConnection_Subscribe only queues a SUB: it waits for nothing).
 * libnats delivers their messages on its own threads: each becomes a job
 * posted to the loop through the mailbox (as watch entries are), carrying
 * copies only. The replies' inbox is one wildcard subscription
 * (<inbox>.*), each request's reply subject <inbox>.<id>; the loop finds the
 * request by id, so a reply after a timeout or a cancel finds none and is
 * dropped. Timeouts are loop timers.
 */
#include "config.h"

#include <errno.h>
#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster-internal.h"
#include "log.h"
#include "macro.h"

#define DEADLINE_HEADER "Rw-Deadline"

struct ClusterRpc {
	int64_t deadline_ms; /* epoch ms; 0 = none given */
	char reply[];
};

struct ClusterRequest {
	ClusterRequest *next; /* c->requests */
	Cluster *c;
	uint64_t id;
	struct event *timer;
	ClusterReplyFn cb;
	void *userdata;
};

/* The closure of both subscriptions: never the Cluster (see Mailbox). */
typedef struct RpcCtx {
	Mailbox *mb;
	size_t prefix_len; /* inbox: strlen("<inbox>.") */
} RpcCtx;

typedef struct InJob {
	Job job;
	int64_t deadline_ms;
	size_t len;
	char *reply; /* points into buf */
	char buf[];  /* data, then the reply subject */
} InJob;

typedef struct ReplyJob {
	Job job;
	uint64_t id;
	int err;
	size_t len;
	char data[];
} ReplyJob;

static void
on_sub_complete(void *closure)
{
	free(closure);
}

/* ---- serving ---- */

static void
in_done(Cluster *c, Job *job)
{
	InJob *j = (InJob *)job;
	if (!c->closing && c->rpc_fn) {
		if (j->deadline_ms > 0 && now_epoch_ms() > j->deadline_ms) {
			log_debug("cluster: a request past its deadline dropped (the requester "
				  "gave up)");
		} else {
			size_t rl = strlen(j->reply) + 1;
			ClusterRpc *req = malloc(sizeof(*req) + rl);
			if (req) {
				req->deadline_ms = j->deadline_ms;
				memcpy(req->reply, j->reply, rl);
				c->rpc_fn(c, req, j->buf, j->len, c->rpc_ud);
			}
		}
	}
	free(j);
}

/* libnats delivery thread */
static void
on_request(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *closure)
{
	RpcCtx *ctx = closure;
	const char *reply = natsMsg_GetReply(m);
	int len = natsMsg_GetDataLength(m);
	if (!reply || !*reply || len < 0 || (size_t)len > CLUSTER_RPC_MAX) {
		natsMsg_Destroy(m);
		return; /* nobody to answer, or too big */
	}
	size_t rl = strlen(reply) + 1;
	InJob *j = calloc(1, sizeof(*j) + (size_t)len + rl);
	if (j) {
		const char *v = NULL;
		j->job.done = in_done;
		j->len = (size_t)len;
		memcpy(j->buf, natsMsg_GetData(m), (size_t)len);
		j->reply = j->buf + len;
		memcpy(j->reply, reply, rl);
		if (natsMsgHeader_Get(m, DEADLINE_HEADER, &v) == NATS_OK && v)
			j->deadline_ms = strtoll(v, NULL, 10);
		mailbox_post(ctx->mb, &j->job);
	}
	natsMsg_Destroy(m);
}

static int
subscribe(Cluster *c, natsSubscription **sub, const char *subject, natsMsgHandler h,
	  size_t prefix_len)
{
	RpcCtx *ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->mb = c->mb;
	ctx->prefix_len = prefix_len;
	natsStatus s = natsConnection_Subscribe(sub, c->nc, subject, h, ctx);
	if (s == NATS_OK)
		s = natsSubscription_SetOnCompleteCB(*sub, on_sub_complete, ctx);
	if (s != NATS_OK) {
		if (*sub) {
			natsSubscription_Destroy(*sub);
			*sub = NULL;
		} else
			free(ctx);
		return cluster_errno(s, 0, "subscribe");
	}
	return 0;
}

int
cluster_serve(Cluster *c, ClusterServeFn fn, void *userdata)
{
	char subject[sizeof(CLUSTER_RPC_PREFIX) + CLUSTER_NODE_MAX + sizeof(CLUSTER_RPC_SUFFIX)];
	if (!fn)
		return -EINVAL;
	if (c->rpc_serve_sub)
		return -EALREADY;
	snprintf(subject, sizeof(subject), "%s%s%s", CLUSTER_RPC_PREFIX, c->node,
		 CLUSTER_RPC_SUFFIX);
	c->rpc_fn = fn;
	c->rpc_ud = userdata;
	int r = subscribe(c, &c->rpc_serve_sub, subject, on_request, 0);
	if (r < 0)
		c->rpc_fn = NULL;
	return r;
}

int
cluster_rpc_respond(Cluster *c, ClusterRpc *req, const void *data, size_t len)
{
	int r = 0;
	if (!req)
		return -EINVAL;
	if (len > CLUSTER_RPC_MAX)
		r = -EMSGSIZE;
	else if (c->closing)
		r = -ENOTCONN;
	else {
		natsStatus s = natsConnection_Publish(c->nc, req->reply, data, (int)len);
		if (s != NATS_OK)
			r = cluster_errno(s, 0, "reply");
	}
	free(req);
	return r;
}

ClusterRpc *
cluster_rpc_free(ClusterRpc *req)
{
	free(req);
	return NULL;
}

int64_t
cluster_rpc_remaining_ms(const ClusterRpc *req)
{
	if (!req || req->deadline_ms <= 0)
		return 0;
	int64_t left = req->deadline_ms - now_epoch_ms();
	return left > 0 ? left : 0;
}

/* ---- requesting ---- */

static ClusterRequest *
request_take(Cluster *c, uint64_t id)
{
	for (ClusterRequest **p = &c->requests; *p; p = &(*p)->next)
		if ((*p)->id == id) {
			ClusterRequest *r = *p;
			*p = r->next;
			return r;
		}
	return NULL;
}

static void
request_release(ClusterRequest *r)
{
	if (r->timer)
		event_free(r->timer);
	free(r);
}

static void
reply_done(Cluster *c, Job *job)
{
	ReplyJob *j = (ReplyJob *)job;
	ClusterRequest *r = c->closing ? NULL : request_take(c, j->id);
	if (r) {
		ClusterReplyFn cb = r->cb;
		void *ud = r->userdata;
		request_release(r);
		cb(c, j->err, j->err < 0 ? NULL : j->data, j->err < 0 ? 0 : j->len, ud);
	}
	free(j);
}

/* libnats delivery thread: a reply on <inbox>.<id> */
static void
on_reply(natsConnection *nc, natsSubscription *sub, natsMsg *m, void *closure)
{
	RpcCtx *ctx = closure;
	const char *subj = natsMsg_GetSubject(m);
	int len = natsMsg_GetDataLength(m);
	char *end;
	if (!subj || strlen(subj) <= ctx->prefix_len || len < 0) {
		natsMsg_Destroy(m);
		return;
	}
	uint64_t id = strtoull(subj + ctx->prefix_len, &end, 10);
	bool none = natsMsg_IsNoResponders(m);
	ReplyJob *j = *end ? NULL : calloc(1, sizeof(*j) + (none ? 0 : (size_t)len));
	if (j) {
		j->job.done = reply_done;
		j->id = id;
		if (none)
			j->err = -EHOSTUNREACH;
		else {
			j->len = (size_t)len;
			memcpy(j->data, natsMsg_GetData(m), (size_t)len);
		}
		mailbox_post(ctx->mb, &j->job);
	}
	natsMsg_Destroy(m);
}

static void
request_timeout(evutil_socket_t fd, short what, void *arg)
{
	ClusterRequest *r = arg;
	Cluster *c = r->c;
	if (request_take(c, r->id) != r)
		return;
	ClusterReplyFn cb = r->cb;
	void *ud = r->userdata;
	request_release(r);
	cb(c, -ETIMEDOUT, NULL, 0, ud);
}

static int
inbox_ensure(Cluster *c)
{
	if (c->rpc_inbox_sub)
		return 0;
	natsInbox *inbox = NULL;
	if (natsInbox_Create(&inbox) != NATS_OK)
		return -ENOMEM;
	snprintf(c->rpc_inbox, sizeof(c->rpc_inbox), "%s", (const char *)inbox);
	natsInbox_Destroy(inbox);
	char subject[sizeof(c->rpc_inbox) + 3];
	snprintf(subject, sizeof(subject), "%s.*", c->rpc_inbox);
	return subscribe(c, &c->rpc_inbox_sub, subject, on_reply, strlen(c->rpc_inbox) + 1);
}

int
cluster_request(Cluster *c, const char *node, const void *data, size_t len, int64_t timeout_ms,
		ClusterReplyFn cb, void *userdata, ClusterRequest **ret)
{
	char subject[sizeof(CLUSTER_RPC_PREFIX) + CLUSTER_NODE_MAX + sizeof(CLUSTER_RPC_SUFFIX)];
	char reply[sizeof(c->rpc_inbox) + 24], deadline[24];
	natsMsg *m = NULL;

	if (!cluster_valid_token(node, CLUSTER_NODE_MAX - 1) || !cb || timeout_ms <= 0)
		return -EINVAL;
	if (c->closing || !c->nc)
		return -ENOTCONN;
	if (len > cluster_rpc_max(c))
		return -EMSGSIZE;
	int r = inbox_ensure(c);
	if (r < 0)
		return r;
	ClusterRequest *q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->c = c;
	q->id = ++c->next_request_id;
	q->cb = cb;
	q->userdata = userdata;
	q->timer = evtimer_new(c->base, request_timeout, q);
	if (!q->timer) {
		free(q);
		return -ENOMEM;
	}
	snprintf(subject, sizeof(subject), "%s%s%s", CLUSTER_RPC_PREFIX, node, CLUSTER_RPC_SUFFIX);
	snprintf(reply, sizeof(reply), "%s.%" PRIu64, c->rpc_inbox, q->id);
	snprintf(deadline, sizeof(deadline), "%" PRId64, now_epoch_ms() + timeout_ms);
	natsStatus s = natsMsg_Create(&m, subject, reply, data, (int)len);
	if (s == NATS_OK)
		s = natsMsgHeader_Set(m, DEADLINE_HEADER, deadline);
	if (s == NATS_OK)
		s = natsConnection_PublishMsg(c->nc, m);
	natsMsg_Destroy(m);
	if (s != NATS_OK) {
		request_release(q);
		return cluster_errno(s, 0, "request");
	}
	struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
	evtimer_add(q->timer, &tv);
	q->next = c->requests;
	c->requests = q;
	if (ret)
		*ret = q;
	return 0;
}

size_t
cluster_rpc_max(Cluster *c)
{
	int64_t m = c->nc ? natsConnection_GetMaxPayload(c->nc) : 0;
	/* a little room for the headers of the request */
	if (m <= 1024)
		return CLUSTER_RPC_MAX;
	return MIN((size_t)m - 512, (size_t)CLUSTER_RPC_MAX);
}

ClusterRequest *
cluster_request_cancel(ClusterRequest *r)
{
	if (!r)
		return NULL;
	if (request_take(r->c, r->id) == r)
		request_release(r);
	return NULL;
}

void
cluster_rpc_free_all(Cluster *c)
{
	while (c->requests) {
		ClusterRequest *r = c->requests;
		c->requests = r->next;
		request_release(r);
	}
	/* the closed connection ended them; on_sub_complete frees their ctx */
	natsSubscription_Destroy(c->rpc_serve_sub);
	natsSubscription_Destroy(c->rpc_inbox_sub);
	c->rpc_serve_sub = c->rpc_inbox_sub = NULL;
}
