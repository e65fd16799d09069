/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "runlog.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fd-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"

struct RunLog {
	MDB_env *env;
	MDB_dbi runs, events, thread_runs, idem, meta, drive, inputs;
	char *dir;
	RunLogOptions opts;
	bool preallocated;
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
	free(l->dir);
	free(l);
	return NULL;
}

static int
env_open(RunLog *l)
{
	MDB_txn *txn = NULL;
	int rc;

	rc = mdb_env_create(&l->env);
	if (rc == 0)
		rc = mdb_env_set_maxdbs(l->env, 8);
	if (rc == 0)
		rc = mdb_env_set_mapsize(l->env, l->opts.map_size);
	if (rc == 0)
		rc =
		    mdb_env_open(l->env, l->dir, MDB_NOTLS | (l->opts.sync ? 0 : MDB_NOSYNC), 0600);
	if (rc == 0 && l->opts.preallocate) {
		mdb_filehandle_t fd;
		rc = mdb_env_get_fd(l->env, &fd);
		if (rc == 0 && fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, (off_t)l->opts.map_size) < 0) {
			if (errno == EOPNOTSUPP || errno == ENOSYS)
				l->preallocated = false; /* e.g. a filesystem without it */
			else
				rc = errno;
		} else if (rc == 0)
			l->preallocated = true;
	}
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
	if (rc == 0)
		rc = mdb_dbi_open(txn, "drive", MDB_CREATE, &l->drive);
	if (rc == 0)
		rc = mdb_dbi_open(txn, "inputs", MDB_CREATE, &l->inputs);
	if (rc == 0) {
		MDB_val k = {6, (void *)"schema"}, v;
		rc = mdb_get(txn, l->meta, &k, &v);
		if (rc == MDB_NOTFOUND) {
			v = (MDB_val){1, (void *)"1"};
			rc = mdb_put(txn, l->meta, &k, &v, 0);
		} else if (rc == 0 && !(v.mv_size == 1 && *(char *)v.mv_data == '1')) {
			rc = MDB_VERSION_MISMATCH;
		}
	}
	if (rc == 0) {
		rc = mdb_txn_commit(txn);
		txn = NULL;
	}
	if (txn)
		mdb_txn_abort(txn);
	if (rc != 0 && l->env) {
		mdb_env_close(l->env);
		l->env = NULL;
	}
	return mdb_errno(rc);
}

bool
runlog_preallocated(const RunLog *l)
{
	return l->preallocated;
}

int
runlog_open(const char *dir, const RunLogOptions *opts, RunLog **ret)
{
	RunLog *l = calloc(1, sizeof(*l));
	int r;

	if (!l)
		return -ENOMEM;
	l->opts = *opts;
	l->dir = strdup(dir);
	r = l->dir ? mkdir_p(dir, 0700) : -ENOMEM;
	if (r == 0)
		r = env_open(l);
	if (r < 0) {
		runlog_free(l);
		return r;
	}
	*ret = l;
	return 0;
}

int
runlog_recover(RunLog *l)
{
	MDB_txn *txn;
	int rc = mdb_txn_begin(l->env, NULL, 0, &txn);

	if (rc == 0) {
		mdb_txn_abort(txn);
		return 0; /* the environment is sound: the failed commit left nothing */
	}
	if (rc != MDB_PANIC)
		return mdb_errno(rc);
	/* A failed meta-page write leaves LMDB in doubt (MDB_PANIC). Reopen: what
	 * is on disk is the last commit that fully succeeded. */
	mdb_env_close(l->env);
	l->env = NULL;
	int r = env_open(l);
	return r < 0 ? r : 1;
}

static MDB_val
run_key(const char *run_id)
{
	return (MDB_val){strlen(run_id), (void *)run_id};
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
	MDB_val k = run_key(run_id), v = {strlen(s), s};
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
	char id[RUN_ID_LEN + 1];

	if (!valid_run_id(run_id))
		return -EINVAL;
	memcpy(id, run_id, RUN_ID_LEN + 1);
	return runlog_create_keyed(l, id, thread_id, harness, now_ms, NULL, ret_created);
}

static int idem_key(char *buf, size_t bufsz, const char *thread_id, const char *key, MDB_val *ret);
static int idem_put_txn(MDB_txn *txn, RunLog *l, const MDB_val *k, const char *run_id);

