/* SPDX-License-Identifier: MIT */
/*
 * cluster-publish.c — cluster_publish_events(): a run's events into RW_RUNS,
 * as few messages as the server's maximum payload allows (cluster-msg.c),
 * de-duplicated by Msg-Id and fenced by the expected last subject sequence
 * (cluster.h).
 *
 * A batch (ClusterPub) has one message in flight at a time: the expected
 * sequence of message k+1 is the stream sequence JetStream gives message k.
 * Each message carries the tag of its batch's slot (header Rw-Tag); the
 * acknowledgement, delivered on a libnats thread, is posted to the loop with
 * that tag, and the loop finds the batch by it (a late acknowledgement of a
 * batch that moved on, or ended, finds another tag and is dropped). A message
 * not acknowledged in CLUSTER_ACK_WAIT_MS is sent again, unchanged (the same
 * events: its size is fixed when it is first sent): if the first copy was
 * stored, the stream answers "duplicate" with its sequence.
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
#include "time-util.h"

#define TICK_MS 100
#define RETRY_MS 250
#define ORPHAN_PURGE_MS 5000
#define RUN_ID_MAX 128
#define HDR_TAG "Rw-Tag"
/* room left in a message for its headers */
#define MSG_HEADROOM 2048
#define HDR_WRITER "Rw-Writer"

struct ClusterPub {
	ClusterPub *prev, *next; /* c's list of batches in flight */
	char run_id[RUN_ID_MAX + 1];
	char subject[sizeof(CLUSTER_SUBJECT_PREFIX) + RUN_ID_MAX];
	uint64_t first_seq;
	size_t n, i, m; /* events; the first of the message in flight, and how many */
	ClusterEvent *ev;
	uint64_t expected; /* expected last subject sequence of event i */
	uint64_t tag;
	usec_t sent_at, retry_at, deadline;
	size_t n_dup;
	ClusterPublishFn cb;
	void *userdata;
};

typedef struct AckJob {
	Job job;
	uint64_t tag;
	natsStatus status;
	jsErrCode code;
	uint64_t seq;
	bool dup;
	bool confirmed; /* a duplicate's sequence read back at the leader */
} AckJob;

static ClusterPub **
slot_of(Cluster *c, uint64_t tag)
{
	return &c->slots[tag % CLUSTER_MAX_INFLIGHT];
}

/* A free slot for p (there is one: n_inflight < CLUSTER_MAX_INFLIGHT). */
static void
take_tag(Cluster *c, ClusterPub *p)
{
	if (p->tag && *slot_of(c, p->tag) == p)
		*slot_of(c, p->tag) = NULL;
	while (*slot_of(c, ++c->next_tag))
		;
	p->tag = c->next_tag;
	*slot_of(c, p->tag) = p;
}

