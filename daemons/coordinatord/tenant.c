/* SPDX-License-Identifier: MIT */
/*
 * tenant.c — tenants in coordinatord (docs/SECURITY.md "Tenants").
 *
 * routerd names the tenant of every request that creates work or data
 * (RUN_START, THREAD_FILE, SNAPSHOT_CREATE/RESTORE, SANDBOX_CTL, SBX_EXEC:
 * `tenant`; none is TENANT_DEFAULT). A thread belongs to the first tenant
 * that created work or data in it (the run log's `owners`); another tenant
 * is refused 403 thread_forbidden there, whatever its token's scope says
 * (scopes separate tenants already: this is defence in depth). Quotas per tenant:
 * tenant_max_threads threads owned (429 tenant_threads_quota) and
 * tenant_max_running runs driven at once (429 tenant_runs_quota). The run
 * log's share by tenant is size retention's (watchdog.c); sandbox slots are
 * shared by the shim (shim-capacity.c).
 */
#include "config.h"

#include "coordinator.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"

TenantStat *
tenant_stat(Coordinator *c, const char *name)
{
	for (size_t i = 0; i < c->n_tenants; i++)
		if (streq(c->tenants[i].name, name))
			return &c->tenants[i];
	TenantStat *v = reallocarray(c->tenants, c->n_tenants + 1, sizeof(*v));
	if (!v)
		return NULL;
	c->tenants = v;
	v = &v[c->n_tenants++];
	*v = (TenantStat){0};
	snprintf(v->name, sizeof(v->name), "%s", name);
	return v;
}

static void
count_owner(const char *thread_id, const char *tenant, void *ud)
{
	TenantStat *t = tenant_stat(ud, tenant);
	if (t)
		t->threads++;
}

int
tenants_load(Coordinator *c)
{
	int r = runlog_foreach_owner(c->runlog, count_owner, c);
	return r < 0 ? r : watchdog_tenant_usage(c);
}

void
tenants_free(Coordinator *c)
{
	free(c->tenants);
	c->tenants = NULL;
	c->n_tenants = 0;
	free(c->tenant_usage);
	c->tenant_usage = NULL;
	c->n_tenant_usage = 0;
}

bool
tenant_request_ok(Peer *p, const Frame *f, const char **tenant)
{
	if (!*tenant) {
		*tenant = TENANT_DEFAULT;
		return true;
	}
	if (tenant_name_valid(*tenant))
		return true;
	peer_reply_error(p, f->req_id, -EINVAL, "tenant must be 1..63 of [A-Za-z0-9_.-]");
	return false;
}

size_t
tenant_running(Coordinator *c, const char *tenant)
{
	size_t n = 0;
	for (Run *run = c->runs; run; run = run->next)
		if (run->state != RUN_DONE && streq(run->tenant, tenant))
			n++;
	return n;
}

/* A tenant's runs holding a sandbox (ensured, not ended), or waiting for a
 * slot in the shim's queue. */
static size_t
tenant_sandboxes(Coordinator *c, const char *tenant, bool queued)
{
	size_t n = 0;
	for (Run *run = c->runs; run; run = run->next)
		if (run->state != RUN_DONE && streq(run->tenant, tenant) &&
		    (queued ? run->queued : run->sandbox_id != NULL))
			n++;
	return n;
}

static bool
refuse(Peer *p, const Frame *f, TenantStat *t, int which, int err, const char *reason,
       const char *msg)
{
	if (t)
		t->refused[which]++;
	peer_reply_error_reason(p, f->req_id, err, reason, msg);
	return false;
}

bool
tenant_admit(Coordinator *c, Peer *p, const Frame *f, const char *thread_id, const char *tenant,
	     bool run, int *ret_err)
{
	char owner[TENANT_NAME_MAX + 1];
	TenantStat *t = tenant_stat(c, tenant);
	bool fresh = false;
	char m[160];

	*ret_err = 0;
	if (!t) {
		*ret_err = -ENOMEM;
		return false;
	}
	int r = runlog_thread_owner(c->runlog, thread_id, owner);
	if (r == 0 && !streq(owner, tenant))
		return refuse(p, f, t, TENANT_REFUSED_OWNER, -EPERM, REASON_THREAD_FORBIDDEN,
			      "this thread belongs to another tenant");
	if (r < 0 && r != -ENOENT) {
		*ret_err = r;
		return false;
	}
	if (run && c->conf.tenant_max_running > 0 &&
	    tenant_running(c, tenant) >= (uint64_t)c->conf.tenant_max_running) {
		snprintf(m, sizeof(m),
			 "this tenant has %" PRId64 " runs going (tenant_max_running)",
			 c->conf.tenant_max_running);
		return refuse(p, f, t, TENANT_REFUSED_RUNS, -EAGAIN, REASON_TENANT_RUNS_QUOTA, m);
	}
	if (r == 0)
		return true;
	if (c->conf.tenant_max_threads > 0 && t->threads >= (uint64_t)c->conf.tenant_max_threads) {
		snprintf(m, sizeof(m), "this tenant owns %" PRIu64 " threads (tenant_max_threads)",
			 t->threads);
		return refuse(p, f, t, TENANT_REFUSED_THREADS, -EDQUOT, REASON_TENANT_THREADS_QUOTA,
			      m);
	}
	r = runlog_thread_claim(c->runlog, thread_id, tenant, &fresh, owner);
	if (r == -EPERM) /* cannot happen on one loop; kept for the claim's contract */
		return refuse(p, f, t, TENANT_REFUSED_OWNER, -EPERM, REASON_THREAD_FORBIDDEN,
			      "this thread belongs to another tenant");
	if (r < 0) {
		log_warning_errno(r, "Cannot record the owner of a thread: %m");
		*ret_err = r;
		return false;
	}
	if (fresh)
		t->threads++;
	return true;
}

