/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "runlog.h"

#include <errno.h>
#include <lmdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fd-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"

struct RunLog {
	MDB_env *env;
	MDB_dbi runs, events, thread_runs, idem, meta;
};

/* LMDB codes → negative errno. MDB_MAP_FULL becomes -ENOSPC: to the caller it
 * is "the store is full", whatever the disk says. */
static int
mdb_errno(int rc)
{
	switch (rc) {
	case MDB_SUCCESS: return 0;
	case MDB_NOTFOUND: return -ENOENT;
	case MDB_MAP_FULL: return -ENOSPC;
	case MDB_TXN_FULL: return -ENOSPC;
	case MDB_KEYEXIST: return -EEXIST;
	case MDB_CORRUPTED:
	case MDB_PAGE_NOTFOUND:
	case MDB_INVALID:
	case MDB_VERSION_MISMATCH: return -EUCLEAN;
	case MDB_MAP_RESIZED:
	case MDB_BAD_TXN: return -EIO;
	default: return rc > 0 ? -rc : -EIO;
	}
}

bool
run_status_terminal(const char *s)
{
	return s && (streq(s, "completed") || streq(s, "failed") || streq(s, "aborted"));
}

RunLog *
runlog_free(RunLog *l)
{
	if (!l)
		return NULL;
	if (l->env)
		mdb_env_close(l->env);
	free(l);
	return NULL;
}

int
runlog_open(const char *dir, const RunLogOptions *opts, RunLog **ret)
{
	RunLog *l = calloc(1, sizeof(*l));
	MDB_txn *txn = NULL;
	int rc, r;

	if (!l)
		return -ENOMEM;
	r = mkdir_p(dir, 0700);
	if (r < 0)
		goto fail;
	rc = mdb_env_create(&l->env);
	if (rc == 0)
		rc = mdb_env_set_maxdbs(l->env, 8);
	if (rc == 0)
		rc = mdb_env_set_mapsize(l->env, opts->map_size);
	if (rc == 0)
		rc = mdb_env_open(l->env, dir, MDB_NOTLS | (opts->sync ? 0 : MDB_NOSYNC), 0600);
	if (rc == 0)
		rc = mdb_txn_begin(l->env, NULL, 0, &txn);
	if (rc == 0)
		rc = mdb_dbi_open(txn, "runs", MDB_CREATE, &l->runs);
	if (rc == 0)
		rc = mdb_dbi_open(txn, "events", MDB_CREATE, &l->events);
	if (rc == 0)
		rc = mdb_dbi_open(txn, "thread_runs", MDB_CREATE, &l->thread_runs);
	if (rc == 0)
		rc = mdb_dbi_open(txn, "idempotency", MDB_CREATE, &l->idem);
	if (rc == 0)
		rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &l->meta);
	if (rc == 0) {
		MDB_val k = { 6, (void *)"schema" }, v;
		rc = mdb_get(txn, l->meta, &k, &v);
		if (rc == MDB_NOTFOUND) {
			v = (MDB_val){ 1, (void *)"1" };
			rc = mdb_put(txn, l->meta, &k, &v, 0);
		} else if (rc == 0 && !(v.mv_size == 1 && *(char *)v.mv_data == '1')) {
			rc = MDB_VERSION_MISMATCH;
		}
	}
	if (rc == 0) {
		rc = mdb_txn_commit(txn);
		txn = NULL;
	}
	if (rc != 0) {
		r = mdb_errno(rc);
		goto fail;
	}
	*ret = l;
	return 0;
fail:
	if (txn)
		mdb_txn_abort(txn);
	runlog_free(l);
	return r;
}

static MDB_val
run_key(const char *run_id)
{
	return (MDB_val){ strlen(run_id), (void *)run_id };
}

static void
event_key(char buf[RUN_ID_LEN + 8], const char *run_id, uint64_t seq)
{
	memcpy(buf, run_id, RUN_ID_LEN);
	for (int i = 0; i < 8; i++)
		buf[RUN_ID_LEN + i] = (char)(seq >> (56 - 8 * i));
}

static int
valid_run_id(const char *run_id)
{
	return run_id && strlen(run_id) == RUN_ID_LEN;
}

static int
get_record(MDB_txn *txn, RunLog *l, const char *run_id, json_t **ret)
{
	MDB_val k = run_key(run_id), v;
	int rc = mdb_get(txn, l->runs, &k, &v);
	if (rc != 0)
		return mdb_errno(rc);
	json_t *j = json_loadb(v.mv_data, v.mv_size, 0, NULL);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		return -EUCLEAN;
	}
	*ret = j;
	return 0;
}

static int
put_record(MDB_txn *txn, RunLog *l, const char *run_id, const json_t *rec)
{
	_cleanup_free_ char *s = json_dump_compact(rec);
	if (!s)
		return -ENOMEM;
	MDB_val k = run_key(run_id), v = { strlen(s), s };
	return mdb_errno(mdb_put(txn, l->runs, &k, &v, 0));
}