static int
send_one(Cluster *c, ClusterPub *p)
{
	natsMsg *m = NULL;
	char id[RUN_ID_MAX + 48], exp[24], seq[24], tag[24], count[24];
	uint64_t s = p->first_seq + p->i;
	natsStatus st;
	char *packed = NULL;
	const void *data = p->ev[p->i].data;
	size_t len = p->ev[p->i].len;

	if (p->m == 0) { /* a new message: as many events as fit */
		int64_t max = natsConnection_GetMaxPayload(c->nc);
		size_t room = max > 2 * MSG_HEADROOM ? (size_t)max - MSG_HEADROOM : MSG_HEADROOM;
		p->m = cluster_msg_fit(p->ev + p->i, p->n - p->i, room);
	}
	if (p->m > 1 && cluster_msg_pack(p->ev + p->i, p->m, &packed, &len) < 0) {
		p->sent_at = now_usec();
		p->retry_at = p->sent_at + RETRY_MS * USEC_PER_MSEC;
		return -ENOMEM;
	}
	if (packed)
		data = packed;
	if (p->m > 1)
		snprintf(id, sizeof(id), "%s/%" PRIu64 "-%" PRIu64, p->run_id, s, s + p->m - 1);
	else
		snprintf(id, sizeof(id), "%s/%" PRIu64, p->run_id, s);
	snprintf(exp, sizeof(exp), "%" PRIu64, p->expected);
	snprintf(seq, sizeof(seq), "%" PRIu64, s);
	snprintf(tag, sizeof(tag), "%" PRIu64, p->tag);
	snprintf(count, sizeof(count), "%zu", p->m);
	st = natsMsg_Create(&m, p->subject, NULL, data, (int)len);
	free(packed);
	if (st == NATS_OK)
		st = natsMsgHeader_Set(m, "Nats-Msg-Id", id);
	if (st == NATS_OK)
		st = natsMsgHeader_Set(m, "Nats-Expected-Last-Subject-Sequence", exp);
	if (st == NATS_OK)
		st = natsMsgHeader_Set(m, p->m > 1 ? CLUSTER_HDR_FIRST : CLUSTER_HDR_SEQ, seq);
	if (st == NATS_OK && p->m > 1)
		st = natsMsgHeader_Set(m, CLUSTER_HDR_COUNT, count);
	if (st == NATS_OK)
		st = natsMsgHeader_Set(m, HDR_TAG, tag);
	if (st == NATS_OK)
		st = natsMsgHeader_Set(m, HDR_WRITER, c->writer);
	if (st == NATS_OK)
		st = js_PublishMsgAsync(c->js, &m, NULL);
	c->published_async = true;
	natsMsg_Destroy(m); /* NULL when the library took it */
	p->sent_at = now_usec();
	if (st != NATS_OK) {
		/* stalled (too many acknowledgements pending) or reconnect buffer
		 * full: try again on a later tick, without blocking the loop */
		p->retry_at = p->sent_at + RETRY_MS * USEC_PER_MSEC;
		return -EAGAIN;
	}
	p->retry_at = 0;
	return 0;
}

static void
finish(Cluster *c, ClusterPub *p, int err)
{
	ClusterPublishResult res = {
	    .err = err, .n_done = p->i, .n_dup = p->n_dup, .last_stream_seq = p->expected};
	if (*slot_of(c, p->tag) == p)
		*slot_of(c, p->tag) = NULL;
	if (p->prev)
		p->prev->next = p->next;
	else
		c->pubs = p->next;
	if (p->next)
		p->next->prev = p->prev;
	c->n_inflight--;
	if (!c->closing && p->cb)
		p->cb(c, &res, p->userdata);
	free(p);
}

static bool
transient(const AckJob *a)
{
	/* no stream leader yet (an election after a server loss), no answer, or
	 * the request went out on a connection that broke */
	return a->status == NATS_NO_RESPONDERS || a->status == NATS_TIMEOUT ||
	       a->status == NATS_CONNECTION_DISCONNECTED || a->code == JSClusterNotAvailErr ||
	       a->code == JSClusterNoPeersErr || a->code == JSStreamOfflineErr;
}

/* A refusal for a wrong last sequence is fencing, or the refusal of a copy:
 * when the acknowledgement of the first copy was lost and the message was
 * sent again with the same expectation, the stream (clustered) checks the
 * expectation before the Msg-Id. The run's last message tells: it is ours
 * when it has our seq and our writer id. Read at the stream's leader (not a
 * direct get, which a lagging replica may answer). */
typedef struct VerifyJob {
	AckJob ack;
	char subject[sizeof(CLUSTER_SUBJECT_PREFIX) + RUN_ID_MAX];
	uint64_t seq, count; /* the message's first event and how many */
	uint64_t stream_seq; /* a duplicate's: read there; 0: the subject's last */
	uint64_t after;	     /* the stream sequence the message was fenced on */
} VerifyJob;

/* Message m against the one v verifies: 2 ours (its subject, first seq,
 * count, and our writer id), 1 another writer's at our seq (*writer), 0
 * neither (*first its first seq when it is a message of ours subject). */
static int
msg_verdict(Cluster *c, const VerifyJob *v, natsMsg *m, uint64_t *first, const char **writer)
{
	const char *subject = natsMsg_GetSubject(m);
	uint64_t count = 0;
	*writer = NULL;
	if (!subject || strcmp(subject, v->subject) != 0 ||
	    cluster_msg_span(m, first, &count) < 0 || *first != v->seq ||
	    natsMsgHeader_Get(m, HDR_WRITER, writer) != NATS_OK || !*writer)
		return 0;
	return count == v->count && strcmp(*writer, c->writer) == 0 ? 2 : 1;
}

