/* SPDX-License-Identifier: MIT */
/*
 * runlog-alias.c — a /chat client's run ids (RUN_START client_run_id), one
 * namespace per thread (issue 30 item 8).
 *
 * The key 0x00 ‖ alias ‖ 0x00 ‖ threadId (in the idempotency database, whose
 * keys are otherwise threadId ‖ 0x00 ‖ key, and 0x01 ‖ runId for the reverse
 * entries pruning uses) names the run. Putting the alias first lets a join
 * by client run id alone find every thread's use of it with one range scan,
 * and keep those of the caller's scope: a tenant neither collides with nor
 * learns of another tenant's ids. Keys of the older shape, 0x00 ‖ alias (one
 * namespace for all threads), are still read, for their own thread only.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "runlog-int.h"

int
alias_key(char *buf, size_t bufsz, const char *alias, const char *thread_id, MDB_val *ret)
{
	size_t al = strlen(alias), tl = strlen(thread_id);

	if (2 + al + tl > bufsz || 2 + al + tl > 500) /* LMDB's key limit is 511 */
		return -E2BIG;
	buf[0] = '\0';
	memcpy(buf + 1, alias, al);
	buf[1 + al] = '\0';
	memcpy(buf + 2 + al, thread_id, tl);
	*ret = (MDB_val){2 + al + tl, buf};
	return 0;
}

/* The thread of run_id's record, compared with thread_id or scope. */
static bool
run_in(RunLog *l, const char *run_id, const char *thread_id, char *const *scope,
       int64_t *ret_started)
{
	json_t *rec = NULL;
	bool in = false;

	if (runlog_get(l, run_id, &rec) == 0) {
		const char *t = json_string_value(json_object_get(rec, "threadId")) ?: "";
		in = thread_id ? streq(t, thread_id) : runlog_scope_allows(scope, t);
		if (ret_started)
			*ret_started = json_integer_value(json_object_get(rec, "startedAt"));
	}
	json_decref(rec);
	return in;
}

int
runlog_alias_legacy(RunLog *l, const char *alias, const char *thread_id, char *const *scope,
		    char ret[RUN_ID_LEN + 1])
{
	char real[RUN_ID_LEN + 1];
	int r = runlog_idem_get(l, "", alias, real);

	if (r < 0)
		return r;
	if (!run_in(l, real, thread_id, scope, NULL))
		return -ENOENT;
	memcpy(ret, real, RUN_ID_LEN + 1);
	return 0;
}

int
runlog_alias_get(RunLog *l, const char *alias, const char *thread_id, char ret[RUN_ID_LEN + 1])
{
	char buf[512];
	MDB_val k;
	int r;

	if (!alias || !*alias || !thread_id || !*thread_id)
		return -ENOENT;
	r = alias_key(buf, sizeof(buf), alias, thread_id, &k);
	if (r < 0)
		return r == -E2BIG ? -ENOENT : r;
	r = idem_lookup(l, &k, ret);
	if (r == -ENOENT)
		r = runlog_alias_legacy(l, alias, thread_id, NULL, ret);
	return r;
}

/* The runs of one alias, at most this many threads looked at. */
#define ALIAS_FIND_MAX 256

int
runlog_alias_find(RunLog *l, const char *alias, char *const *scope, char ret[RUN_ID_LEN + 1])
{
	char buf[512], (*ids)[RUN_ID_LEN + 1] = NULL;
	size_t n = 0, al;
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	MDB_val k, v;
	int64_t best_at = INT64_MIN;
	int r, rc;

	if (!alias || !*alias)
		return -ENOENT;
	al = strlen(alias);
	if (2 + al > 500)
		return -ENOENT;
	ids = calloc(ALIAS_FIND_MAX, sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	buf[0] = '\0';
	memcpy(buf + 1, alias, al);
	buf[1 + al] = '\0';
	k = (MDB_val){2 + al, buf};
	r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r == 0)
		r = mdb_errno(mdb_cursor_open(txn, l->idem, &cur));
	/* the ids only: the records are read after the transaction */
	for (rc = r == 0 ? mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE) : MDB_NOTFOUND;
	     rc == 0 && n < ALIAS_FIND_MAX; rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size <= 2 + al || memcmp(k.mv_data, buf, 2 + al) != 0)
			break;
		if (v.mv_size != RUN_ID_LEN)
			continue;
		size_t tl = k.mv_size - 2 - al;
		char thread[THREAD_ID_MAX + 1];
		if (tl > THREAD_ID_MAX)
			continue;
		memcpy(thread, (const char *)k.mv_data + 2 + al, tl);
		thread[tl] = '\0';
		if (!runlog_scope_allows(scope, thread))
			continue;
		memcpy(ids[n], v.mv_data, RUN_ID_LEN);
		ids[n++][RUN_ID_LEN] = '\0';
	}
	if (cur)
		mdb_cursor_close(cur);
	if (txn)
		mdb_txn_abort(txn);
	if (r < 0) {
		free(ids);
		return r;
	}
	r = -ENOENT;
	for (size_t i = 0; i < n; i++) {
		int64_t at = 0;
		if (run_in(l, ids[i], NULL, scope, &at) && (r < 0 || at > best_at)) {
			memcpy(ret, ids[i], RUN_ID_LEN + 1);
			best_at = at;
			r = 0;
		}
	}
	free(ids);
	if (r == -ENOENT)
		r = runlog_alias_legacy(l, alias, NULL, scope, ret);
	return r;
}