static int
commit(MDB_txn *txn)
{
	/* mdb_txn_commit frees the txn on failure too; the data is not there. */
	return mdb_errno(mdb_txn_commit(txn));
}

int
runlog_create(RunLog *l, const char *run_id, const char *thread_id, const char *harness,
	      int64_t now_ms, bool *ret_created)
{
	MDB_txn *txn;
	json_t *existing = NULL, *rec = NULL;
	int r;

	if (!valid_run_id(run_id) || !thread_id || strlen(thread_id) > THREAD_ID_MAX)
		return -EINVAL;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, 0, &txn));
	if (r < 0)
		return r;
	r = get_record(txn, l, run_id, &existing);
	if (r == 0) {
		json_decref(existing);
		mdb_txn_abort(txn);
		if (ret_created)
			*ret_created = false;
		return 0;
	}
	if (r != -ENOENT)
		goto fail;

	rec = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "runId", run_id,
				     "threadId", thread_id, "status", "running", "lastSeq",
				     (json_int_t)-1, "startedAt", (json_int_t)now_ms, "updatedAt",
				     (json_int_t)now_ms);
	if (!rec) {
		r = -ENOMEM;
		goto fail;
	}
	if (harness)
		json_object_set_new(rec, "harness", json_string(harness));
	r = put_record(txn, l, run_id, rec);
	if (r < 0)
		goto fail;

	/* thread index: threadId \0 startedAt(BE) runId */
	size_t tl = strlen(thread_id);
	char key[THREAD_ID_MAX + 1 + 8 + RUN_ID_LEN];
	memcpy(key, thread_id, tl);
	key[tl] = '\0';
	for (int i = 0; i < 8; i++)
		key[tl + 1 + i] = (char)((uint64_t)now_ms >> (56 - 8 * i));
	memcpy(key + tl + 9, run_id, RUN_ID_LEN);
	MDB_val k = { tl + 9 + RUN_ID_LEN, key }, v = { 0, (void *)"" };
	r = mdb_errno(mdb_put(txn, l->thread_runs, &k, &v, 0));
	if (r < 0)
		goto fail;
	json_decref(rec);
	r = commit(txn);
	if (r < 0)
		return r;
	if (ret_created)
		*ret_created = true;
	return 0;
fail:
	json_decref(rec);
	mdb_txn_abort(txn);
	return r;
}

int
runlog_get(RunLog *l, const char *run_id, json_t **ret_record)
{
	MDB_txn *txn;
	int r;

	if (!valid_run_id(run_id))
		return -ENOENT;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		return r;
	r = get_record(txn, l, run_id, ret_record);
	mdb_txn_abort(txn);
	return r;
}

/* The shared body of append and append_finish: one transaction. */
static int
append_txn(RunLog *l, const char *run_id, const char *chunk, size_t len, const char *status,
	   const json_t *fields, int64_t now_ms, int64_t *ret_seq, json_t **ret_record)
{
	MDB_txn *txn;
	json_t *rec = NULL;
	int r;

	if (!valid_run_id(run_id))
		return -ENOENT;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, 0, &txn));
	if (r < 0)
		return r;
	r = get_record(txn, l, run_id, &rec);
	if (r < 0)
		goto fail;
	if (run_status_terminal(json_string_value(json_object_get(rec, "status")))) {
		r = -ESTALE;
		goto fail;
	}
	int64_t seq = json_integer_value(json_object_get(rec, "lastSeq")) + 1;
	char key[RUN_ID_LEN + 8];
	event_key(key, run_id, (uint64_t)seq);
	MDB_val k = { sizeof(key), key }, v = { len, (void *)chunk };
	/* MDB_NOOVERWRITE: a seq is written once; finding one there means the
	 * record and the events disagree, which must never be papered over. */
	r = mdb_errno(mdb_put(txn, l->events, &k, &v, MDB_NOOVERWRITE));
	if (r == -EEXIST)
		r = -EUCLEAN;
	if (r < 0)
		goto fail;
	/* caller fields first: the log's own fields must win over them */
	if (fields)
		json_object_update(rec, (json_t *)fields);
	json_object_set_new(rec, "lastSeq", json_integer(seq));
	json_object_set_new(rec, "updatedAt", json_integer(now_ms));
	if (status) {
		json_object_set_new(rec, "status", json_string(status));
		json_object_set_new(rec, "finishedAt", json_integer(now_ms));
	}
	r = put_record(txn, l, run_id, rec);
	if (r < 0)
		goto fail;
	r = commit(txn);
	if (r < 0) {
		json_decref(rec);
		return r;
	}
	if (ret_seq)
		*ret_seq = seq;
	if (ret_record)
		*ret_record = rec;
	else
		json_decref(rec);
	return 0;
fail:
	json_decref(rec);
	mdb_txn_abort(txn);
	return r;
}