/* The run's message right after stream sequence after (a direct get: a
 * replica may lag, never invent): is it ours? 1 ours (*sseq its stream
 * sequence), 0 not, -EAGAIN none (yet), or an error. */
static int
ours_after(Cluster *c, const VerifyJob *v, uint64_t *sseq)
{
	jsDirectGetMsgOptions o;
	natsMsg *m = NULL;
	const char *writer;
	uint64_t first = 0;
	jsDirectGetMsgOptions_Init(&o);
	o.Sequence = v->after + 1;
	o.NextBySubject = v->subject;
	natsStatus s = js_DirectGetMsg(&m, c->js, CLUSTER_STREAM, NULL, &o);
	if (s != NATS_OK)
		return s == NATS_NOT_FOUND ? -EAGAIN : cluster_errno(s, 0, "direct get");
	int r = msg_verdict(c, v, m, &first, &writer) == 2;
	*sseq = natsMsg_GetSequence(m);
	natsMsg_Destroy(m);
	return r;
}

/* v's message is in the stream at stream sequence seq: acknowledged. */
static void
confirmed(VerifyJob *v, uint64_t seq)
{
	v->ack.status = NATS_OK;
	v->ack.code = 0;
	v->ack.dup = v->ack.confirmed = true;
	v->ack.seq = seq;
}

static void ack_done(Cluster *c, Job *j);

static void
verify_exec(Cluster *c, Job *j)
{
	VerifyJob *v = (VerifyJob *)j;
	natsMsg *m = NULL;
	const char *writer = NULL;
	uint64_t first = 0;
	jsErrCode code = 0;
	natsStatus s = v->stream_seq
			   ? js_GetMsg(&m, c->js, CLUSTER_STREAM, v->stream_seq, NULL, &code)
			   : js_GetLastMsg(&m, c->js, CLUSTER_STREAM, v->subject, NULL, &code);
	int verdict = s == NATS_OK ? msg_verdict(c, v, m, &first, &writer) : 0;
	bool same = verdict > 0;
	if (verdict == 2) {
		confirmed(v, natsMsg_GetSequence(m)); /* ours: a duplicate */
	} else if (!v->stream_seq && s == NATS_OK && first > v->seq) {
		/* the run went on past our seq since (a writer that read ours as
		 * the last event, and wrote after it): the message at our seq
		 * tells whether ours is in (issue 35 F: appends refused
		 * not_owner that the stream held) */
		uint64_t sseq = 0;
		int r = ours_after(c, v, &sseq);
		if (r == 1)
			confirmed(v, sseq);
		else if (r < 0)
			v->ack.status = NATS_TIMEOUT; /* unknown yet: sent again */
	} else if (v->stream_seq && same) {
		/* A "duplicate" of another writer's message at our seq: the
		 * Msg-Id is the run's seq, and a server that checks it before
		 * the expected last sequence (nats-server 2.10) answers so where
		 * 2.9 refuses the expectation. Fenced (issue 35: acknowledged
		 * appends no replica held, tails shown a taker's seq). */
		log_notice("cluster: %s: seq %" PRIu64 " is another writer's (%s): fenced",
			   v->subject, v->seq, writer);
	} else if (!v->stream_seq && s != NATS_OK && s != NATS_NOT_FOUND &&
		   code != JSNoMessageFoundErr) {
		/* the read failed (no leader during an election, a timeout): no
		 * verdict — before, "not ours", and an append the stream held
		 * was refused not_owner (issue 35 F, the nemesis' flap) */
		v->ack.status = NATS_TIMEOUT;
	} else if (v->stream_seq) {
		/* a duplicate the stream does not hold (yet): not an
		 * acknowledgement; sent again, until the stream stores it,
		 * fences it, or the deadline */
		log_notice("cluster: %s: a duplicate acknowledgement (stream seq %" PRIu64
			   ") not confirmed at the leader; sent again",
			   v->subject, v->stream_seq);
		v->ack.status = NATS_TIMEOUT;
	}
	natsMsg_Destroy(m);
	v->ack.job.done = ack_done; /* refused still when not ours */
}

