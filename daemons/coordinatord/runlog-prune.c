/* SPDX-License-Identifier: MIT */
/*
 * runlog-prune.c — retention: deleting terminal runs (record, events,
 * thread index, driver state, input, idempotency keys) by age
 * (runlog_prune) and, past the size mark, oldest first (runlog_prune_oldest,
 * or a tenant's oldest first: runlog_prune_oldest_of);
 * and how many bytes of the map are live (runlog_usage).
 */
#include "config.h"

#include "runlog.h"

#include <errno.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "log.h"
#include "macro.h"

#include "runlog-int.h"

static int
prune_one(RunLog *l, MDB_txn *txn, const char *run_id, const json_t *rec)
{
	char key[RUN_ID_LEN + 8];
	MDB_cursor *cur;
	MDB_val k, v;
	int r, rc;

	/* events: the whole runId ‖ * range */
	r = mdb_errno(mdb_cursor_open(txn, l->events, &cur));
	if (r < 0)
		return r;
	event_key(key, run_id, 0);
	k = (MDB_val){sizeof(key), key};
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != sizeof(key) || memcmp(k.mv_data, run_id, RUN_ID_LEN) != 0)
			break;
		rc = mdb_cursor_del(cur, 0);
		if (rc != 0)
			break;
	}
	mdb_cursor_close(cur);
	if (rc != 0 && rc != MDB_NOTFOUND)
		return mdb_errno(rc);

	/* thread index */
	const char *thread = json_string_value(json_object_get(rec, "threadId"));
	if (thread) {
		size_t tl = strlen(thread);
		char tk[THREAD_ID_MAX + 1 + 8 + RUN_ID_LEN];
		uint64_t started = (uint64_t)json_integer_value(json_object_get(rec, "startedAt"));
		if (tl <= THREAD_ID_MAX) {
			memcpy(tk, thread, tl);
			tk[tl] = '\0';
			for (int i = 0; i < 8; i++)
				tk[tl + 1 + i] = (char)(started >> (56 - 8 * i));
			memcpy(tk + tl + 9, run_id, RUN_ID_LEN);
			MDB_val tkv = {tl + 9 + RUN_ID_LEN, tk};
			rc = mdb_del(txn, l->thread_runs, &tkv, NULL);
			if (rc != 0 && rc != MDB_NOTFOUND)
				return mdb_errno(rc);
		}
	}
	/* idempotency key, through its reverse entry */
	char rk[1 + RUN_ID_LEN];
	rk[0] = 1;
	memcpy(rk + 1, run_id, RUN_ID_LEN);
	MDB_val rkv = {sizeof(rk), rk}, fwd;
	rc = mdb_get(txn, l->idem, &rkv, &fwd);
	if (rc == 0) {
		char fk[512];
		size_t fl = MIN(fwd.mv_size, sizeof(fk));
		memcpy(fk, fwd.mv_data, fl);
		MDB_val fkv = {fl, fk};
		rc = mdb_del(txn, l->idem, &fkv, NULL);
		if (rc == 0 || rc == MDB_NOTFOUND)
			rc = mdb_del(txn, l->idem, &rkv, NULL);
	}
	if (rc != 0 && rc != MDB_NOTFOUND)
		return mdb_errno(rc);
	MDB_val rid = run_key(run_id);
	rc = mdb_del(txn, l->drive, &rid, NULL);
	if (rc != 0 && rc != MDB_NOTFOUND)
		return mdb_errno(rc);
	rc = mdb_del(txn, l->inputs, &rid, NULL);
	if (rc != 0 && rc != MDB_NOTFOUND)
		return mdb_errno(rc);
	return mdb_errno(mdb_del(txn, l->runs, &rid, NULL));
}

/* The end of a pruning pass: delete the n runs chosen (ids, recs: their
 * records, released here) in txn and commit it, or abort it when r (the
 * choosing's result) or a deletion failed. */
static int
prune_batch(RunLog *l, MDB_txn *txn, char (*ids)[RUN_ID_LEN + 1], json_t **recs, size_t n, int r,
	    RunLogPrunedFn pruned, void *ud)
{
	for (size_t i = 0; i < n && r == 0; i++)
		r = prune_one(l, txn, ids[i], recs[i]);
	if (r < 0)
		mdb_txn_abort(txn);
	else
		r = commit(txn);
	for (size_t i = 0; r == 0 && pruned && i < n; i++)
		pruned(ids[i], recs[i], ud);
	for (size_t i = 0; i < n; i++)
		json_decref(recs[i]);
	return r;
}

int
runlog_prune(RunLog *l, int64_t cutoff_ms, size_t max_pruned, size_t max_scanned,
	     char cursor[RUN_ID_LEN + 1], size_t *ret_pruned, RunLogPrunedFn pruned, void *ud)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	size_t scanned = 0, n = 0;
	char ids[64][RUN_ID_LEN + 1];
	json_t *recs[64];
	int r, rc;

	if (max_pruned > 64)
		max_pruned = 64;
	r = runs_cursor_begin(l, 0, &txn, &cur);
	if (r < 0)
		return r;
	if (cursor[0]) {
		k = run_key(cursor);
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		if (rc == 0 && k.mv_size == RUN_ID_LEN &&
		    memcmp(k.mv_data, cursor, RUN_ID_LEN) == 0)
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT); /* exclusive */
	} else
		rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
	for (; rc == 0 && scanned < max_scanned && n < max_pruned;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		scanned++;
		if (k.mv_size != RUN_ID_LEN)
			continue;
		memcpy(cursor, k.mv_data, RUN_ID_LEN);
		cursor[RUN_ID_LEN] = '\0';
		json_t *rec = json_loadb(v.mv_data, v.mv_size, 0, NULL);
		if (!rec)
			continue;
		json_t *fin = json_object_get(rec, "finishedAt");
		if (rec_terminal(rec) && json_is_integer(fin) &&
		    json_integer_value(fin) < cutoff_ms) {
			memcpy(ids[n], cursor, RUN_ID_LEN + 1);
			recs[n++] = rec;
		} else
			json_decref(rec);
	}
	if (rc == MDB_NOTFOUND)
		cursor[0] = '\0'; /* wrapped: start over next time */
	mdb_cursor_close(cur);
	r = prune_batch(l, txn, ids, recs, n, r, pruned, ud);
	if (r == 0 && ret_pruned)
		*ret_pruned = n;
	return r;
}

