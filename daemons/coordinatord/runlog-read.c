/* SPDX-License-Identifier: MIT */
/*
 * runlog-read.c — reading the run log: a run's events from a seq, the runs
 * still running (a restart re-attaches them), a thread's runs, and the
 * host's threads newest first (THREAD_LIST). Read-only transactions.
 */
#include "config.h"

#include "runlog.h"

#include <errno.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"

#include "runlog-int.h"

/* runlog_get_text's memory: direct-mapped slots, each a record's text and its
 * thread as read in the snapshot of transaction txnid. A slot is good for as
 * long as no write transaction committed: LMDB's last committed transaction id
 * is then still txnid, and nothing in the database changed. */
#define RECORD_CACHE_SLOTS 64
#define RECORD_CACHE_MAX_TEXT (16 * 1024) /* larger records are read each time */

typedef struct RecordSlot {
	char run_id[RUN_ID_LEN + 1];
	char *thread_id;
	char *text;
	size_t txnid;
} RecordSlot;

struct RecordCache {
	RecordSlot slot[RECORD_CACHE_SLOTS];
	char *last; /* the text of the last uncached answer */
};

static void
slot_clear(RecordSlot *s)
{
	free(s->thread_id);
	free(s->text);
	*s = (RecordSlot){0};
}

void
record_cache_free(RunLog *l)
{
	if (!l->records)
		return;
	for (size_t i = 0; i < RECORD_CACHE_SLOTS; i++)
		slot_clear(&l->records->slot[i]);
	free(l->records->last);
	free(l->records);
	l->records = NULL;
}

static RecordSlot *
slot_of(RecordCache *c, const char *run_id)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (const char *p = run_id; *p; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	return &c->slot[h % RECORD_CACHE_SLOTS];
}

int
runlog_get_text(RunLog *l, const char *run_id, const char *thread_id, const char **ret_text)
{
	json_t *rec = NULL;
	RecordSlot *s;
	MDB_txn *txn;
	size_t txnid;
	char *text, *owner;
	int r;

	if (!valid_run_id(run_id))
		return -ENOENT;
	if (!l->records && !(l->records = calloc(1, sizeof(*l->records))))
		return -ENOMEM;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		return r;
	txnid = mdb_txn_id(txn);
	s = slot_of(l->records, run_id);
	if (s->text && s->txnid == txnid && streq(s->run_id, run_id)) {
		mdb_txn_abort(txn);
		if (thread_id && !streq(thread_id, s->thread_id))
			return -ENOENT;
		*ret_text = s->text;
		return 0;
	}
	r = get_record(txn, l, run_id, &rec);
	mdb_txn_abort(txn);
	if (r < 0)
		return r;
	owner = strdup(json_string_value(json_object_get(rec, "threadId")) ?: "");
	text = json_dump_compact(rec);
	json_decref(rec);
	if (!owner || !text) {
		free(owner);
		free(text);
		return -ENOMEM;
	}
	if (thread_id && !streq(thread_id, owner))
		r = -ENOENT;
	if (strlen(text) <= RECORD_CACHE_MAX_TEXT) {
		slot_clear(s);
		memcpy(s->run_id, run_id, RUN_ID_LEN + 1);
		s->thread_id = owner;
		s->text = text;
		s->txnid = txnid;
	} else { /* too large to keep: kept until the next call only */
		free(owner);
		free(l->records->last);
		s = NULL;
		l->records->last = text;
	}
	if (r == 0)
		*ret_text = s ? s->text : l->records->last;
	return r;
}

void
runlog_events_done(RunLogEvents *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->texts[i]);
	free(e->texts);
	free(e->lens);
	*e = (RunLogEvents){0};
}

int
runlog_read(RunLog *l, const char *run_id, int64_t from_seq, size_t max, RunLogEvents *ret_events,
	    json_t **ret_record)
{
	return runlog_read_bytes(l, run_id, from_seq, max, SIZE_MAX, ret_events, ret_record);
}

