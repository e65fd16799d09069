/* SPDX-License-Identifier: MIT */
/*
 * runlog-tenant.c — tenants in the run log: each thread's owner (the
 * `owners` database: the tenant that first created work or data in it) and
 * what each tenant holds in the log (runlog_tenant_usage, for size
 * retention by tenant and /metrics).
 */
#include "config.h"

#include "runlog.h"

#include <errno.h>
#include <lmdb.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"

#include "runlog-int.h"

static int
owner_get(MDB_txn *txn, RunLog *l, const char *thread_id, char ret[TENANT_NAME_MAX + 1])
{
	MDB_val k = {strlen(thread_id), (void *)thread_id}, v;
	int r = mdb_errno(mdb_get(txn, l->owners, &k, &v));
	if (r < 0)
		return r;
	if (v.mv_size == 0 || v.mv_size > TENANT_NAME_MAX)
		return -EUCLEAN;
	memcpy(ret, v.mv_data, v.mv_size);
	ret[v.mv_size] = '\0';
	return 0;
}

int
runlog_thread_owner(RunLog *l, const char *thread_id, char ret[TENANT_NAME_MAX + 1])
{
	MDB_txn *txn;
	if (!thread_id || !*thread_id || strlen(thread_id) > THREAD_ID_MAX)
		return -EINVAL;
	int r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		return r;
	r = owner_get(txn, l, thread_id, ret);
	mdb_txn_abort(txn);
	return r;
}

int
runlog_thread_claim(RunLog *l, const char *thread_id, const char *tenant, bool *ret_new,
		    char other[TENANT_NAME_MAX + 1])
{
	char owner[TENANT_NAME_MAX + 1];
	MDB_txn *txn;

	if (ret_new)
		*ret_new = false;
	if (!thread_id || !*thread_id || strlen(thread_id) > THREAD_ID_MAX ||
	    !tenant_name_valid(tenant))
		return -EINVAL;
	/* most calls find the thread theirs: a read transaction, no fsync */
	int r = runlog_thread_owner(l, thread_id, owner);
	if (r == 0)
		goto known;
	if (r != -ENOENT)
		return r;
	r = mdb_errno(mdb_txn_begin(l->env, NULL, 0, &txn));
	if (r < 0)
		return r;
	r = owner_get(txn, l, thread_id, owner); /* write transactions are serialised */
	if (r == 0) {
		mdb_txn_abort(txn);
		goto known;
	}
	if (r == -ENOENT) {
		MDB_val k = {strlen(thread_id), (void *)thread_id};
		MDB_val v = {strlen(tenant), (void *)tenant};
		r = mdb_errno(mdb_put(txn, l->owners, &k, &v, 0));
	}
	if (r < 0) {
		mdb_txn_abort(txn);
		return r;
	}
	r = commit(txn);
	if (r == 0 && ret_new)
		*ret_new = true;
	return r;
known:
	if (streq(owner, tenant))
		return 0;
	if (other)
		strcpy(other, owner);
	return -EPERM;
}

int
runlog_foreach_owner(RunLog *l, void (*fn)(const char *thread_id, const char *tenant, void *ud),
		     void *ud)
{
	MDB_txn *txn;
	MDB_cursor *cur;
	MDB_val k, v;
	int rc;

	int r = mdb_errno(mdb_txn_begin(l->env, NULL, MDB_RDONLY, &txn));
	if (r < 0)
		return r;
	r = mdb_errno(mdb_cursor_open(txn, l->owners, &cur));
	if (r < 0) {
		mdb_txn_abort(txn);
		return r;
	}
	for (rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		char tid[THREAD_ID_MAX + 1], ten[TENANT_NAME_MAX + 1];
		if (k.mv_size == 0 || k.mv_size > THREAD_ID_MAX || v.mv_size == 0 ||
		    v.mv_size > TENANT_NAME_MAX)
			continue;
		memcpy(tid, k.mv_data, k.mv_size);
		tid[k.mv_size] = '\0';
		memcpy(ten, v.mv_data, v.mv_size);
		ten[v.mv_size] = '\0';
		fn(tid, ten, ud);
	}
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	return rc == MDB_NOTFOUND ? 0 : mdb_errno(rc);
}

static RunLogTenantUsage *
usage_entry(RunLogTenantUsage **v, size_t *n, const char *tenant)
{
	for (size_t i = 0; i < *n; i++)
		if (streq((*v)[i].tenant, tenant))
			return &(*v)[i];
	RunLogTenantUsage *p = reallocarray(*v, *n + 1, sizeof(**v));
	if (!p)
		return NULL;
	*v = p;
	p = &p[(*n)++];
	*p = (RunLogTenantUsage){0};
	snprintf(p->tenant, sizeof(p->tenant), "%s", tenant);
	return p;
}

static int
usage_cmp(const void *a, const void *b)
{
	const RunLogTenantUsage *x = a, *y = b;
	return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : strcmp(x->tenant, y->tenant);
}

/* The runs and their events are both in runId order: one walk of each. The
 * events' sizes come from their nodes (a large value's overflow pages are
 * not read). */
int
runlog_tenant_usage(RunLog *l, RunLogTenantUsage **ret, size_t *ret_n)
{
	RunLogTenantUsage *v = NULL;
	size_t n = 0;
	MDB_txn *txn;
	MDB_cursor *cur, *ecur = NULL;
	MDB_val k, d, ek = {0}, ed;
	int rc, erc, r;

	r = runs_cursor_begin(l, MDB_RDONLY, &txn, &cur);
	if (r < 0)
		return r;
	r = mdb_errno(mdb_cursor_open(txn, l->events, &ecur));
	if (r < 0)
		goto out;
	erc = mdb_cursor_get(ecur, &ek, &ed, MDB_FIRST);
	for (rc = mdb_cursor_get(cur, &k, &d, MDB_FIRST); rc == 0;
	     rc = mdb_cursor_get(cur, &k, &d, MDB_NEXT)) {
		if (k.mv_size != RUN_ID_LEN)
			continue;
		uint64_t bytes = k.mv_size + d.mv_size;
		while (erc == 0 &&
		       (ek.mv_size < RUN_ID_LEN || memcmp(ek.mv_data, k.mv_data, RUN_ID_LEN) < 0))
			erc = mdb_cursor_get(ecur, &ek, &ed, MDB_NEXT);
		while (erc == 0 && ek.mv_size >= RUN_ID_LEN &&
		       memcmp(ek.mv_data, k.mv_data, RUN_ID_LEN) == 0) {
			bytes += ek.mv_size + ed.mv_size;
			erc = mdb_cursor_get(ecur, &ek, &ed, MDB_NEXT);
		}
		json_t *rec = json_loadb(d.mv_data, d.mv_size, 0, NULL);
		RunLogTenantUsage *u = usage_entry(&v, &n, rec_tenant(rec));
		if (!u) {
			json_decref(rec);
			r = -ENOMEM;
			goto out;
		}
		u->bytes += bytes;
		u->runs++;
		if (rec && rec_terminal(rec) && json_is_integer(json_object_get(rec, "finishedAt")))
			u->prunable++;
		json_decref(rec);
	}
	if (rc != MDB_NOTFOUND)
		r = mdb_errno(rc);
out:
	if (ecur)
		mdb_cursor_close(ecur);
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	if (r < 0) {
		free(v);
		return r;
	}
	qsort(v, n, sizeof(*v), usage_cmp);
	*ret = v;
	*ret_n = n;
	return 0;
}
