/* SPDX-License-Identifier: MIT */
/*
 * takeover-adopted.c — the threads this node took over from lost nodes
 * (docs/CLUSTER.md "Node loss and takeover", step 5): for each, the records
 * rw_runs has of its runs that ran elsewhere, kept in
 * <state_dir>/cluster-adopted.json across restarts. THREAD_RUNS lists them
 * with the log's (takeover_thread_runs), THREAD_LIST the thread with its
 * newest until this node's log has a run of it (takeover_thread_list).
 * Records older than the streams' max age are dropped when read; a thread
 * another node (or nobody) owns is dropped when its owner is checked
 * (adopted_check: once after a start, and after a lapse of the lease).
 */
#include "config.h"

#include "cluster-mode.h"

#include "takeover-int.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster/cluster.h"
#include "json-util.h"
#include "macro.h"

/* The file, a cache of what rw_runs and rw_threads say (replaced whole, by
 * a rename). */
#define ADOPTED_FILE "cluster-adopted.json"

/* Newest first: startedAt, then runId (as runlog_thread_runs orders). */
static int
rec_cmp(const void *a, const void *b)
{
	json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	json_int_t tx = json_integer_value(json_object_get(x, "startedAt"));
	json_int_t ty = json_integer_value(json_object_get(y, "startedAt"));
	if (tx != ty)
		return tx > ty ? -1 : 1;
	return -strcmp(json_string_value(json_object_get(x, "runId")) ?: "",
		       json_string_value(json_object_get(y, "runId")) ?: "");
}

/* Sort the records of arr newest first, keep the first max (0: all). 0 or
 * -ENOMEM. */
