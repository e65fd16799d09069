/* SPDX-License-Identifier: MIT */
/*
 * runlog.c — the run log's LMDB environment and its writes: creating runs
 * (with their idempotency keys and input), batches for the group commit,
 * appends, status changes and the driver state. Reads are runlog-read.c,
 * retention runlog-prune.c (runlog-int.h).
 */
#include "config.h"

#include "runlog.h"

#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "buf.h"
#include "fd-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"

#include "runlog-int.h"

bool
run_status_terminal(const char *s)
{
	return s && (streq(s, "completed") || streq(s, "failed") || streq(s, "aborted"));
}

static void
rec_cache_clear(RunLog *l)
{
	for (size_t i = 0; i < REC_CACHE_MAX; i++) {
		json_decref(l->rec_cache[i].rec);
		l->rec_cache[i] = (RecCache){0};
	}
	l->rec_cache_next = 0;
	l->cache_txnid = 0;
}

/* The cached record of run_id, taken out of the cache (the batch changes it
 * in place: a copy when someone still holds the cached one), or NULL. */
static json_t *
rec_cache_take(RunLog *l, const char *run_id)
{
	for (size_t i = 0; i < REC_CACHE_MAX; i++) {
		RecCache *e = &l->rec_cache[i];
		if (!e->rec || memcmp(e->run_id, run_id, RUN_ID_LEN) != 0)
			continue;
		json_t *rec = e->rec;
		e->rec = NULL;
		if (rec->refcount > 1) {
			json_t *copy = json_deep_copy(rec);
			json_decref(rec);
			rec = copy;
		}
		return rec;
	}
	return NULL;
}

static void
rec_cache_put(RunLog *l, const char *run_id, json_t *rec)
{
	RecCache *e = &l->rec_cache[l->rec_cache_next];
	l->rec_cache_next = (l->rec_cache_next + 1) % REC_CACHE_MAX;
	json_decref(e->rec);
	memcpy(e->run_id, run_id, RUN_ID_LEN + 1);
	e->rec = rec;
}

RunLog *
runlog_free(RunLog *l)
{
	if (!l)
		return NULL;
	rec_cache_clear(l);
	if (l->env)
		mdb_env_close(l->env);
	record_cache_free(l);
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
		rc = mdb_env_set_maxdbs(l->env, 9);
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
	if (rc == 0)
		rc = mdb_dbi_open(txn, "owners", MDB_CREATE, &l->owners);
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
	rec_cache_clear(l);
	mdb_env_close(l->env);
	l->env = NULL;
	int r = env_open(l);
	return r < 0 ? r : 1;
}

int
runlog_create(RunLog *l, const char *run_id, const char *thread_id, const char *harness,
	      int64_t now_ms, bool *ret_created)
{
	char id[RUN_ID_LEN + 1];

	if (!valid_run_id(run_id))
		return -EINVAL;
	memcpy(id, run_id, RUN_ID_LEN + 1);
	return runlog_create_keyed(l, id, thread_id, harness, NULL, now_ms, NULL, ret_created);
}

static int idem_key(char *buf, size_t bufsz, const char *thread_id, const char *key, MDB_val *ret);
static int idem_put_txn(MDB_txn *txn, RunLog *l, const MDB_val *k, const char *run_id);

/* A new run's record (running, lastSeq -1) and its thread index entry, put in
 * txn; *ret_rec gets the record. */
static int
new_run_txn(MDB_txn *txn, RunLog *l, const char *run_id, const char *thread_id, const char *harness,
	    const char *tenant, int64_t now_ms, json_t **ret_rec)
{
	json_t *rec = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I}", "runId", run_id, "threadId",
				thread_id, "status", "running", "lastSeq", (json_int_t)-1,
				"startedAt", (json_int_t)now_ms, "updatedAt", (json_int_t)now_ms);
	if (!rec)
		return -ENOMEM;
	if (harness)
		json_object_set_new(rec, "harness", json_string(harness));
	if (tenant)
		json_object_set_new(rec, "tenant", json_string(tenant));
	int r = put_record(txn, l, run_id, rec);
	if (r < 0) {
		json_decref(rec);
		return r;
	}
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
	if (r < 0) {
		json_decref(rec);
		return r;
	}
	*ret_rec = rec;
	return 0;
}

/* The run, its thread index entry, the key *idem (an idempotency key, or a
 * /chat client's run id: alias_key) and its input, in one transaction. */
