/* SPDX-License-Identifier: MIT */
/*
 * cluster-read.c — cluster_read_events(): a run's events back from RW_RUNS by
 * direct gets ("the next message of rw.run.<runId> at or after stream
 * sequence N"), on the worker thread. See cluster.h.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster-internal.h"
#include "log.h"
#include "macro.h"

typedef struct ReadJob {
	Job job;
	char subject[sizeof(CLUSTER_SUBJECT_PREFIX) + 128];
	uint64_t from_seq, next_stream_seq;
	size_t max, n;
	ClusterReadEvent *ev; /* max entries; data malloc'ed each */
	int r;
	ClusterReadFn cb;
	void *userdata;
} ReadJob;

static uint64_t
header_u64(natsMsg *m, const char *name, bool *ok)
{
	const char *v = NULL;
	char *end;
	if (natsMsgHeader_Get(m, name, &v) != NATS_OK || !v || !*v) {
		*ok = false;
		return 0;
	}
	uint64_t x = strtoull(v, &end, 10);
	*ok = *ok && !*end;
	return x;
}

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

static void
read_exec(Cluster *c, Job *job)
{
	ReadJob *j = (ReadJob *)job;
	while (j->n < j->max) {
		natsMsg *m = NULL;
		int r = read_one(c, j, &m);
		if (r <= 0) {
			j->r = r;
			return;
		}
		bool ok = true;
		uint64_t sseq = header_u64(m, "Nats-Sequence", &ok);
		uint64_t seq = header_u64(m, "Rw-Seq", &ok);
		if (!ok || sseq < j->next_stream_seq) {
			natsMsg_Destroy(m);
			j->r = log_warning_errno(SYNTHETIC_ERRNO(EBADMSG),
						 "cluster: %s: a message without Rw-Seq or "
						 "Nats-Sequence",
						 j->subject);
			return;
		}
		j->next_stream_seq = sseq + 1;
		if (seq >= j->from_seq) {
			int len = natsMsg_GetDataLength(m);
			const char *writer = NULL;
			if (natsMsgHeader_Get(m, "Rw-Writer", &writer) != NATS_OK || !writer)
				writer = "";
			/* the bytes, then the writer, in one block */
			size_t wl = strlen(writer) + 1, dl = len > 0 ? (size_t)len : 0;
			char *data = malloc(dl + wl);
			if (!data) {
				natsMsg_Destroy(m);
				j->r = -ENOMEM;
				return;
			}
			memcpy(data, natsMsg_GetData(m), dl);
			memcpy(data + dl, writer, wl);
			j->ev[j->n++] = (ClusterReadEvent){seq, sseq, data, dl, data + dl};
		}
		natsMsg_Destroy(m);
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
	cluster_submit(c, &j->job);
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
	bool ok = true;
	j->last.seq = header_u64(m, "Rw-Seq", &ok);
	j->last.stream_seq = natsMsg_GetSequence(m);
	if (natsMsgHeader_Get(m, "Rw-Writer", &writer) == NATS_OK && writer)
		snprintf(j->last.writer, sizeof(j->last.writer), "%s", writer);
	len = natsMsg_GetDataLength(m);
	if (ok && (j->data = malloc(len > 0 ? (size_t)len : 1))) {
		memcpy(j->data, natsMsg_GetData(m), (size_t)len);
		j->last.data = j->data;
		j->last.len = (size_t)len;
	}
	j->r = !ok ? -EBADMSG : !j->data ? -ENOMEM : 0;
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
	cluster_submit(c, &j->job);
	return 0;
}