int
runlog_read_bytes(RunLog *l, const char *run_id, int64_t from_seq, size_t max, size_t max_bytes,
		  RunLogEvents *ret_events, json_t **ret_record)
{
	size_t bytes = 0;
	bool capped = false;
	MDB_txn *txn;
	MDB_cursor *cur = NULL;
	RunLogEvents ev = {.first_seq = from_seq + 1};
	json_t *rec = NULL;
	int r;

	if (!valid_run_id(run_id))
		return -ENOENT;
	if (from_seq < -1)
		return -EINVAL;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		return r;
	r = get_record(txn, l, run_id, &rec);
	if (r < 0)
		goto out;
	int64_t last = json_integer_value(json_object_get(rec, "lastSeq"));
	size_t want = last > from_seq ? (size_t)(last - from_seq) : 0;
	if (want > max)
		want = max;
	if (want == 0)
		goto out;
	ev.texts = calloc(want, sizeof(char *));
	ev.lens = calloc(want, sizeof(size_t));
	if (!ev.texts || !ev.lens) {
		r = -ENOMEM;
		goto out;
	}
	r = mdb_errno(mdb_cursor_open(txn, l->events, &cur));
	if (r < 0)
		goto out;
	char key[RUN_ID_LEN + 8];
	event_key(key, run_id, (uint64_t)(from_seq + 1));
	MDB_val k = {sizeof(key), key}, v;
	int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	while (rc == 0 && ev.n < want) {
		int64_t expect = from_seq + 1 + (int64_t)ev.n;
		char ek[RUN_ID_LEN + 8];
		event_key(ek, run_id, (uint64_t)expect);
		/* the key must be exactly the next seq: a gap means a broken log */
		if (k.mv_size != sizeof(ek) || memcmp(k.mv_data, ek, sizeof(ek)) != 0) {
			r = -EUCLEAN;
			goto out;
		}
		/* bounded by bytes as well as by count, but never empty */
		if (ev.n > 0 && bytes + v.mv_size > max_bytes) {
			capped = true;
			break;
		}
		bytes += v.mv_size;
		ev.texts[ev.n] = malloc(v.mv_size + 1);
		if (!ev.texts[ev.n]) {
			r = -ENOMEM;
			goto out;
		}
		memcpy(ev.texts[ev.n], v.mv_data, v.mv_size);
		ev.texts[ev.n][v.mv_size] = '\0';
		ev.lens[ev.n] = v.mv_size;
		ev.n++;
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	if (ev.n < want && !capped)
		r = rc == MDB_NOTFOUND || rc == 0 ? -EUCLEAN : mdb_errno(rc);
out:
	if (cur)
		mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	if (r < 0) {
		runlog_events_done(&ev);
		json_decref(rec);
		return r;
	}
	*ret_events = ev;
	if (ret_record)
		*ret_record = rec;
	else
		json_decref(rec);
	return 0;
}

int
runlog_foreach_running(RunLog *l, void (*fn)(const char *run_id, json_t *record, void *ud),
		       void *ud)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	int r, rc;
	/* Collect first, call after the read transaction ended: fn may write. */
	json_t *list = json_array();

	if (!list)
		return -ENOMEM;
	r = runs_cursor_begin(l, MDB_RDONLY, &txn, &cur);
	if (r < 0) {
		json_decref(list);
		return r;
	}
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		json_t *rec = json_loadb(v.mv_data, v.mv_size, 0, NULL);
		if (rec && !run_status_terminal(json_string_value(json_object_get(rec, "status"))))
			json_array_append_new(list, rec);
		else
			json_decref(rec);
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	size_t i;
	json_t *rec;
	json_array_foreach(list, i, rec)
	{
		const char *id = json_string_value(json_object_get(rec, "runId"));
		if (id)
			fn(id, rec, ud);
	}
	json_decref(list);
	return rc == MDB_NOTFOUND ? 0 : mdb_errno(rc);
}