static int idem_key(char *buf, size_t bufsz, const char *thread_id, const char *key, MDB_val *ret);

static int
create_txn(RunLog *l, char run_id[RUN_ID_LEN + 1], const char *thread_id, const char *harness,
	   const char *tenant, int64_t now_ms, const MDB_val *idem, const char *input,
	   bool *ret_created)
{
	MDB_txn *txn;
	json_t *existing = NULL, *rec = NULL;
	MDB_val ik = idem ? *idem : (MDB_val){0}, iv;
	int r;

	if (!valid_run_id(run_id) || !thread_id || strlen(thread_id) > THREAD_ID_MAX)
		return -EINVAL;
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

	r = new_run_txn(txn, l, run_id, thread_id, harness, tenant, now_ms, &rec);
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
		    const char *harness, const char *tenant, int64_t now_ms, const char *idem,
		    bool *ret_created)
{
	char buf[512];
	MDB_val k;

	if (idem) {
		int r = idem_key(buf, sizeof(buf), thread_id, idem, &k);
		if (r < 0)
			return r;
	}
	return create_txn(l, run_id, thread_id, harness, tenant, now_ms, idem ? &k : NULL, NULL,
			  ret_created);
}

int
runlog_create_aliased(RunLog *l, char run_id[RUN_ID_LEN + 1], const char *thread_id,
		      const char *harness, const char *tenant, int64_t now_ms, const char *alias,
		      const char *input, bool *ret_created)
{
	char buf[512];
	MDB_val k;
	int r;

	if (!alias || !*alias || !thread_id || !*thread_id)
		return -EINVAL;
	/* a log written before aliases were per thread: its key still names
	 * this thread's run (another thread's is not seen) */
	r = runlog_alias_legacy(l, alias, thread_id, NULL, run_id);
	if (r == 0) {
		if (ret_created)
			*ret_created = false;
		return 0;
	}
	r = alias_key(buf, sizeof(buf), alias, thread_id, &k);
	if (r < 0)
		return r;
	return create_txn(l, run_id, thread_id, harness, tenant, now_ms, &k, input, ret_created);
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
	size_t txnid;
	BatchRun *runs;
	size_t n_runs, cap_runs;
	int err; /* sticky: a storage error poisons the whole transaction */
	/* What the batch's puts may allocate, in pages (batch_spend): room is
	 * what lies past the last page in use when it began, less a reserve
	 * for the commit's own writes; spent bounds what its puts took. */
	uint64_t room, spent, psize;
	unsigned depth; /* the deepest of the events' and records' trees, at the start */
	/* runlog_batch_usage_bound's anchor: the exact usage when spent was */
	uint64_t used_at, spent_at;
	bool used_known;
};

/* Pages kept past the batch's puts for the commit: the free list LMDB saves
 * (the free database's size twice over, added at the start) and this. */
#define BATCH_RESERVE_PAGES 256
/* LMDB's dirty-page limit is 2^17 pages; a batch puts directly well below it */
#define BATCH_DIRECT_MAX_PAGES 65536

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
	/* another write transaction committed since the last batch (a run
	 * created, updated, pruned): what the cache holds may be stale */
	b->txnid = mdb_txn_id(b->txn);
	if (b->txnid != l->cache_txnid + 1)
		rec_cache_clear(l);
	/* the room past the map's last page in use: whatever LMDB takes from
	 * its free list instead, a put never takes more there than
	 * batch_spend counts; no room known means every event's put is nested */
	MDB_envinfo ei;
	MDB_stat es, rs, fs;
	if (mdb_env_info(l->env, &ei) == 0 && mdb_stat(b->txn, l->events, &es) == 0 &&
	    mdb_stat(b->txn, l->runs, &rs) == 0 && mdb_stat(b->txn, 0 /* FREE_DBI */, &fs) == 0 &&
	    es.ms_psize > 0) {
		uint64_t total = ei.me_mapsize / es.ms_psize, end = (uint64_t)ei.me_last_pgno + 1;
		uint64_t reserve =
		    BATCH_RESERVE_PAGES +
		    2 * (fs.ms_branch_pages + fs.ms_leaf_pages + fs.ms_overflow_pages);
		b->room = total > end + reserve ? total - end - reserve : 0;
		b->psize = es.ms_psize;
		b->depth = MAX(es.ms_depth, rs.ms_depth);
	}
	*ret = b;
	return 0;
}