static bool
verify(Cluster *c, ClusterPub *p, const AckJob *a)
{
	VerifyJob *v = calloc(1, sizeof(*v));
	if (!v)
		return false;
	v->ack = *a;
	v->ack.code = 0; /* as it comes back: a refusal not to verify again */
	v->ack.status = NATS_ERR;
	if (a->status == NATS_OK && a->dup)
		v->stream_seq = a->seq; /* a duplicate: is it there? */
	v->ack.job.exec = verify_exec;
	v->ack.job.done = ack_done;
	snprintf(v->subject, sizeof(v->subject), "%s", p->subject);
	v->seq = p->first_seq + p->i;
	v->count = p->m;
	v->after = p->expected;
	p->retry_at = p->deadline; /* no resend meanwhile */
	cluster_submit(c, &v->ack.job);
	return true;
}

static void
ack_done(Cluster *c, Job *j)
{
	AckJob *a = (AckJob *)j;
	ClusterPub *p = c->closing ? NULL : *slot_of(c, a->tag);
	if (p && p->tag == a->tag) {
		if (a->code == JSStreamWrongLastSequenceErr && verify(c, p, a))
			;
		else if (a->status == NATS_OK && a->dup && !a->confirmed && verify(c, p, a))
			; /* a duplicate is checked at the leader before it counts */
		else if (a->status == NATS_OK) {
			p->n_dup += a->dup ? p->m : 0;
			p->expected = a->seq;
			p->i += p->m;
			p->m = 0;
			if (p->i == p->n)
				finish(c, p, 0);
			else {
				take_tag(c, p);
				(void)send_one(c, p);
			}
		} else if (transient(a))
			p->retry_at = now_usec() + RETRY_MS * USEC_PER_MSEC;
		else if (a->code == 0 && a->status == NATS_ERR && a->job.exec)
			finish(c, p, -ESTALE); /* verified: not ours */
		else
			finish(c, p, cluster_errno(a->status, a->code, "publish"));
	}
	free(a);
}

/* libnats thread: hand the outcome to the loop. */
static void
on_ack(jsCtx *js, natsMsg *msg, jsPubAck *pa, jsPubAckErr *pae, void *closure)
{
	Mailbox *mb = closure; /* not the Cluster: see Mailbox */
	const char *tag = NULL;
	AckJob *a = calloc(1, sizeof(*a));
	if (a && natsMsgHeader_Get(msg, HDR_TAG, &tag) == NATS_OK && tag) {
		a->job.done = ack_done;
		a->tag = strtoull(tag, NULL, 10);
		if (pa) {
			a->seq = pa->Sequence;
			a->dup = pa->Duplicate;
		} else {
			a->status = pae ? pae->Err : NATS_ERR;
			a->code = pae ? pae->ErrCode : 0;
			if (a->status == NATS_OK)
				a->status = NATS_ERR;
		}
		mailbox_post(mb, &a->job);
	} else
		free(a); /* the tick resends it */
	natsMsg_Destroy(msg);
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
	Cluster *c = arg;
	usec_t now = now_usec();
	ClusterPub *next;
	for (ClusterPub *p = c->pubs; p; p = next) {
		next = p->next;
		if (now >= p->deadline)
			finish(c, p, -ETIMEDOUT);
		else if (p->retry_at && now >= p->retry_at)
			(void)send_one(c, p);
		else if (!p->retry_at && now - p->sent_at >= CLUSTER_ACK_WAIT_MS * USEC_PER_MSEC) {
			/* its acknowledgement is lost, and libnats keeps the
			 * entry: purged below */
			c->orphans = true;
			(void)send_one(c, p);
		}
	}
	/* lost acknowledgements without a reconnection (a stream leader that died
	 * with the request): the same purge, at most every ORPHAN_PURGE_MS */
	if (c->orphans && now - c->orphans_purged >= ORPHAN_PURGE_MS * USEC_PER_MSEC) {
		cluster_publish_reconnected(c);
		c->orphans = false;
		c->orphans_purged = now;
	}
}