/* A read that lists: the empty list it fills and its read-only transaction. */
static int
list_read_begin(RunLog *l, json_t **ret_list, MDB_txn **ret_txn)
{
	json_t *list = json_array();
	int r;

	if (!list)
		return -ENOMEM;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, ret_txn));
	if (r < 0) {
		json_decref(list);
		return r;
	}
	*ret_list = list;
	return 0;
}

/* The record's status is status (any when NULL). */
static bool
status_matches(const json_t *rec, const char *status)
{
	return !status || streq(status, json_string_value(json_object_get(rec, "status")) ?: "");
}

/* The thread's index entries walked from its newest (its keys are
 * thread\0 + startedAt + runId, ascending: the range ends before
 * thread\x01), at most max records kept; no record read past them. */
static int
thread_runs_walk(RunLog *l, const char *thread_id, const char *status, size_t max, json_t **ret)
{
	size_t tl = strlen(thread_id);
	char prefix[THREAD_ID_MAX + 2];
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	int r, rc;

	if (tl == 0 || tl > THREAD_ID_MAX)
		return -EINVAL;
	memcpy(prefix, thread_id, tl);
	prefix[tl] = '\0';
	json_t *out;
	r = list_read_begin(l, &out, &txn);
	if (r < 0)
		return r;
	r = mdb_errno(mdb_cursor_open(txn, l->thread_runs, &cur));
	if (r < 0) {
		mdb_txn_abort(txn);
		goto fail;
	}
	prefix[tl] = '\x01'; /* just past the range */
	k = (MDB_val){tl + 1, prefix};
	rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	rc = mdb_cursor_get(cur, &k, &v, rc == MDB_NOTFOUND ? MDB_LAST : MDB_PREV);
	prefix[tl] = '\0';
	for (; rc == 0 && json_array_size(out) < max; rc = mdb_cursor_get(cur, &k, &v, MDB_PREV)) {
		if (k.mv_size != tl + 1 + 8 + RUN_ID_LEN || memcmp(k.mv_data, prefix, tl + 1) != 0)
			break;
		char id[RUN_ID_LEN + 1];
		memcpy(id, (char *)k.mv_data + tl + 9, RUN_ID_LEN);
		id[RUN_ID_LEN] = '\0';
		json_t *rec;
		if (get_record(txn, l, id, &rec) < 0)
			continue; /* pruned under us: the index entry goes with the next prune */
		if (!status_matches(rec, status)) {
			json_decref(rec);
			continue;
		}
		json_array_append_new(out, rec); /* newest first */
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	if (rc != 0 && rc != MDB_NOTFOUND) {
		r = mdb_errno(rc);
		goto fail;
	}
	*ret = out;
	return 0;
fail:
	json_decref(out);
	return r;
}

int
runlog_thread_runs(RunLog *l, const char *thread_id, const char *status, json_t **ret)
{
	return thread_runs_walk(l, thread_id, status, SIZE_MAX, ret);
}

int
runlog_thread_runs_newest(RunLog *l, const char *thread_id, size_t max, json_t **ret)
{
	return thread_runs_walk(l, thread_id, NULL, max, ret);
}

/* ---------- the host's threads (THREAD_LIST) ---------- */

typedef struct ThreadHead {
	int64_t last_ms; /* startedAt of the thread's newest run */
	char thread_id[THREAD_ID_MAX + 1];
	char run_id[RUN_ID_LEN + 1];
} ThreadHead;

int
runlog_thread_item_cmp(const void *a, const void *b)
{
	json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	json_int_t tx = json_integer_value(json_object_get(x, "lastRunAt"));
	json_int_t ty = json_integer_value(json_object_get(y, "lastRunAt"));
	if (tx != ty)
		return tx > ty ? -1 : 1;
	return strcmp(json_string_value(json_object_get(x, "threadId")) ?: "",
		      json_string_value(json_object_get(y, "threadId")) ?: "");
}

bool
runlog_scope_allows(char *const *scope, const char *thread_id)
{
	if (!scope)
		return true;
	for (char *const *p = scope; *p; p++) {
		size_t n = strlen(*p);
		if (n > 0 && (*p)[n - 1] == '*') {
			if (strncmp(thread_id, *p, n - 1) == 0)
				return true;
		} else if (streq(thread_id, *p))
			return true;
	}
	return false;
}

static int
thread_head_cmp(const void *a, const void *b)
{
	const ThreadHead *x = a, *y = b;
	if (x->last_ms != y->last_ms)
		return x->last_ms > y->last_ms ? -1 : 1;
	return strcmp(x->thread_id, y->thread_id);
}

typedef struct Heads {
	ThreadHead *v;
	size_t n, cap;
} Heads;

/* The newest run of thread id (tl bytes) into h, when the thread has one and
 * scope allows it. The thread_runs index is sorted by threadId, then
 * startedAt, so a thread's newest run is the entry just before threadId ‖
 * 0x01 (ids are printable, never 0x00 or 0x01). Leaves cur on that entry (or
 * where the search ended); 0 (added or not), or MDB_NOTFOUND / an LMDB
 * error / ENOMEM (rc). */
static int
thread_head(MDB_cursor *cur, const char *id, size_t tl, char *const *scope, Heads *h)
{
	char seek[THREAD_ID_MAX + 1];
	MDB_val k, v;
	int rc;

	memcpy(seek, id, tl);
	seek[tl] = '\x01';
	k = (MDB_val){tl + 1, seek};
	rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	if (rc == 0)
		rc = mdb_cursor_get(cur, &k, &v, MDB_PREV);
	else if (rc == MDB_NOTFOUND)
		rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
	if (rc != 0)
		return rc;
	if (k.mv_size != tl + 1 + 8 + RUN_ID_LEN || memcmp(k.mv_data, seek, tl) != 0 ||
	    ((const char *)k.mv_data)[tl] != '\0')
		return 0;
	seek[tl] = '\0';
	if (!runlog_scope_allows(scope, seek))
		return 0;
	if (ARRAY_GROW(h->v, h->n, h->cap, 64) < 0)
		return ENOMEM;
	ThreadHead *t = &h->v[h->n++];
	const unsigned char *ts = (const unsigned char *)k.mv_data + tl + 1;
	uint64_t ms = 0;
	for (int i = 0; i < 8; i++)
		ms = ms << 8 | ts[i];
	t->last_ms = (int64_t)ms;
	memcpy(t->thread_id, seek, tl + 1);
	memcpy(t->run_id, ts + 8, RUN_ID_LEN);
	t->run_id[RUN_ID_LEN] = '\0';
	return 0;
}

/* Every thread whose id starts with prefix (pl bytes; 0: all), one entry
 * each: two keys per thread, whatever the number of its runs. */
static int
walk_range(MDB_cursor *cur, const char *prefix, size_t pl, char *const *scope, Heads *h)
{
	MDB_val k, v;
	int rc;

	if (pl > 0) {
		k = (MDB_val){pl, (void *)prefix};
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	} else
		rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
	while (rc == 0) {
		const char *kd = k.mv_data;
		const char *z = memchr(kd, '\0', k.mv_size);
		size_t tl = z ? (size_t)(z - kd) : k.mv_size;

		if (pl > 0 && (tl < pl || memcmp(kd, prefix, pl) != 0))
			break;
		if (!z || tl == 0 || tl > THREAD_ID_MAX) { /* not an index key: step over */
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
			continue;
		}
		char id[THREAD_ID_MAX];
		memcpy(id, kd, tl);
		rc = thread_head(cur, id, tl, scope, h);
		if (rc == 0)
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	return rc == MDB_NOTFOUND ? 0 : rc;
}

static bool
starts_with(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

/* Is scope entry i covered by another one (a pattern that is a prefix of it,
 * or the same entry earlier)? The entries left cover disjoint key ranges. */
static bool
scope_covered(char *const *scope, size_t i)
{
	const char *e = scope[i];
	size_t el = strlen(e);
	bool pat = el > 0 && e[el - 1] == '*';

	for (size_t j = 0; scope[j]; j++) {
		const char *o = scope[j];
		size_t ol = strlen(o);
		if (j == i)
			continue;
		if (streq(o, e)) {
			if (j < i)
				return true;
			continue;
		}
		if (ol > 0 && o[ol - 1] == '*' &&
		    strncmp(e, o, ol - 1) == 0 /* o's prefix starts e */ && (!pat || ol < el))
			return true;
	}
	return false;
}

/* The newest run of each thread the query may list: with a scope, only the
 * key ranges of its entries (each intersected with prefix) are walked, so a
 * token's list costs its own threads, not every tenant's. */
static int
thread_heads(RunLog *l, MDB_txn *txn, const char *prefix, char *const *scope, ThreadHead **ret,
	     size_t *ret_n)
{
	const char *q = prefix ?: "";
	Heads h = {0};
	MDB_cursor *cur;
	int rc = 0;

	int r = mdb_errno(mdb_cursor_open(txn, l->thread_runs, &cur));
	if (r < 0)
		return r;
	if (!scope)
		rc = walk_range(cur, q, strlen(q), NULL, &h);
	for (size_t i = 0; scope && scope[i] && rc == 0; i++) {
		const char *e = scope[i];
		size_t el = strlen(e);
		if (scope_covered(scope, i))
			continue;
		if (el > 0 && e[el - 1] == '*') {
			char p[THREAD_ID_MAX + 2];
			if (el - 1 > THREAD_ID_MAX)
				continue;
			memcpy(p, e, el - 1);
			p[el - 1] = '\0';
			/* the longer of the two, when one starts the other */
			const char *range = starts_with(q, p) ? q : starts_with(p, q) ? p : NULL;
			if (range)
				rc = walk_range(cur, range, strlen(range), scope, &h);
		} else if (el > 0 && el <= THREAD_ID_MAX && starts_with(e, q)) {
			rc = thread_head(cur, e, el, scope, &h);
			if (rc == MDB_NOTFOUND)
				rc = 0;
		}
	}
	mdb_cursor_close(cur);
	if (rc != 0) {
		free(h.v);
		return mdb_errno(rc);
	}
	*ret = h.v;
	*ret_n = h.n;
	return 0;
}

int
runlog_threads(RunLog *l, const RunLogThreadQuery *q, json_t **ret, bool *ret_more)
{
	_cleanup_free_ ThreadHead *heads = NULL;
	size_t n = 0;
	MDB_txn *txn;
	int r;

	*ret_more = false;
	json_t *out;
	r = list_read_begin(l, &out, &txn);
	if (r < 0)
		return r;
	r = thread_heads(l, txn, q->prefix, q->scope, &heads, &n);
	if (r < 0) {
		mdb_txn_abort(txn);
		goto fail;
	}
	qsort(heads, n, sizeof(*heads), thread_head_cmp);
	for (size_t i = 0; i < n; i++) {
		ThreadHead *h = &heads[i];
		json_t *rec;

		if (q->after_thread &&
		    (h->last_ms > q->after_ms ||
		     (h->last_ms == q->after_ms && strcmp(h->thread_id, q->after_thread) <= 0)))
			continue;
		if (get_record(txn, l, h->run_id, &rec) < 0)
			continue; /* pruned under us */
		if (!status_matches(rec, q->status)) {
			json_decref(rec);
			continue;
		}
		if (json_array_size(out) >= q->limit) {
			json_decref(rec);
			*ret_more = true;
			break;
		}
		json_t *item = json_pack("{s:s, s:I, s:o}", "threadId", h->thread_id, "lastRunAt",
					 (json_int_t)h->last_ms, "latestRun", rec);
		if (!item || json_array_append_new(out, item) < 0) {
			mdb_txn_abort(txn);
			r = -ENOMEM;
			goto fail;
		}
	}
	mdb_txn_abort(txn);
	*ret = out;
	return 0;
fail:
	json_decref(out);
	return r;
}