/* An upper bound of the pages one put of a len-byte value allocates: a copy
 * of each page on its path and a split of each (the tree may grow a level
 * or two within the batch), a new root, and the value's overflow pages. */
static uint64_t
put_pages(const RunLogBatch *b, size_t len)
{
	uint64_t ps = b->psize ? b->psize : 4096;
	return 2 * ((uint64_t)b->depth + 2) + 2 + (len + 64 + ps - 1) / ps;
}

/* Count a put of len bytes into b->spent; true when it certainly finds room
 * at the map's end (no MDB_MAP_FULL nor MDB_TXN_FULL possible), i.e. needs
 * no nested transaction to keep a full map from poisoning the batch. */
static bool
batch_spend(RunLogBatch *b, size_t len)
{
	uint64_t need = put_pages(b, len);
	bool room = b->spent + need <= b->room && b->spent + need <= BATCH_DIRECT_MAX_PAGES;
	b->spent += need;
	return room;
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
	json_t *rec = rec_cache_take(b->l, run_id);
	int r = rec ? 0 : get_record(b->txn, b->l, run_id, &rec);
	if (r < 0)
		return r;
	if (ARRAY_GROW(b->runs, b->n_runs, b->cap_runs, 8) < 0) {
		json_decref(rec);
		return -ENOMEM;
	}
	BatchRun *br = &b->runs[b->n_runs++];
	memcpy(br->run_id, run_id, RUN_ID_LEN + 1);
	br->rec = rec;
	br->dirty = false;
	(void)batch_spend(b, 16384); /* its record's put at the commit */
	*ret = br;
	return 0;
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

/* The record of run_id in b for an op that changes it while it runs; status
 * (NULL unless need_status) must be terminal. -ENOENT, -EUCLEAN (this op
 * only), -EINVAL (status), -ESTALE (the run is over), or the batch's error. */
static int
batch_live_record(RunLogBatch *b, const char *run_id, const char *status, bool need_status,
		  BatchRun **ret)
{
	int r;

	if (b->err < 0)
		return b->err;
	if (!valid_run_id(run_id))
		return -ENOENT;
	if ((status || need_status) && !run_status_terminal(status))
		return -EINVAL;
	r = batch_record(b, run_id, ret);
	if (r == -ENOENT || r == -EUCLEAN)
		return r; /* this op only */
	if (r < 0)
		return b->err = r;
	if (rec_terminal((*ret)->rec))
		return -ESTALE;
	return 0;
}

static int
batch_append(RunLogBatch *b, const char *run_id, const char *chunk, size_t len, const char *status,
	     const json_t *fields, int64_t now_ms, int64_t *ret_seq, bool soft)
{
	BatchRun *br;
	int r;

	r = batch_live_record(b, run_id, status, false, &br);
	if (r < 0)
		return r;
	int64_t seq = json_integer_value(json_object_get(br->rec, "lastSeq")) + 1;
	char key[RUN_ID_LEN + 8];
	event_key(key, run_id, (uint64_t)seq);
	MDB_val k = {sizeof(key), key}, v = {len, (void *)chunk};
	/* soft: in a nested transaction, so that a full map (MDB_MAP_FULL: no
	 * room at the map's end nor a long enough run of free pages for this
	 * value) refuses this event alone and leaves the batch usable */
	MDB_txn *txn = b->txn, *child = NULL;
	/* only where the map's end may lack room for it: when it certainly
	 * has room, MDB_MAP_FULL cannot happen and the nested transaction (a
	 * copy of each page it touches, and their merge) would be for nothing */
	bool room = batch_spend(b, len);
	if (soft && !room) {
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
runlog_batch_create(RunLogBatch *b, const char *run_id, const char *thread_id, const char *harness,
		    const char *tenant, int64_t now_ms)
{
	BatchRun *br;
	json_t *rec = NULL;

	if (b->err < 0)
		return b->err;
	if (!valid_run_id(run_id) || !thread_id || strlen(thread_id) > THREAD_ID_MAX)
		return -EINVAL;
	int r = batch_record(b, run_id, &br);
	if (r == 0)
		return -EEXIST; /* this op only */
	if (r != -ENOENT)
		return r == -EUCLEAN ? r : (b->err = r);
	if (ARRAY_GROW(b->runs, b->n_runs, b->cap_runs, 8) < 0)
		return b->err = -ENOMEM;
	(void)batch_spend(b, 16384); /* the record */
	(void)batch_spend(b, 1024);  /* the thread index */
	r = new_run_txn(b->txn, b->l, run_id, thread_id, harness, tenant, now_ms, &rec);
	if (r < 0)
		return b->err = r;
	br = &b->runs[b->n_runs++];
	memcpy(br->run_id, run_id, RUN_ID_LEN + 1);
	br->rec = rec;
	br->dirty = false; /* put already; a later op of the batch marks it again */
	return 0;
}

int
runlog_batch_finish(RunLogBatch *b, const char *run_id, const char *status, const json_t *fields,
		    int64_t now_ms)
{
	BatchRun *br;
	int r;

	r = batch_live_record(b, run_id, status, true, &br);
	if (r < 0)
		return r;
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
		(void)batch_spend(b, v.mv_size);
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
runlog_batch_seal(RunLogBatch *b)
{
	int r = b->err;

	for (size_t i = 0; r == 0 && i < b->n_runs; i++)
		if (b->runs[i].dirty) {
			r = put_record(b->txn, b->l, b->runs[i].run_id, b->runs[i].rec);
			b->runs[i].dirty = r < 0;
		}
	if (r < 0)
		b->err = r;
	return r;
}

int
runlog_batch_commit(RunLogBatch *b)
{
	int r = runlog_batch_seal(b);

	if (r < 0) {
		mdb_txn_abort(b->txn);
		b->txn = NULL;
		b->err = r;
		return r;
	}
	r = commit(b->txn); /* frees the txn, also on failure */
	b->txn = NULL;
	if (r < 0) {
		b->err = r;
		return r;
	}
	/* the records as this commit left them serve the next batches, as
	 * long as only batches write in between */
	for (size_t i = 0; i < b->n_runs; i++)
		rec_cache_put(b->l, b->runs[i].run_id, json_incref(b->runs[i].rec));
	b->l->cache_txnid = b->txnid;
	return 0;
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

/* End a one-run batch: commit it when r is 0, then *ret_record (may be NULL)
 * the run's record as committed; the batch is freed either way. r, or the
 * commit's error. */
static int
batch_end_one(RunLogBatch *b, const char *run_id, int r, json_t **ret_record)
{
	if (r == 0)
		r = runlog_batch_commit(b);
	if (r == 0 && ret_record)
		*ret_record = runlog_batch_get_record(b, run_id);
	runlog_batch_free(b);
	return r;
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
	r = batch_end_one(b, run_id, r, ret_record);
	if (r == 0 && ret_seq)
		*ret_seq = seq;
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
	r = batch_end_one(b, run_id, r, ret_record);
	if (r == 0 && ret_first_seq)
		*ret_first_seq = first;
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
idem_lookup(RunLog *l, MDB_val *k, char ret[RUN_ID_LEN + 1])
{
	MDB_val v;
	MDB_txn *txn;
	int r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		return r;
	r = mdb_errno(mdb_get(txn, l->idem, k, &v));
	if (r == 0 && v.mv_size == RUN_ID_LEN) {
		memcpy(ret, v.mv_data, RUN_ID_LEN);
		ret[RUN_ID_LEN] = '\0';
	} else if (r == 0)
		r = -EUCLEAN;
	mdb_txn_abort(txn);
	return r;
}

int
runlog_idem_get(RunLog *l, const char *thread_id, const char *key, char ret[RUN_ID_LEN + 1])
{
	char buf[512];
	MDB_val k;
	int r = idem_key(buf, sizeof(buf), thread_id, key, &k);
	if (r < 0)
		return r;
	return idem_lookup(l, &k, ret);
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
runlog_batch_usage(RunLogBatch *b, uint64_t *ret_used)
{
	int r = txn_usage(b->l, b->txn, ret_used);
	if (r == 0) {
		b->used_at = *ret_used;
		b->spent_at = b->spent;
		b->used_known = true;
	}
	return r;
}

int
runlog_batch_usage_bound(RunLogBatch *b, uint64_t *ret_used)
{
	if (!b->used_known)
		return runlog_batch_usage(b, ret_used);
	/* live pages grow by at most the pages the puts since allocated */
	*ret_used = b->used_at + (b->spent - b->spent_at) * (b->psize ? b->psize : 4096);
	return 0;
}