static int
recs_sort(json_t *arr, size_t max)
{
	size_t n = json_array_size(arr);
	if (n < 2 && (max == 0 || n <= max))
		return 0;
	_cleanup_free_ json_t **v = calloc(n, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		v[i] = json_incref(json_array_get(arr, i));
	qsort(v, n, sizeof(*v), rec_cmp);
	json_array_clear(arr);
	int r = 0;
	for (size_t i = 0; i < n; i++) {
		if (r == 0 && (max == 0 || i < max) && json_array_append(arr, v[i]) < 0)
			r = -ENOMEM;
		json_decref(v[i]);
	}
	return r;
}

/* Has rec (a record of a run of an adopted thread) gone from the cluster
 * (older than the streams' max age: "Retention")? */
static bool
rec_expired(const Coordinator *c, const json_t *rec, int64_t now)
{
	int64_t age = replicate_max_age_ms(&c->conf);
	return age > 0 && json_integer_value(json_object_get(rec, "startedAt")) < now - age;
}

/* The runs of an adopted thread's entry, pruned of those gone from the
 * cluster (*changed set then). */
static json_t *
adopted_runs(const Coordinator *c, json_t *entry, bool *changed)
{
	json_t *runs = json_object_get(entry, "runs");
	int64_t now = now_epoch_ms();
	for (size_t i = json_array_size(runs); i-- > 0;)
		if (rec_expired(c, json_array_get(runs, i), now)) {
			(void)json_array_remove(runs, i);
			*changed = true;
		}
	return runs;
}

static void
adopted_save(Adopted *a)
{
	char path[PATH_MAX], tmp[PATH_MAX + 8];
	snprintf(path, sizeof(path), "%s/" ADOPTED_FILE, a->c->conf.shared.state_dir);
	if (json_object_size(a->threads) == 0) {
		if (unlink(path) < 0 && errno != ENOENT)
			log_warning_errno(-errno, "Cluster: %s: %m", path);
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (json_dump_file(a->threads, tmp, JSON_COMPACT) < 0 || rename(tmp, path) < 0) {
		log_warning("Cluster: threads taken over not saved to %s", path);
		(void)unlink(tmp);
	}
}

static json_t *
load(Coordinator *c)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/" ADOPTED_FILE, c->conf.shared.state_dir);
	json_t *j = json_load_file(path, 0, NULL);
	const char *thread;
	void *tmp;
	json_t *v;
	if (!json_is_object(j)) {
		json_decref(j);
		return json_object();
	}
	json_object_foreach_safe(j, tmp, thread, v)
	{
		if (json_is_array(json_object_get(v, "runs")))
			continue;
		if (json_object_get(v, "runId")) /* the first format: its newest run */
			(void)json_object_set_new(j, thread, json_pack("{s:[O]}", "runs", v));
		else
			json_object_del(j, thread);
	}
	return j;
}

int
adopted_init(Adopted *a, Coordinator *c)
{
	*a = (Adopted){.c = c, .threads = load(c)};
	return a->threads ? 0 : -ENOMEM;
}

void
adopted_done(Adopted *a)
{
	json_decref(a->threads);
	a->threads = NULL;
}

void
adopted_set(Adopted *a, const char *thread, const json_t *runs)
{
	json_t *copy = json_deep_copy(runs);
	if (!copy || recs_sort(copy, ADOPTED_RUNS_MAX) < 0 ||
	    json_object_set_new(a->threads, thread, json_pack("{s:o}", "runs", copy)) < 0)
		return;
	adopted_save(a);
}

void
adopted_update(Adopted *a, const char *run_id, json_t *rec)
{
	const char *thread = json_string_value(json_object_get(rec, "threadId"));
	json_t *runs = json_object_get(json_object_get(a->threads, thread ? thread : ""), "runs");
	size_t i;
	json_t *x;
	if (!runs)
		return;
	json_array_foreach(runs, i, x)
	{
		const char *id = json_string_value(json_object_get(x, "runId"));
		if (id && streq(id, run_id))
			break;
	}
	if (i < json_array_size(runs))
		(void)json_array_set_new(runs, i, json_deep_copy(rec));
	else
		(void)json_array_append_new(runs, json_deep_copy(rec));
	(void)recs_sort(runs, ADOPTED_RUNS_MAX);
	adopted_save(a);
}

int
takeover_thread_list(Coordinator *c, const RunLogThreadQuery *q, json_t *list, bool *more)
{
	Adopted *a = takeover_adopted(c);
	size_t pl = q->prefix ? strlen(q->prefix) : 0, added = 0;
	bool changed = false;
	const char *thread;
	void *tmp;
	json_t *entry;

	if (!a || json_object_size(a->threads) == 0)
		return 0;
	json_object_foreach_safe(a->threads, tmp, thread, entry)
	{
		if (json_is_true(json_object_get(entry, "local")))
			continue;
		json_t *runs = NULL;
		/* a run of it here: this node's log lists it from then on */
		if (runlog_thread_runs(c->runlog, thread, NULL, &runs) == 0 &&
		    json_array_size(runs) > 0) {
			json_decref(runs);
			(void)json_object_set_new(entry, "local", json_true());
			changed = true;
			continue;
		}
		json_decref(runs);
		json_t *rec = json_array_get(adopted_runs(c, entry, &changed), 0);
		if (!rec) { /* its runs are gone from the cluster */
			json_object_del(a->threads, thread);
			changed = true;
			continue;
		}
		int64_t ms = json_integer_value(json_object_get(rec, "startedAt"));
		const char *st = json_string_value(json_object_get(rec, "status"));
		if ((pl && strncmp(thread, q->prefix, pl) != 0) ||
		    !runlog_scope_allows(q->scope, thread) ||
		    (q->status && !streq(q->status, st ?: "")) ||
		    (q->after_thread &&
		     (ms > q->after_ms ||
		      (ms == q->after_ms && strcmp(thread, q->after_thread) <= 0))))
			continue;
		json_t *item = json_pack("{s:s, s:I, s:O}", "threadId", thread, "lastRunAt",
					 (json_int_t)ms, "latestRun", rec);
		if (!item || json_array_append_new(list, item) < 0)
			return -ENOMEM;
		added++;
	}
	if (changed)
		adopted_save(a);
	if (!added)
		return 0;
	/* merged with the log's page: newest first, the first limit */
	size_t n = json_array_size(list);
	_cleanup_free_ json_t **v = calloc(n, sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		v[i] = json_incref(json_array_get(list, i));
	qsort(v, n, sizeof(*v), runlog_thread_item_cmp);
	json_array_clear(list);
	for (size_t i = 0; i < n; i++) {
		if (i >= q->limit) {
			*more = true;
			json_decref(v[i]);
		} else if (json_array_append_new(list, v[i]) < 0) {
			for (size_t k = i + 1; k < n; k++)
				json_decref(v[k]);
			return -ENOMEM;
		}
	}
	return 0;
}

int
takeover_thread_runs(Coordinator *c, const char *thread_id, const char *status, json_t *list)
{
	Adopted *a = takeover_adopted(c);
	json_t *entry = a ? json_object_get(a->threads, thread_id) : NULL;
	bool changed = false;
	size_t i, added = 0;
	json_t *rec;

	if (!entry)
		return 0;
	json_t *runs = adopted_runs(c, entry, &changed);
	json_auto_t *have = json_object(); /* the log's runs: listed once */
	if (!have)
		return -ENOMEM;
	json_array_foreach(list, i, rec)
	{
		const char *id = json_string_value(json_object_get(rec, "runId"));
		if (id)
			(void)json_object_set_new(have, id, json_true());
	}
	json_array_foreach(runs, i, rec)
	{
		const char *id = json_string_value(json_object_get(rec, "runId"));
		const char *st = json_string_value(json_object_get(rec, "status"));
		if (!id || json_object_get(have, id) || (status && !streq(status, st ?: "")))
			continue;
		if (json_array_append(list, rec) < 0)
			return -ENOMEM;
		added++;
	}
	if (json_array_size(runs) == 0) { /* its runs are gone from the cluster */
		json_object_del(a->threads, thread_id);
		changed = true;
	}
	if (changed)
		adopted_save(a);
	return added ? recs_sort(list, 0) : 0;
}

typedef struct AdoptCheck {
	Adopted *a;
	char thread[];
} AdoptCheck;

static void
on_adopted_owner(Cluster *cl, int err, const ClusterOwner *owner, void *userdata)
{
	AdoptCheck *ac = userdata;
	/* another node's now (this node's key expired meanwhile), or nobody's */
	if ((err == 0 && !streq(owner->node, cluster_node(cl))) || err == -ENOENT) {
		json_object_del(ac->a->threads, ac->thread);
		adopted_save(ac->a);
	}
	free(ac);
}

void
adopted_check(Adopted *a)
{
	const char *thread;
	json_t *v;
	json_object_foreach(a->threads, thread, v)
	{
		size_t tl = strlen(thread) + 1;
		AdoptCheck *ac = calloc(1, sizeof(*ac) + tl);
		if (!ac)
			continue;
		ac->a = a;
		memcpy(ac->thread, thread, tl);
		if (cluster_owner(a->c->cluster, ac->thread, on_adopted_owner, ac) < 0)
			free(ac);
	}
	a->checked = true;
}