bool
tenant_check(Coordinator *c, Peer *p, const Frame *f, const char *thread_id, const char *tenant,
	     int *ret_err)
{
	char owner[TENANT_NAME_MAX + 1];
	int r = runlog_thread_owner(c->runlog, thread_id, owner);

	*ret_err = 0;
	if (r == -ENOENT || (r == 0 && streq(owner, tenant)))
		return true;
	if (r < 0) {
		*ret_err = r;
		return false;
	}
	return refuse(p, f, tenant_stat(c, tenant), TENANT_REFUSED_OWNER, -EPERM,
		      REASON_THREAD_FORBIDDEN, "this thread belongs to another tenant");
}

static void
label(FILE *out, const char *metric, const char *tenant, uint64_t v)
{
	fprintf(out, "%s{tenant=\"%s\"} %" PRIu64 "\n", metric, tenant, v);
}

static uint64_t
value_threads(Coordinator *c, const TenantStat *t)
{
	return t->threads;
}

static uint64_t
value_running(Coordinator *c, const TenantStat *t)
{
	return tenant_running(c, t->name);
}

static uint64_t
value_sandboxes(Coordinator *c, const TenantStat *t)
{
	return tenant_sandboxes(c, t->name, false);
}

static uint64_t
value_queued(Coordinator *c, const TenantStat *t)
{
	return tenant_sandboxes(c, t->name, true);
}

static uint64_t
value_started(Coordinator *c, const TenantStat *t)
{
	return t->runs_started;
}

/* The per-tenant families of /metrics after runwarden_tenant_log_bytes, in
 * their order. */
static const struct {
	const char *name, *help, *type;
	uint64_t (*value)(Coordinator *c, const TenantStat *t);
} tenant_families[] = {
    {"runwarden_tenant_threads", "Threads a tenant owns.", "gauge", value_threads},
    {"runwarden_tenant_runs_running", "A tenant's runs driven now.", "gauge", value_running},
    {"runwarden_tenant_sandboxes", "A tenant's runs holding a sandbox.", "gauge", value_sandboxes},
    {"runwarden_tenant_sandboxes_queued", "A tenant's runs waiting for a sandbox slot.", "gauge",
     value_queued},
    {"runwarden_tenant_runs_started_total", "Runs a tenant started.", "counter", value_started},
};

void
tenant_metrics(Coordinator *c, FILE *out)
{
	static const char *const codes[_TENANT_REFUSED_MAX] = {
	    [TENANT_REFUSED_THREADS] = REASON_TENANT_THREADS_QUOTA,
	    [TENANT_REFUSED_RUNS] = REASON_TENANT_RUNS_QUOTA,
	    [TENANT_REFUSED_OWNER] = REASON_THREAD_FORBIDDEN,
	};
	if (c->n_tenants == 0 && c->n_tenant_usage == 0)
		return;
	fputs("# HELP runwarden_tenant_log_bytes Bytes of a tenant's records and events in the run "
	      "log (keys and values; as of the last size retention pass or retention tick).\n"
	      "# TYPE runwarden_tenant_log_bytes gauge\n",
	      out);
	for (size_t i = 0; i < c->n_tenant_usage; i++)
		label(out, "runwarden_tenant_log_bytes", c->tenant_usage[i].tenant,
		      c->tenant_usage[i].bytes);
	for (size_t f = 0; f < ELEMENTSOF(tenant_families); f++) {
		fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", tenant_families[f].name,
			tenant_families[f].help, tenant_families[f].name, tenant_families[f].type);
		for (size_t i = 0; i < c->n_tenants; i++)
			label(out, tenant_families[f].name, c->tenants[i].name,
			      tenant_families[f].value(c, &c->tenants[i]));
	}
	fputs("# HELP runwarden_tenant_refused_total A tenant's requests refused by a quota or "
	      "the thread's owner, by code.\n"
	      "# TYPE runwarden_tenant_refused_total counter\n",
	      out);
	for (size_t i = 0; i < c->n_tenants; i++)
		for (int k = 0; k < _TENANT_REFUSED_MAX; k++)
			fprintf(out,
				"runwarden_tenant_refused_total{tenant=\"%s\",code=\"%s\"} %" PRIu64
				"\n",
				c->tenants[i].name, codes[k], c->tenants[i].refused[k]);
}
