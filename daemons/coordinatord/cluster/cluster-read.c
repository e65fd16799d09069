/* SPDX-License-Identifier: MIT */
/*
 * cluster-read.c — cluster_read_events(): a run's events back from RW_RUNS by
 * direct gets ("the next message of rw.run.<runId> at or after stream
 * sequence N"), on the read lane's worker thread. See cluster.h.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster-internal.h"
#include "log.h"
#include "macro.h"

typedef struct ReadJob {
	Job job;
	char subject[sizeof(CLUSTER_SUBJECT_PREFIX) + 128];
	uint64_t from_seq, next_stream_seq;
	size_t max, n;
	uint64_t leader_last; /* the leader's last seq when it was ahead */
	ClusterReadEvent *ev; /* max entries; data malloc'ed each */
	int r;
	ClusterReadFn cb;
	void *userdata;
} ReadJob;

/* The next event at or after stream sequence *at: 1, 0 at the end, or < 0. */
static int
read_one(Cluster *c, ReadJob *j, natsMsg **ret)
{
	jsDirectGetMsgOptions o;
	jsDirectGetMsgOptions_Init(&o);
	o.Sequence = j->next_stream_seq;
	o.NextBySubject = j->subject;
	natsStatus s = js_DirectGetMsg(ret, c->js, CLUSTER_STREAM, NULL, &o);
	if (s == NATS_NOT_FOUND)
		return 0;
	if (s != NATS_OK)
		return cluster_errno(s, 0, "direct get");
	return 1;
}

/* The events of message m at stream sequence sseq with seq >= from_seq, as
 * many as there is room for; a message left half read is read again by the
 * next call (next_stream_seq stays at it). */
static int
read_msg(ReadJob *j, natsMsg *m, uint64_t sseq)
{
	uint64_t first;
	ClusterEvent *ev = NULL;
	size_t n = 0;
	const char *writer = NULL;
	int r = cluster_msg_events(m, &first, &ev, &n);
	if (r < 0)
		return r;
	if (natsMsgHeader_Get(m, "Rw-Writer", &writer) != NATS_OK || !writer)
		writer = "";
	size_t wl = strlen(writer) + 1;
	j->next_stream_seq = sseq + 1;
	for (size_t k = 0; k < n && r == 0; k++) {
		if (first + k < j->from_seq)
			continue;
		if (j->n == j->max) {
			j->next_stream_seq = sseq; /* the rest of it next time */
			break;
		}
		/* the bytes, then the writer, in one block */
		char *data = malloc(ev[k].len + wl);
		if (!data) {
			r = -ENOMEM;
			break;
		}
		memcpy(data, ev[k].data, ev[k].len);
		memcpy(data + ev[k].len, writer, wl);
		j->ev[j->n++] =
		    (ClusterReadEvent){first + k, sseq, data, ev[k].len, data + ev[k].len};
	}
	free(ev);
	return r;
}

/* Issue 35 G: a replica that diverged (nats-server 2.9.10 after a partition
 * or leader churn) may hold events past the run's end at the stream's
 * leader, or other events at its last seqs — a minority's unreplicated
 * appends. Direct gets are answered by any replica, so a read that reached
 * the end of what one replica holds checks its last event against the
 * leader's last message of the subject (js_GetLastMsg: the leader answers):
 * past the leader's end, or other bytes at that seq: -EAGAIN (the caller
 * reads again, maybe from another replica, or fails closed). The leader
 * ahead of it is a run that goes on. */
static int
leader_confirms(Cluster *c, ReadJob *j)
{
	const ClusterReadEvent *last = &j->ev[j->n - 1];
	natsMsg *m = NULL;
	jsErrCode code = 0;
	natsStatus s = js_GetLastMsg(&m, c->js, CLUSTER_STREAM, j->subject, NULL, &code);
	int r;
	if (s == NATS_NOT_FOUND || code == JSNoMessageFoundErr)
		r = -EAGAIN; /* the leader has none of what this replica showed */
	else if (s != NATS_OK)
		return cluster_errno(s, code, "last message at the leader");
	else {
		uint64_t first;
		ClusterEvent *ev = NULL;
		size_t n = 0;
		r = cluster_msg_events(m, &first, &ev, &n);
		if (r == 0 && last->seq > first + n - 1)
			r = -EAGAIN;
		else if (r == 0 && last->seq >= first) {
			const ClusterEvent *e = &ev[last->seq - first];
			if (e->len != last->len || memcmp(e->data, last->data, e->len) != 0)
				r = -EAGAIN;
		} else if (r == 0) {
			r = 1; /* the leader is ahead */
			j->leader_last = first + n - 1;
		}
		free(ev);
	}
	natsMsg_Destroy(m);
	if (r == -EAGAIN)
		log_warning("cluster: %s: a replica's event %" PRIu64
			    " is not the stream leader's (replicas diverged?); read again",
			    j->subject, last->seq);
	return r;
}

/* A replica that answered the direct gets may be a moment behind the
 * leader (it acknowledged nothing: a quorum did): when the leader is ahead
 * of what it gave, it is asked again, a little later, this many times — up
 * to the leader's last event as it was then, not after the events of a run
 * that goes on (they come with the next read). */
#define LAGGING_TRIES 10
#define LAGGING_WAIT_MS 20

