/* SPDX-License-Identifier: MIT */
/*
 * runlog-int.h — what the run log's files share, and nobody else: the RunLog,
 * LMDB codes as errnos, keys, and records.
 *
 *   runlog.c        the environment, run creation, batches (group commit),
 *                   appends, updates, the driver state, idempotency keys
 *   runlog-read.c   reads: events, the running runs, a thread's runs, the
 *                   host's threads (THREAD_LIST)
 *   runlog-prune.c  retention by age and by size, the log's usage
 */
#pragma once

#include <errno.h>
#include <lmdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"
#include "runlog.h"

typedef struct RecordCache RecordCache;
/* Run records as the group commits left them (runlog.c, batches): exact while
 * no other write transaction committed since the one of cache_txnid. */
#define REC_CACHE_MAX 64
typedef struct RecCache {
	char run_id[RUN_ID_LEN + 1];
	json_t *rec;
} RecCache;

struct RunLog {
	MDB_env *env;
	MDB_dbi runs, events, thread_runs, idem, meta, drive, inputs, owners;
	char *dir;
	RunLogOptions opts;
	bool preallocated;
	RecordCache *records; /* runlog_get_text's (runlog-read.c) */
	RecCache rec_cache[REC_CACHE_MAX];
	size_t rec_cache_next; /* the slot the next record goes to */
	size_t cache_txnid;
};

/* The key of a /chat client's run id in the idempotency database (runlog-
 * alias.c): 0x00 ‖ alias ‖ 0x00 ‖ threadId. A key of an older log is
 * 0x00 ‖ alias (one namespace for all threads); runlog_alias_legacy reads it:
 * the run it names when that run's thread is thread_id (or, with scope, a
 * thread the scope allows; thread_id NULL), else -ENOENT. */
int alias_key(char *buf, size_t bufsz, const char *alias, const char *thread_id, MDB_val *ret);
int runlog_alias_legacy(RunLog *l, const char *alias, const char *thread_id, char *const *scope,
			char ret[RUN_ID_LEN + 1]);

/* The run id stored under key k of the idempotency database, in a read
 * transaction of its own: 0, -ENOENT, -EUCLEAN (not a run id), or an LMDB
 * error (runlog_idem_get, runlog_alias_get). */
int idem_lookup(RunLog *l, MDB_val *k, char ret[RUN_ID_LEN + 1]);

/* Free runlog_get_text's cache (runlog_free). */
void record_cache_free(RunLog *l);

/* LMDB codes → negative errno. MDB_MAP_FULL becomes -ENOSPC: to the caller it
 * is "the store is full", whatever the disk says. */
static inline int
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

static inline MDB_val
run_key(const char *run_id)
{
	return (MDB_val){strlen(run_id), (void *)run_id};
}

static inline void
event_key(char buf[RUN_ID_LEN + 8], const char *run_id, uint64_t seq)
{
	memcpy(buf, run_id, RUN_ID_LEN);
	for (int i = 0; i < 8; i++)
		buf[RUN_ID_LEN + i] = (char)(seq >> (56 - 8 * i));
}

static inline int
valid_run_id(const char *run_id)
{
	return run_id && strlen(run_id) == RUN_ID_LEN;
}

static inline int
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

static inline int
put_record(MDB_txn *txn, RunLog *l, const char *run_id, const json_t *rec)
{
	_cleanup_free_ char *s = json_dump_compact(rec);
	if (!s)
		return -ENOMEM;
	MDB_val k = run_key(run_id), v = {strlen(s), s};
	return mdb_errno(mdb_put(txn, l->runs, &k, &v, 0));
}

static inline int
commit(MDB_txn *txn)
{
	/* mdb_txn_commit frees the txn on failure too; the data is not there. */
	return mdb_errno(mdb_txn_commit(txn));
}

static inline bool
rec_terminal(const json_t *rec)
{
	return run_status_terminal(json_string_value(json_object_get(rec, "status")));
}

/* The record's tenant: its "tenant", else TENANT_DEFAULT (runs created
 * before tenants, or by a client that names none). */
static inline const char *
rec_tenant(const json_t *rec)
{
	const char *t = json_string_value(json_object_get(rec, "tenant"));
	return t ? t : TENANT_DEFAULT;
}

/* A transaction (flags: 0 or MDB_RDONLY) and a cursor on its run records;
 * on failure nothing is left open. */
static inline int
runs_cursor_begin(RunLog *l, unsigned flags, MDB_txn **ret_txn, MDB_cursor **ret_cur)
{
	MDB_txn *txn;
	int r = mdb_errno(mdb_txn_begin(l->env, NULL, flags, &txn));

	if (r < 0)
		return r;
	r = mdb_errno(mdb_cursor_open(txn, l->runs, ret_cur));
	if (r < 0) {
		mdb_txn_abort(txn);
		return r;
	}
	*ret_txn = txn;
	return 0;
}

/* runlog-prune.c: the bytes of live data txn sees (pages in use). */
int txn_usage(RunLog *l, MDB_txn *txn, uint64_t *ret_used);