/* Pages of live data: every database's branch, leaf and overflow pages, the
 * free list's own pages and the two meta pages. Pages on the free list are
 * reusable and not counted. */
int
txn_usage(RunLog *l, MDB_txn *txn, uint64_t *ret_used)
{
	const MDB_dbi dbis[] = {0 /* FREE_DBI */, 1 /* MAIN_DBI */, l->runs, l->events,
				l->thread_runs,	  l->idem,	    l->meta, l->drive,
				l->inputs,	  l->owners};
	uint64_t pages = 2, psize = 4096;

	for (size_t i = 0; i < ELEMENTSOF(dbis); i++) {
		MDB_stat st;
		int rc = mdb_stat(txn, dbis[i], &st);
		if (rc != 0)
			return mdb_errno(rc);
		pages += st.ms_branch_pages + st.ms_leaf_pages + st.ms_overflow_pages;
		psize = st.ms_psize;
	}
	*ret_used = pages * psize;
	return 0;
}

int
runlog_usage(RunLog *l, uint64_t *ret_used, uint64_t *ret_map)
{
	MDB_txn *txn;
	int r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		return r;
	r = txn_usage(l, txn, ret_used);
	mdb_txn_abort(txn);
	if (ret_map)
		*ret_map = l->opts.map_size;
	return r;
}

int
runlog_prune_oldest(RunLog *l, size_t max_pruned, size_t *ret_pruned, RunLogPrunedFn pruned,
		    void *ud)
{
	return runlog_prune_oldest_of(l, NULL, max_pruned, UINT64_MAX, ret_pruned, pruned, ud);
}

/* The bytes of a run's events (keys and values; sizes from the nodes). */
static uint64_t
events_bytes(RunLog *l, MDB_txn *txn, const char *run_id)
{
	char key[RUN_ID_LEN + 8];
	MDB_cursor *cur;
	MDB_val k, v;
	uint64_t n = 0;

	if (mdb_cursor_open(txn, l->events, &cur) != 0)
		return 0;
	event_key(key, run_id, 0);
	k = (MDB_val){sizeof(key), key};
	for (int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	     rc == 0 && k.mv_size == sizeof(key) && memcmp(k.mv_data, run_id, RUN_ID_LEN) == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT))
		n += k.mv_size + v.mv_size;
	mdb_cursor_close(cur);
	return n;
}

int
runlog_prune_oldest_of(RunLog *l, const char *tenant, size_t max_pruned, uint64_t want_bytes,
		       size_t *ret_pruned, RunLogPrunedFn pruned, void *ud)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	char ids[16][RUN_ID_LEN + 1];
	json_t *recs[16];
	int64_t fins[16];
	size_t n = 0;
	int r, rc;

	if (max_pruned > 16)
		max_pruned = 16;
	if (max_pruned == 0) {
		*ret_pruned = 0;
		return 0;
	}
	r = runs_cursor_begin(l, 0, &txn, &cur);
	if (r < 0)
		return r;
	/* one pass over the records (small) keeping the max_pruned oldest
	 * terminal runs by finishedAt, sorted ascending */
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != RUN_ID_LEN)
			continue;
		json_t *rec = json_loadb(v.mv_data, v.mv_size, 0, NULL);
		json_t *fin = json_object_get(rec, "finishedAt");
		if (!rec || !rec_terminal(rec) || !json_is_integer(fin) ||
		    (tenant && !streq(rec_tenant(rec), tenant))) {
			json_decref(rec);
			continue;
		}
		int64_t f = json_integer_value(fin);
		if (n == max_pruned && f >= fins[n - 1]) {
			json_decref(rec);
			continue;
		}
		if (n == max_pruned)
			json_decref(recs[--n]);
		size_t at = n;
		while (at > 0 && fins[at - 1] > f)
			at--;
		memmove(&ids[at + 1], &ids[at], (n - at) * sizeof(ids[0]));
		memmove(&recs[at + 1], &recs[at], (n - at) * sizeof(recs[0]));
		memmove(&fins[at + 1], &fins[at], (n - at) * sizeof(fins[0]));
		memcpy(ids[at], k.mv_data, RUN_ID_LEN);
		ids[at][RUN_ID_LEN] = '\0';
		recs[at] = rec;
		fins[at] = f;
		n++;
	}
	mdb_cursor_close(cur);
	if (rc != MDB_NOTFOUND)
		r = mdb_errno(rc);
	/* no more than want_bytes asks (the last one may pass it) */
	uint64_t freed = 0;
	for (size_t i = 0; r == 0 && want_bytes != UINT64_MAX && i < n; i++) {
		if (freed >= want_bytes) {
			for (size_t j = i; j < n; j++)
				json_decref(recs[j]);
			n = i;
			break;
		}
		freed += events_bytes(l, txn, ids[i]) + RUN_ID_LEN;
	}
	r = prune_batch(l, txn, ids, recs, n, r, pruned, ud);
	if (r == 0)
		*ret_pruned = n;
	return r;
}