static void
read_exec(Cluster *c, Job *job)
{
	ReadJob *j = (ReadJob *)job;
	int lagging = 0;
	uint64_t target = 0; /* the leader's last seq the first time it was ahead */
	while (j->n < j->max) {
		natsMsg *m = NULL;
		int r = read_one(c, j, &m);
		if (r == 0 && j->n > 0) {
			r = leader_confirms(c, j);
			if (r == 1 && !target)
				target = j->leader_last;
			/* caught up with that: the rest is a run that goes on */
			bool behind = r == 1 && j->ev[j->n - 1].seq < target;
			if (behind && lagging++ < LAGGING_TRIES) {
				/* a replica behind the leader: read on from where
				 * it stopped */
				struct timespec ts = {0, LAGGING_WAIT_MS * 1000 * 1000};
				nanosleep(&ts, NULL);
				continue;
			}
			if (r == 1)
				r = 0;
		}
		if (r <= 0) {
			j->r = r;
			return;
		}
		uint64_t sseq = 0;
		r = cluster_header_u64(m, "Nats-Sequence", &sseq) == 0 && sseq >= j->next_stream_seq
			? read_msg(j, m, sseq)
			: -EBADMSG;
		natsMsg_Destroy(m);
		if (r == -EBADMSG)
			log_warning("cluster: %s: a message without Rw-Seq or Nats-Sequence, or "
				    "with a bad payload",
				    j->subject);
		if (r < 0) {
			j->r = r;
			return;
		}
	}
}

static void
read_done(Cluster *c, Job *job)
{
	ReadJob *j = (ReadJob *)job;
	if (!c->closing)
		j->cb(c, j->r, j->ev, j->r < 0 ? 0 : j->n, j->next_stream_seq, j->userdata);
	for (size_t i = 0; i < j->n; i++)
		free((void *)j->ev[i].data);
	free(j->ev);
	free(j);
}

int
cluster_read_events(Cluster *c, const char *run_id, uint64_t from_seq, uint64_t start_stream_seq,
		    size_t max, ClusterReadFn cb, void *userdata)
{
	if (!cluster_valid_token(run_id, 128) || max == 0 || !cb)
		return -EINVAL;
	if (!c->kv_runs)
		return -ENOTCONN;
	ReadJob *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->ev = calloc(max, sizeof(*j->ev));
	if (!j->ev) {
		free(j);
		return -ENOMEM;
	}
	j->job.exec = read_exec;
	j->job.done = read_done;
	snprintf(j->subject, sizeof(j->subject), "%s%s", CLUSTER_SUBJECT_PREFIX, run_id);
	j->from_seq = from_seq;
	j->next_stream_seq = start_stream_seq ? start_stream_seq : 1;
	j->max = max;
	j->cb = cb;
	j->userdata = userdata;
	cluster_submit_read(c, &j->job);
	return 0;
}

typedef struct LastJob {
	Job job;
	char subject[sizeof(CLUSTER_SUBJECT_PREFIX) + 128];
	int r;
	ClusterRunLast last;
	void *data; /* last.data */
	ClusterRunLastFn cb;
	void *userdata;
} LastJob;

static void
last_exec(Cluster *c, Job *job)
{
	LastJob *j = (LastJob *)job;
	natsMsg *m = NULL;
	jsErrCode code = 0;
	const char *writer = NULL;
	natsStatus s = js_GetLastMsg(&m, c->js, CLUSTER_STREAM, j->subject, NULL, &code);
	int len;
	if (s == NATS_NOT_FOUND || code == JSNoMessageFoundErr) {
		j->r = -ENOENT;
		return;
	}
	if (s != NATS_OK) {
		j->r = cluster_errno(s, code, "last message");
		return;
	}
	uint64_t first;
	ClusterEvent *ev = NULL;
	size_t n = 0;
	int r = cluster_msg_events(m, &first, &ev, &n);
	j->last.stream_seq = natsMsg_GetSequence(m);
	if (natsMsgHeader_Get(m, "Rw-Writer", &writer) == NATS_OK && writer)
		snprintf(j->last.writer, sizeof(j->last.writer), "%s", writer);
	if (r == 0) { /* the message's last event */
		j->last.seq = first + n - 1;
		len = (int)ev[n - 1].len;
		if ((j->data = malloc(len > 0 ? (size_t)len : 1))) {
			memcpy(j->data, ev[n - 1].data, (size_t)len);
			j->last.data = j->data;
			j->last.len = (size_t)len;
		} else
			r = -ENOMEM;
	}
	free(ev);
	j->r = r;
	natsMsg_Destroy(m);
}

static void
last_done(Cluster *c, Job *job)
{
	LastJob *j = (LastJob *)job;
	if (!c->closing)
		j->cb(c, j->r, &j->last, j->userdata);
	free(j->data);
	free(j);
}

int
cluster_run_last(Cluster *c, const char *run_id, ClusterRunLastFn cb, void *userdata)
{
	if (!cluster_valid_token(run_id, 128) || !cb)
		return -EINVAL;
	if (!c->kv_runs)
		return -ENOTCONN;
	LastJob *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->job.exec = last_exec;
	j->job.done = last_done;
	snprintf(j->subject, sizeof(j->subject), "%s%s", CLUSTER_SUBJECT_PREFIX, run_id);
	j->cb = cb;
	j->userdata = userdata;
	cluster_submit_read(c, &j->job);
	return 0;
}