/* The run, its thread index entry, the key idem of idem_thread (the run's
 * thread, or "" for a /chat alias) and its input, in one transaction. */
static int
create_txn(RunLog *l, char run_id[RUN_ID_LEN + 1], const char *thread_id, const char *harness,
	   int64_t now_ms, const char *idem_thread, const char *idem, const char *input,
	   bool *ret_created)
{
	MDB_txn *txn;
	json_t *existing = NULL, *rec = NULL;
	char ibuf[512];
	MDB_val ik, iv;
	int r;

	if (!valid_run_id(run_id) || !thread_id || strlen(thread_id) > THREAD_ID_MAX)
		return -EINVAL;
	if (idem) {
		r = idem_key(ibuf, sizeof(ibuf), idem_thread, idem, &ik);
		if (r < 0)
			return r;
	}
	r = mdb_errno(mdb_txn_begin(l->env, NULL, 0, &txn));
	if (r < 0)
		return r;
	/* Write transactions are serialised: the key's look-up and its store
	 * below are one atomic step, and the key is durable exactly when the
	 * run is. */
	if (idem) {
		r = mdb_errno(mdb_get(txn, l->idem, &ik, &iv));
		if (r == 0) {
			mdb_txn_abort(txn);
			if (iv.mv_size != RUN_ID_LEN)
				return -EUCLEAN;
			memcpy(run_id, iv.mv_data, RUN_ID_LEN);
			run_id[RUN_ID_LEN] = '\0';
			if (ret_created)
				*ret_created = false;
			return 0;
		}
		if (r != -ENOENT)
			goto fail;
	}
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

	rec = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "runId", run_id, "threadId", thread_id,
			"status", "running", "lastSeq", (json_int_t)-1, "startedAt",
			(json_int_t)now_ms, "updatedAt", (json_int_t)now_ms);
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
	MDB_val k = {tl + 9 + RUN_ID_LEN, key}, v = {0, (void *)""};
	r = mdb_errno(mdb_put(txn, l->thread_runs, &k, &v, 0));
	if (r == 0 && idem)
		r = idem_put_txn(txn, l, &ik, run_id);
	if (r == 0 && input) {
		MDB_val rk = run_key(run_id), in = {strlen(input), (void *)input};
		r = mdb_errno(mdb_put(txn, l->inputs, &rk, &in, 0));
	}
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
runlog_create_keyed(RunLog *l, char run_id[RUN_ID_LEN + 1], const char *thread_id,
		    const char *harness, int64_t now_ms, const char *idem, bool *ret_created)
{
	return create_txn(l, run_id, thread_id, harness, now_ms, thread_id, idem, NULL,
			  ret_created);
}

int
runlog_create_aliased(RunLog *l, char run_id[RUN_ID_LEN + 1], const char *thread_id,
		      const char *harness, int64_t now_ms, const char *alias, const char *input,
		      bool *ret_created)
{
	if (!alias || !*alias)
		return -EINVAL;
	return create_txn(l, run_id, thread_id, harness, now_ms, "", alias, input, ret_created);
}

int
runlog_alias_get(RunLog *l, const char *alias, char ret[RUN_ID_LEN + 1])
{
	if (!alias || !*alias)
		return -ENOENT;
	return runlog_idem_get(l, "", alias, ret);
}