int
runlog_append(RunLog *l, const char *run_id, const char *chunk, size_t len, int64_t now_ms,
	      int64_t *ret_seq, json_t **ret_record)
{
	return append_txn(l, run_id, chunk, len, NULL, NULL, now_ms, ret_seq, ret_record);
}

int
runlog_append_finish(RunLog *l, const char *run_id, const char *chunk, size_t len,
		     const char *status, const json_t *fields, int64_t now_ms, int64_t *ret_seq,
		     json_t **ret_record)
{
	if (!run_status_terminal(status))
		return -EINVAL;
	return append_txn(l, run_id, chunk, len, status, fields, now_ms, ret_seq, ret_record);
}

int
runlog_update(RunLog *l, const char *run_id, const json_t *fields, int64_t now_ms,
	      json_t **ret_record)
{
	MDB_txn *txn;
	json_t *rec = NULL;
	int r;

	if (!valid_run_id(run_id))
		return -ENOENT;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, 0, &txn));
	if (r < 0)
		return r;
	r = get_record(txn, l, run_id, &rec);
	if (r < 0)
		goto fail;
	if (run_status_terminal(json_string_value(json_object_get(rec, "status")))) {
		mdb_txn_abort(txn);
		goto done;
	}
	{
		/* the status, seq and clock of a record belong to the log */
		json_t *status = json_incref(json_object_get(rec, "status"));
		json_t *last = json_incref(json_object_get(rec, "lastSeq"));
		json_object_update(rec, (json_t *)fields);
		json_object_set_new(rec, "status", status);
		json_object_set_new(rec, "lastSeq", last);
	}
	json_object_set_new(rec, "updatedAt", json_integer(now_ms));
	r = put_record(txn, l, run_id, rec);
	if (r < 0)
		goto fail;
	r = commit(txn);
	if (r < 0) {
		json_decref(rec);
		return r;
	}
done:
	if (ret_record)
		*ret_record = rec;
	else
		json_decref(rec);
	return 0;
fail:
	json_decref(rec);
	mdb_txn_abort(txn);
	return r;
}

void
runlog_events_done(RunLogEvents *e)
{
	for (size_t i = 0; i < e->n; i++)
		free(e->texts[i]);
	free(e->texts);
	free(e->lens);
	*e = (RunLogEvents){ 0 };
}

int
runlog_read(RunLog *l, const char *run_id, int64_t from_seq, size_t max, RunLogEvents *ret_events,
	    json_t **ret_record)
{
	MDB_txn *txn;
	MDB_cursor *cur = NULL;
	RunLogEvents ev = { .first_seq = from_seq + 1 };
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
	MDB_val k = { sizeof(key), key }, v;
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
	if (ev.n < want)
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

static int
idem_key(char *buf, size_t bufsz, const char *thread_id, const char *key, MDB_val *ret)
{
	size_t tl = strlen(thread_id), kl = strlen(key);
	if (tl + 1 + kl > bufsz || tl + 1 + kl > 500) /* LMDB's key limit is 511 */
		return -E2BIG;
	memcpy(buf, thread_id, tl);
	buf[tl] = '\0';
	memcpy(buf + tl + 1, key, kl);
	*ret = (MDB_val){ tl + 1 + kl, buf };
	return 0;
}

int
runlog_idem_get(RunLog *l, const char *thread_id, const char *key, char ret[RUN_ID_LEN + 1])
{
	char buf[512];
	MDB_val k, v;
	MDB_txn *txn;
	int r = idem_key(buf, sizeof(buf), thread_id, key, &k);
	if (r < 0)
		return r;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		return r;
	r = mdb_errno(mdb_get(txn, l->idem, &k, &v));
	if (r == 0 && v.mv_size == RUN_ID_LEN) {
		memcpy(ret, v.mv_data, RUN_ID_LEN);
		ret[RUN_ID_LEN] = '\0';
	} else if (r == 0)
		r = -EUCLEAN;
	mdb_txn_abort(txn);
	return r;
}

int
runlog_idem_put(RunLog *l, const char *thread_id, const char *key, const char *run_id)
{
	char buf[512];
	MDB_val k, v = { RUN_ID_LEN, (void *)run_id };
	MDB_txn *txn;
	int r = idem_key(buf, sizeof(buf), thread_id, key, &k);
	if (r < 0)
		return r;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, 0, &txn));
	if (r < 0)
		return r;
	r = mdb_errno(mdb_put(txn, l->idem, &k, &v, 0));
	if (r < 0) {
		mdb_txn_abort(txn);
		return r;
	}
	return commit(txn);
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
	r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0) {
		json_decref(list);
		return r;
	}
	r = mdb_errno(mdb_cursor_open(txn, l->runs, &cur));
	if (r < 0) {
		mdb_txn_abort(txn);
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
	json_array_foreach (list, i, rec) {
		const char *id = json_string_value(json_object_get(rec, "runId"));
		if (id)
			fn(id, rec, ud);
	}
	json_decref(list);
	return rc == MDB_NOTFOUND ? 0 : mdb_errno(rc);
}
