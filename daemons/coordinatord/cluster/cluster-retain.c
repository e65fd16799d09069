/* SPDX-License-Identifier: MIT */
/*
 * cluster-retain.c — retention in the cluster (docs/CLUSTER.md
 * "Retention"): a run's subject purged from RW_RUNS and its rw_inputs and
 * rw_runs entries removed when its owner's retention prunes it
 * (cluster_purge_run), and the max age of RW_RUNS and of the two buckets'
 * streams, the backstop for runs whose owner is gone for good
 * (cluster_set_max_age, from the worker's ensure).
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster-internal.h"
#include "log.h"
#include "macro.h"

#define RUNS_KV_STREAM "KV_" CLUSTER_BUCKET_RUNS
#define INPUTS_KV_STREAM "KV_" CLUSTER_BUCKET_INPUTS
#define IDEM_KV_STREAM "KV_" CLUSTER_BUCKET_IDEM

/* One stream's MaxAge to max_age_ms (0: none), when it differs. Worker. */
static int
stream_max_age(Cluster *c, const char *stream, int64_t max_age_ms)
{
	jsStreamInfo *si = NULL, *si2 = NULL;
	jsErrCode code = 0;
	int64_t want = max_age_ms * 1000000LL; /* nanoseconds */
	/* JetStream: the duplicate window (CLUSTER_DUP_WINDOW_S, as KV's
	 * default) may not exceed the max age (only a test's is that short) */
	int64_t dup = (int64_t)CLUSTER_DUP_WINDOW_S * 1000000000LL;
	if (want > 0 && want < dup)
		dup = want;
	natsStatus s = js_GetStreamInfo(&si, c->js, stream, NULL, &code);
	if (s != NATS_OK)
		return cluster_errno(s, code, stream);
	if (si->Config && (si->Config->MaxAge != want || si->Config->Duplicates != dup)) {
		si->Config->MaxAge = want;
		si->Config->Duplicates = dup;
		s = js_UpdateStream(&si2, c->js, si->Config, NULL, &code);
		jsStreamInfo_Destroy(si2);
		if (s == NATS_OK && max_age_ms)
			log_info("cluster: %s: max age %" PRId64 " ms", stream, max_age_ms);
		else if (s == NATS_OK)
			log_info("cluster: %s: no max age", stream);
	}
	jsStreamInfo_Destroy(si);
	return cluster_errno(s, code, stream);
}

int
cluster_apply_max_age(Cluster *c)
{
	if (c->run_max_age_ms < 0)
		return 0; /* not this Cluster's to set */
	int r = stream_max_age(c, CLUSTER_STREAM, c->run_max_age_ms);
	if (r >= 0)
		r = stream_max_age(c, RUNS_KV_STREAM, c->run_max_age_ms);
	if (r >= 0)
		r = stream_max_age(c, INPUTS_KV_STREAM, c->run_max_age_ms);
	if (r >= 0)
		r = stream_max_age(c, IDEM_KV_STREAM, c->run_max_age_ms);
	return r;
}

typedef struct PurgeJob {
	Job job;
	char run_id[129];
	int r;
	uint64_t purged;
	ClusterPurgeFn cb;
	void *userdata;
} PurgeJob;

static int
purge_subject(Cluster *c, const char *stream, const char *subject)
{
	jsOptions o;
	jsErrCode code = 0;
	jsOptions_Init(&o);
	o.Wait = c->op_timeout_ms;
	o.Stream.Purge.Subject = subject;
	return cluster_errno(js_PurgeStream(c->js, stream, &o, &code), code, "purge");
}

static void
purge_exec(Cluster *c, Job *job)
{
	PurgeJob *j = (PurgeJob *)job;
	char subject[160];

	/* the events first: a record without events is harmless (a takeover
	 * finds no last event and ends nothing: the record says terminal) */
	snprintf(subject, sizeof(subject), CLUSTER_SUBJECT_PREFIX "%s", j->run_id);
	j->r = purge_subject(c, CLUSTER_STREAM, subject);
	if (j->r < 0)
		return;
	/* its input, then the record's whole subject: no delete marker is
	 * left behind */
	snprintf(subject, sizeof(subject), "$KV." CLUSTER_BUCKET_INPUTS ".%s", j->run_id);
	j->r = purge_subject(c, INPUTS_KV_STREAM, subject);
	if (j->r < 0)
		return;
	snprintf(subject, sizeof(subject), "$KV." CLUSTER_BUCKET_RUNS ".%s", j->run_id);
	j->r = purge_subject(c, RUNS_KV_STREAM, subject);
}

static void
purge_done(Cluster *c, Job *job)
{
	PurgeJob *j = (PurgeJob *)job;
	if (!c->closing && j->cb)
		j->cb(c, j->r, j->userdata);
	free(j);
}

int
cluster_purge_run(Cluster *c, const char *run_id, ClusterPurgeFn cb, void *userdata)
{
	if (!cluster_valid_token(run_id, 128))
		return -EINVAL;
	if (!c->kv_runs)
		return -ENOTCONN; /* the stream and buckets are not ensured yet */
	PurgeJob *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	j->job.exec = purge_exec;
	j->job.done = purge_done;
	snprintf(j->run_id, sizeof(j->run_id), "%s", run_id);
	j->cb = cb;
	j->userdata = userdata;
	cluster_submit(c, &j->job);
	return 0;
}