int
runlog_input_get(RunLog *l, const char *run_id, char **ret)
{
	MDB_txn *txn;
	MDB_val k, v;
	int r;

	if (!valid_run_id(run_id))
		return -ENOENT;
	k = run_key(run_id);
	r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		return r;
	r = mdb_errno(mdb_get(txn, l->inputs, &k, &v));
	if (r == 0) {
		*ret = strndup(v.mv_data, v.mv_size);
		if (!*ret)
			r = -ENOMEM;
	}
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

/* ---------- batches (group commit) ---------- */

typedef struct BatchRun {
	char run_id[RUN_ID_LEN + 1];
	json_t *rec; /* the record as this batch leaves it */
	bool dirty;
} BatchRun;

struct RunLogBatch {
	RunLog *l;
	MDB_txn *txn;
	BatchRun *runs;
	size_t n_runs, cap_runs;
	int err; /* sticky: a storage error poisons the whole transaction */
};

static void
batch_free(RunLogBatch *b)
{
	for (size_t i = 0; i < b->n_runs; i++)
		json_decref(b->runs[i].rec);
	free(b->runs);
	free(b);
}

int
runlog_batch_begin(RunLog *l, RunLogBatch **ret)
{
	RunLogBatch *b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->l = l;
	int r = mdb_errno(mdb_txn_begin(l->env, NULL, 0, &b->txn));
	if (r < 0) {
		free(b);
		return r;
	}
	*ret = b;
	return 0;
}

void
runlog_batch_abort(RunLogBatch *b)
{
	if (!b)
		return;
	if (b->txn)
		mdb_txn_abort(b->txn);
	batch_free(b);
}

/* The batch's view of a record: cached after the first touch. */
static int
batch_record(RunLogBatch *b, const char *run_id, BatchRun **ret)
{
	for (size_t i = 0; i < b->n_runs; i++)
		if (streq(b->runs[i].run_id, run_id)) {
			*ret = &b->runs[i];
			return 0;
		}
	json_t *rec;
	int r = get_record(b->txn, b->l, run_id, &rec);
	if (r < 0)
		return r;
	if (b->n_runs == b->cap_runs) {
		size_t cap = b->cap_runs ? b->cap_runs * 2 : 8;
		BatchRun *n = realloc(b->runs, cap * sizeof(*n));
		if (!n) {
			json_decref(rec);
			return -ENOMEM;
		}
		b->runs = n;
		b->cap_runs = cap;
	}
	BatchRun *br = &b->runs[b->n_runs++];
	memcpy(br->run_id, run_id, RUN_ID_LEN + 1);
	br->rec = rec;
	br->dirty = false;
	*ret = br;
	return 0;
}

static bool
rec_terminal(const json_t *rec)
{
	return run_status_terminal(json_string_value(json_object_get(rec, "status")));
}

static int batch_append(RunLogBatch *b, const char *run_id, const char *chunk, size_t len,
			const char *status, const json_t *fields, int64_t now_ms, int64_t *ret_seq,
			bool soft);

int
runlog_batch_append(RunLogBatch *b, const char *run_id, const char *chunk, size_t len,
		    const char *status, const json_t *fields, int64_t now_ms, int64_t *ret_seq)
{
	return batch_append(b, run_id, chunk, len, status, fields, now_ms, ret_seq, false);
}

int
runlog_batch_append_soft(RunLogBatch *b, const char *run_id, const char *chunk, size_t len,
			 const json_t *fields, int64_t now_ms, int64_t *ret_seq)
{
	return batch_append(b, run_id, chunk, len, NULL, fields, now_ms, ret_seq, true);
}

static int
batch_append(RunLogBatch *b, const char *run_id, const char *chunk, size_t len, const char *status,
	     const json_t *fields, int64_t now_ms, int64_t *ret_seq, bool soft)
{
	BatchRun *br;
	int r;

	if (b->err < 0)
		return b->err;
	if (!valid_run_id(run_id))
		return -ENOENT;
	if (status && !run_status_terminal(status))
		return -EINVAL;
	r = batch_record(b, run_id, &br);
	if (r == -ENOENT || r == -EUCLEAN)
		return r; /* this op only */
	if (r < 0)
		return b->err = r;
	if (rec_terminal(br->rec))
		return -ESTALE;
	int64_t seq = json_integer_value(json_object_get(br->rec, "lastSeq")) + 1;
	char key[RUN_ID_LEN + 8];
	event_key(key, run_id, (uint64_t)seq);
	MDB_val k = {sizeof(key), key}, v = {len, (void *)chunk};
	/* soft: in a nested transaction, so that a full map (MDB_MAP_FULL: no
	 * room at the map's end nor a long enough run of free pages for this
	 * value) refuses this event alone and leaves the batch usable */
	MDB_txn *txn = b->txn, *child = NULL;
	if (soft) {
		r = mdb_errno(mdb_txn_begin(b->l->env, b->txn, 0, &child));
		if (r < 0)
			return b->err = r;
		txn = child;
	}
	/* MDB_NOOVERWRITE: a seq is written once; finding one there means the
	 * record and the events disagree, which must never be papered over. */
	int rc = mdb_put(txn, b->l->events, &k, &v, MDB_NOOVERWRITE);
	if (child && (rc == MDB_MAP_FULL || rc == MDB_TXN_FULL)) {
		mdb_txn_abort(child);
		return -ENOSPC; /* this op only */
	}
	if (child && rc == 0)
		rc = mdb_txn_commit(child); /* into the batch: no I/O */
	else if (child)
		mdb_txn_abort(child);
	r = mdb_errno(rc);
	if (r == -EEXIST)
		return b->err = -EUCLEAN;
	if (r < 0)
		return b->err = r;
	/* caller fields first: the log's own fields must win over them */
	if (fields)
		json_object_update(br->rec, (json_t *)fields);
	json_object_set_new(br->rec, "lastSeq", json_integer(seq));
	json_object_set_new(br->rec, "updatedAt", json_integer(now_ms));
	if (status) {
		json_object_set_new(br->rec, "status", json_string(status));
		json_object_set_new(br->rec, "finishedAt", json_integer(now_ms));
	}
	br->dirty = true;
	if (ret_seq)
		*ret_seq = seq;
	return 0;
}

int
runlog_batch_finish(RunLogBatch *b, const char *run_id, const char *status, const json_t *fields,
		    int64_t now_ms)
{
	BatchRun *br;
	int r;

	if (b->err < 0)
		return b->err;
	if (!valid_run_id(run_id))
		return -ENOENT;
	if (!run_status_terminal(status))
		return -EINVAL;
	r = batch_record(b, run_id, &br);
	if (r == -ENOENT || r == -EUCLEAN)
		return r;
	if (r < 0)
		return b->err = r;
	if (rec_terminal(br->rec))
		return -ESTALE;
	if (fields)
		json_object_update(br->rec, (json_t *)fields);
	json_object_set_new(br->rec, "status", json_string(status));
	json_object_set_new(br->rec, "updatedAt", json_integer(now_ms));
	json_object_set_new(br->rec, "finishedAt", json_integer(now_ms));
	br->dirty = true;
	return 0;
}

int
runlog_batch_drive_put(RunLogBatch *b, const char *run_id, const json_t *state)
{
	if (b->err < 0)
		return b->err;
	_cleanup_free_ char *s = state ? json_dump_compact(state) : NULL;
	MDB_val k = run_key(run_id);
	int r;
	if (!state) {
		r = mdb_errno(mdb_del(b->txn, b->l->drive, &k, NULL));
		if (r == -ENOENT)
			r = 0;
	} else if (!s) {
		return -ENOMEM;
	} else {
		MDB_val v = {strlen(s), s};
		r = mdb_errno(mdb_put(b->txn, b->l->drive, &k, &v, 0));
	}
	if (r < 0)
		b->err = r;
	return r;
}

json_t *
runlog_batch_get_record(RunLogBatch *b, const char *run_id)
{
	for (size_t i = 0; i < b->n_runs; i++)
		if (streq(b->runs[i].run_id, run_id))
			return json_incref(b->runs[i].rec);
	return NULL;
}

int
runlog_batch_commit(RunLogBatch *b)
{
	int r = b->err;

	for (size_t i = 0; r == 0 && i < b->n_runs; i++)
		if (b->runs[i].dirty)
			r = put_record(b->txn, b->l, b->runs[i].run_id, b->runs[i].rec);
	if (r < 0) {
		mdb_txn_abort(b->txn);
		b->txn = NULL;
		b->err = r;
		return r;
	}
	r = commit(b->txn); /* frees the txn, also on failure */
	b->txn = NULL;
	if (r < 0)
		b->err = r;
	return r;
}

void
runlog_batch_free(RunLogBatch *b)
{
	if (!b)
		return;
	if (b->txn)
		mdb_txn_abort(b->txn);
	batch_free(b);
}

/* One append (and maybe finish) in a batch of its own. */
static int
append_one(RunLog *l, const char *run_id, const char *chunk, size_t len, const char *status,
	   const json_t *fields, int64_t now_ms, int64_t *ret_seq, json_t **ret_record)
{
	RunLogBatch *b;
	int64_t seq;
	int r = runlog_batch_begin(l, &b);
	if (r < 0)
		return r;
	r = runlog_batch_append(b, run_id, chunk, len, status, fields, now_ms, &seq);
	if (r == 0)
		r = runlog_batch_commit(b);
	if (r == 0) {
		if (ret_seq)
			*ret_seq = seq;
		if (ret_record)
			*ret_record = runlog_batch_get_record(b, run_id);
	}
	runlog_batch_free(b);
	return r;
}

int
runlog_append(RunLog *l, const char *run_id, const char *chunk, size_t len, int64_t now_ms,
	      int64_t *ret_seq, json_t **ret_record)
{
	return append_one(l, run_id, chunk, len, NULL, NULL, now_ms, ret_seq, ret_record);
}

int
runlog_append_finish(RunLog *l, const char *run_id, const char *chunk, size_t len,
		     const char *status, const json_t *fields, int64_t now_ms, int64_t *ret_seq,
		     json_t **ret_record)
{
	if (!run_status_terminal(status))
		return -EINVAL;
	return append_one(l, run_id, chunk, len, status, fields, now_ms, ret_seq, ret_record);
}

int
runlog_finish_if_stale(RunLog *l, const char *run_id, int64_t cutoff_ms, const char *chunk,
		       size_t len, const json_t *fields, int64_t now_ms, json_t **ret_record,
		       int64_t *ret_seq)
{
	return runlog_finish_if_stale_n(l, run_id, cutoff_ms, &chunk, &len, 1, fields, now_ms,
					ret_record, ret_seq);
}

int
runlog_finish_if_stale_n(RunLog *l, const char *run_id, int64_t cutoff_ms,
			 const char *const *chunks, const size_t *lens, size_t n,
			 const json_t *fields, int64_t now_ms, json_t **ret_record,
			 int64_t *ret_first_seq)
{
	RunLogBatch *b;
	BatchRun *br;
	int64_t seq, first = -1;
	if (n == 0)
		return -EINVAL;
	int r = runlog_batch_begin(l, &b);
	if (r < 0)
		return r;
	r = batch_record(b, run_id, &br);
	if (r == 0 && (rec_terminal(br->rec) ||
		       json_integer_value(json_object_get(br->rec, "updatedAt")) >= cutoff_ms))
		r = 1; /* fresh (or over): nothing to do */
	for (size_t i = 0; r == 0 && i < n; i++) {
		r = runlog_batch_append(b, run_id, chunks[i], lens[i], i + 1 == n ? "failed" : NULL,
					i + 1 == n ? fields : NULL, now_ms, &seq);
		if (i == 0)
			first = seq;
	}
	if (r == 0)
		r = runlog_batch_commit(b);
	if (r == 0) {
		if (ret_record)
			*ret_record = runlog_batch_get_record(b, run_id);
		if (ret_first_seq)
			*ret_first_seq = first;
	}
	runlog_batch_free(b);
	return r;
}

int
runlog_touch(RunLog *l, const char *run_id, int64_t now_ms)
{
	json_auto_t *none = json_object();
	return runlog_update(l, run_id, none, now_ms, NULL);
}

int
runlog_drive_get(RunLog *l, const char *run_id, json_t **ret)
{
	MDB_txn *txn;
	MDB_val k = run_key(run_id), v;
	int r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		return r;
	r = mdb_errno(mdb_get(txn, l->drive, &k, &v));
	if (r == 0) {
		json_t *j = json_loadb(v.mv_data, v.mv_size, 0, NULL);
		if (!json_is_object(j)) {
			json_decref(j);
			r = -EUCLEAN;
		} else
			*ret = j;
	}
	mdb_txn_abort(txn);
	return r;
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

static int
idem_key(char *buf, size_t bufsz, const char *thread_id, const char *key, MDB_val *ret)
{
	size_t tl = strlen(thread_id), kl = strlen(key);
	if (tl + 1 + kl > bufsz || tl + 1 + kl > 500) /* LMDB's key limit is 511 */
		return -E2BIG;
	memcpy(buf, thread_id, tl);
	buf[tl] = '\0';
	memcpy(buf + tl + 1, key, kl);
	*ret = (MDB_val){tl + 1 + kl, buf};
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

static int
idem_put_txn(MDB_txn *txn, RunLog *l, const MDB_val *k, const char *run_id)
{
	MDB_val v = {RUN_ID_LEN, (void *)run_id};
	int r = mdb_errno(mdb_put(txn, l->idem, (MDB_val *)k, &v, 0));
	if (r == 0) {
		/* reverse entry "\x01" runId → thread\0key, so pruning the run
		 * can drop its key (thread ids never hold control bytes) */
		char rk[1 + RUN_ID_LEN];
		rk[0] = 1;
		memcpy(rk + 1, run_id, RUN_ID_LEN);
		MDB_val rkv = {sizeof(rk), rk};
		r = mdb_errno(mdb_put(txn, l->idem, &rkv, (MDB_val *)k, 0));
	}
	return r;
}

int
runlog_idem_put(RunLog *l, const char *thread_id, const char *key, const char *run_id)
{
	char buf[512];
	MDB_val k;
	MDB_txn *txn;
	int r = idem_key(buf, sizeof(buf), thread_id, key, &k);
	if (r < 0)
		return r;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, 0, &txn));
	if (r < 0)
		return r;
	r = idem_put_txn(txn, l, &k, run_id);
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
	json_array_foreach(list, i, rec)
	{
		const char *id = json_string_value(json_object_get(rec, "runId"));
		if (id)
			fn(id, rec, ud);
	}
	json_decref(list);
	return rc == MDB_NOTFOUND ? 0 : mdb_errno(rc);
}

int
runlog_thread_runs(RunLog *l, const char *thread_id, const char *status, json_t **ret)
{
	size_t tl = strlen(thread_id);
	char prefix[THREAD_ID_MAX + 1];
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	int r, rc;

	if (tl == 0 || tl > THREAD_ID_MAX)
		return -EINVAL;
	memcpy(prefix, thread_id, tl);
	prefix[tl] = '\0';
	json_t *out = json_array();
	if (!out)
		return -ENOMEM;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		goto fail;
	r = mdb_errno(mdb_cursor_open(txn, l->thread_runs, &cur));
	if (r < 0) {
		mdb_txn_abort(txn);
		goto fail;
	}
	k = (MDB_val){tl + 1, prefix};
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != tl + 1 + 8 + RUN_ID_LEN || memcmp(k.mv_data, prefix, tl + 1) != 0)
			break;
		char id[RUN_ID_LEN + 1];
		memcpy(id, (char *)k.mv_data + tl + 9, RUN_ID_LEN);
		id[RUN_ID_LEN] = '\0';
		json_t *rec;
		if (get_record(txn, l, id, &rec) < 0)
			continue; /* pruned under us: the index entry goes with the next prune */
		if (status &&
		    !streq(status, json_string_value(json_object_get(rec, "status")) ?: "")) {
			json_decref(rec);
			continue;
		}
		json_array_insert_new(out, 0, rec); /* newest first */
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
prune_batch(RunLog *l, MDB_txn *txn, char (*ids)[RUN_ID_LEN + 1], json_t **recs, size_t n, int r)
{
	for (size_t i = 0; i < n && r == 0; i++)
		r = prune_one(l, txn, ids[i], recs[i]);
	for (size_t i = 0; i < n; i++)
		json_decref(recs[i]);
	if (r < 0) {
		mdb_txn_abort(txn);
		return r;
	}
	return commit(txn);
}

int
runlog_prune(RunLog *l, int64_t cutoff_ms, size_t max_pruned, size_t max_scanned,
	     char cursor[RUN_ID_LEN + 1], size_t *ret_pruned)
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
	r = mdb_errno(mdb_txn_begin(l->env, NULL, 0, &txn));
	if (r < 0)
		return r;
	r = mdb_errno(mdb_cursor_open(txn, l->runs, &cur));
	if (r < 0) {
		mdb_txn_abort(txn);
		return r;
	}
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
	r = prune_batch(l, txn, ids, recs, n, r);
	if (r == 0 && ret_pruned)
		*ret_pruned = n;
	return r;
}