int
cluster_publish_setup(Cluster *c, jsOptions *jo)
{
	static const struct timeval tick = {0, TICK_MS * 1000};
	c->slots = calloc(CLUSTER_MAX_INFLIGHT, sizeof(*c->slots));
	c->ev_tick = event_new(c->base, -1, EV_PERSIST, on_tick, c);
	if (!c->slots || !c->ev_tick || event_add(c->ev_tick, &tick) < 0)
		return -ENOMEM;
	jo->PublishAsync.AckHandler = on_ack;
	jo->PublishAsync.AckHandlerClosure = c->mb;
	jo->PublishAsync.MaxPending = 2 * CLUSTER_MAX_INFLIGHT;
	jo->PublishAsync.StallWait = 1; /* never stall the loop: the tick retries */
	return 0;
}

/* The acknowledgements of publishes sent on the old connection are lost with
 * it, but libnats keeps their entries in its window of pending publishes
 * (it has no timeout for them): left there, they would fill it for good
 * after enough failovers. Drop them all and resend every message in flight
 * now (resending is safe: Msg-Id, and the writer's own copy is recognised);
 * the acknowledgements of the dropped entries that still come are not
 * reported by libnats, the resends' are. */
void
cluster_publish_reconnected(Cluster *c)
{
	natsMsgList pending = {0};
	if (c->published_async && js_PublishAsyncGetPendingList(&pending, c->js) == NATS_OK)
		natsMsgList_Destroy(&pending);
	usec_t now = now_usec();
	for (ClusterPub *p = c->pubs; p; p = p->next)
		if (!p->retry_at || p->retry_at < p->deadline) /* not while verifying */
			p->retry_at = now;
}

void
cluster_publish_free_all(Cluster *c)
{
	while (c->pubs)
		finish(c, c->pubs, -ECANCELED); /* c->closing: no callback */
	if (c->ev_tick)
		event_free(c->ev_tick);
	c->ev_tick = NULL;
	free(c->slots);
	c->slots = NULL;
}

int
cluster_publish_events(Cluster *c, const char *run_id, uint64_t first_seq,
		       const ClusterEvent *events, size_t n, uint64_t expected_last_subject_seq,
		       ClusterPublishFn cb, void *userdata)
{
	ClusterState st = cluster_state(c);
	size_t bytes = 0;

	if (!cluster_valid_token(run_id, RUN_ID_MAX) || n == 0)
		return -EINVAL;
	if (st != CLUSTER_READY && st != CLUSTER_DISCONNECTED)
		return -ENOTCONN;
	if (c->n_inflight >= CLUSTER_MAX_INFLIGHT)
		return -EAGAIN;
	for (size_t k = 0; k < n; k++)
		bytes += events[k].len;
	/* the batch, its event table and the bytes in one block */
	ClusterPub *p = calloc(1, sizeof(*p) + n * sizeof(ClusterEvent) + bytes);
	if (!p)
		return -ENOMEM;
	p->ev = (ClusterEvent *)(p + 1);
	char *data = (char *)(p->ev + n);
	for (size_t k = 0; k < n; k++) {
		memcpy(data, events[k].data, events[k].len);
		p->ev[k] = (ClusterEvent){data, events[k].len};
		data += events[k].len;
	}
	snprintf(p->run_id, sizeof(p->run_id), "%s", run_id);
	snprintf(p->subject, sizeof(p->subject), "%s%s", CLUSTER_SUBJECT_PREFIX, run_id);
	p->first_seq = first_seq;
	p->n = n;
	p->expected = expected_last_subject_seq;
	p->deadline = now_usec() + CLUSTER_PUBLISH_DEADLINE_MS * USEC_PER_MSEC;
	p->cb = cb;
	p->userdata = userdata;
	p->next = c->pubs;
	if (c->pubs)
		c->pubs->prev = p;
	c->pubs = p;
	c->n_inflight++;
	take_tag(c, p);
	(void)send_one(c, p); /* a failure is retried by the tick */
	return 0;
}

void
cluster_flush(Cluster *c)
{
	/* what the write event of the libevent adapter would do on the loop's
	 * next turn, on the same thread, now */
	if (c->nc && natsConnection_Buffered(c->nc) > 0)
		natsConnection_ProcessWriteEvent(c->nc);
}