/* Pages of live data: every database's branch, leaf and overflow pages, the
 * free list's own pages and the two meta pages. Pages on the free list are
 * reusable and not counted. */
static int
txn_usage(RunLog *l, MDB_txn *txn, uint64_t *ret_used)
{
	const MDB_dbi dbis[] = {0 /* FREE_DBI */, 1 /* MAIN_DBI */, l->runs,
				l->events,	  l->thread_runs,   l->idem,
				l->meta,	  l->drive,	    l->inputs};
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
runlog_batch_usage(RunLogBatch *b, uint64_t *ret_used)
{
	return txn_usage(b->l, b->txn, ret_used);
}

int
runlog_prune_oldest(RunLog *l, size_t max_pruned, size_t *ret_pruned)
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
	r = mdb_errno(mdb_txn_begin(l->env, NULL, 0, &txn));
	if (r < 0)
		return r;
	r = mdb_errno(mdb_cursor_open(txn, l->runs, &cur));
	if (r < 0) {
		mdb_txn_abort(txn);
		return r;
	}
	/* one pass over the records (small) keeping the max_pruned oldest
	 * terminal runs by finishedAt, sorted ascending */
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		if (k.mv_size != RUN_ID_LEN)
			continue;
		json_t *rec = json_loadb(v.mv_data, v.mv_size, 0, NULL);
		json_t *fin = json_object_get(rec, "finishedAt");
		if (!rec || !rec_terminal(rec) || !json_is_integer(fin)) {
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
	r = prune_batch(l, txn, ids, recs, n, r);
	if (r == 0)
		*ret_pruned = n;
	return r;
}

/* ---------- the host's threads (THREAD_LIST) ---------- */

typedef struct ThreadHead {
	int64_t last_ms; /* startedAt of the thread's newest run */
	char thread_id[THREAD_ID_MAX + 1];
	char run_id[RUN_ID_LEN + 1];
} ThreadHead;

static bool
scope_allows(char *const *scope, const char *thread_id)
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

/* One entry per thread: the thread_runs index is sorted by threadId, then
 * startedAt, so a thread's newest run is the entry just before threadId ‖
 * 0x01 (ids are printable, never 0x00 or 0x01). The walk touches two keys per
 * thread, whatever the number of its runs. */
static int
thread_heads(RunLog *l, MDB_txn *txn, const char *prefix, char *const *scope, ThreadHead **ret,
	     size_t *ret_n)
{
	size_t pl = prefix ? strlen(prefix) : 0, n = 0, cap = 0;
	_cleanup_free_ ThreadHead *heads = NULL;
	MDB_cursor *cur;
	MDB_val k, v;
	int r, rc;

	r = mdb_errno(mdb_cursor_open(txn, l->thread_runs, &cur));
	if (r < 0)
		return r;
	if (pl > 0) {
		k = (MDB_val){pl, (void *)prefix};
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
	} else
		rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
	while (rc == 0) {
		const char *kd = k.mv_data;
		const char *z = memchr(kd, '\0', k.mv_size);
		size_t tl = z ? (size_t)(z - kd) : k.mv_size;
		char seek[THREAD_ID_MAX + 1];

		if (pl > 0 && (tl < pl || memcmp(kd, prefix, pl) != 0))
			break;
		if (!z || tl == 0 || tl > THREAD_ID_MAX) { /* not an index key: step over */
			rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
			continue;
		}
		memcpy(seek, kd, tl);
		seek[tl] = '\x01';
		k = (MDB_val){tl + 1, seek};
		rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
		if (rc == 0)
			rc = mdb_cursor_get(cur, &k, &v, MDB_PREV);
		else if (rc == MDB_NOTFOUND)
			rc = mdb_cursor_get(cur, &k, &v, MDB_LAST);
		if (rc != 0)
			break;
		if (k.mv_size == tl + 1 + 8 + RUN_ID_LEN && memcmp(k.mv_data, seek, tl) == 0) {
			seek[tl] = '\0';
			if (scope_allows(scope, seek)) {
				if (n == cap) {
					size_t nc = cap ? cap * 2 : 64;
					ThreadHead *nh = reallocarray(heads, nc, sizeof(*heads));
					if (!nh) {
						mdb_cursor_close(cur);
						return -ENOMEM;
					}
					heads = nh;
					cap = nc;
				}
				ThreadHead *h = &heads[n++];
				const unsigned char *ts = (const unsigned char *)k.mv_data + tl + 1;
				uint64_t ms = 0;
				for (int i = 0; i < 8; i++)
					ms = ms << 8 | ts[i];
				h->last_ms = (int64_t)ms;
				memcpy(h->thread_id, seek, tl + 1);
				memcpy(h->run_id, ts + 8, RUN_ID_LEN);
				h->run_id[RUN_ID_LEN] = '\0';
			}
		}
		rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
	}
	mdb_cursor_close(cur);
	if (rc != 0 && rc != MDB_NOTFOUND)
		return mdb_errno(rc);
	*ret = TAKE_PTR(heads);
	*ret_n = n;
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
	json_t *out = json_array();
	if (!out)
		return -ENOMEM;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		goto fail;
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
		if (q->status &&
		    !streq(q->status, json_string_value(json_object_get(rec, "status")) ?: "")) {
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
