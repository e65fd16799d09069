/* SPDX-License-Identifier: MIT */
/*
 * tenant-rate.c — requests per second on the expensive routes, per tenant
 * (docs/SECURITY.md "Tenants"): a token bucket per tenant of tokens_file
 * (tenant_rate_per_second, refilled continuously, holding at most
 * tenant_rate_burst), checked after the token and before the handler; an
 * empty bucket answers 429 tenant_rate_limited with Retry-After. Only with
 * tokens_file naming two tenants or more: one tenant's rate is the host's.
 *
 * Expensive: what makes coordinatord or the shim work or write (POST /runs,
 * POST /chat and its hydrate GET /chat?threadId=, snapshots, restores, file
 * changes; the sandbox API's execs, restores, watches and PUT
 * /sandboxes/{id}; on a /chat WebSocket each run it starts, refused with a
 * tenant_rate_limited frame) and the host-wide listing GET /threads. Reads of
 * one run, tails and cancels are not.
 */
#include "config.h"

#include "routes-int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "time-util.h"

typedef struct TenantRate {
	char tenant[TENANT_NAME_MAX + 1];
	double tokens;
	usec_t at; /* when tokens was last brought up to date */
	uint64_t limited;
} TenantRate;

bool
tenant_rate_expensive(const char *pattern, enum http_method m, bool upgrade)
{
	if (streq(pattern, "runs") || streq(pattern, "threads/*/snapshots") ||
	    streq(pattern, "threads/*/restore"))
		return true;
	if (streq(pattern, "threads"))
		return m == HTTP_GET;
	if (streq(pattern, "chat"))
		return !upgrade;
	if (streq(pattern, "threads/*/files") || streq(pattern, "sandboxes/*/files"))
		return m != HTTP_GET && m != HTTP_HEAD;
	/* the sandbox API: an exec (POST, or GET upgraded to a WebSocket), a
	 * restore, a watch's long poll, a workspace made */
	if (streq(pattern, "sandboxes/*/exec") || streq(pattern, "sandboxes/*/restore") ||
	    streq(pattern, "sandboxes/*/watch"))
		return true;
	if (streq(pattern, "sandboxes/*"))
		return m == HTTP_PUT;
	return false;
}

static TenantRate *
rate_of(Router *r, const char *tenant)
{
	for (size_t i = 0; i < r->n_rates; i++)
		if (streq(r->rates[i].tenant, tenant))
			return &r->rates[i];
	TenantRate *v = reallocarray(r->rates, r->n_rates + 1, sizeof(*v));
	if (!v)
		return NULL;
	r->rates = v;
	v = &v[r->n_rates++];
	*v = (TenantRate){.tokens = (double)r->conf->tenant_rate_burst, .at = now_usec()};
	snprintf(v->tenant, sizeof(v->tenant), "%s", tenant);
	return v;
}

unsigned
tenant_rate_take(Router *r, const RouterToken *token)
{
	const RouterConf *conf = r->conf;

	if (conf->tenant_rate_per_second <= 0 || conf->n_tenants < 2)
		return 0;
	TenantRate *t = rate_of(r, router_token_tenant(token));
	if (!t)
		return 0; /* out of memory: not a reason to refuse */
	usec_t now = now_usec();
	double rate = (double)conf->tenant_rate_per_second;
	t->tokens = MIN((double)conf->tenant_rate_burst,
			t->tokens + (double)(now - t->at) / USEC_PER_SEC * rate);
	t->at = now;
	if (t->tokens >= 1.0) {
		t->tokens -= 1.0;
		return 0;
	}
	t->limited++;
	unsigned wait = (unsigned)ceil((1.0 - t->tokens) / rate);
	return wait ? wait : 1;
}

bool
tenant_rate_ok(HttpConn *c)
{
	unsigned wait = tenant_rate_take(c->router, c->req.token);
	if (!wait)
		return true;
	char hdr[48], msg[160];
	snprintf(hdr, sizeof(hdr), "Retry-After: %u\r\n", wait);
	snprintf(msg, sizeof(msg),
		 "this tenant's requests are over tenant_rate_per_second (%" PRId64 ")",
		 c->router->conf->tenant_rate_per_second);
	http_respond_error_headers(c, 429, "tenant_rate_limited", msg, hdr);
	return false;
}

void
tenant_rate_metrics(const Router *r, FILE *f)
{
	if (r->n_rates == 0)
		return;
	fputs("# HELP runwarden_router_tenant_rate_limited_total Requests of a tenant refused "
	      "429 tenant_rate_limited.\n"
	      "# TYPE runwarden_router_tenant_rate_limited_total counter\n",
	      f);
	for (size_t i = 0; i < r->n_rates; i++)
		fprintf(f,
			"runwarden_router_tenant_rate_limited_total{tenant=\"%s\"} %" PRIu64 "\n",
			r->rates[i].tenant, r->rates[i].limited);
}

void
tenant_rate_free(Router *r)
{
	free(r->rates);
	r->rates = NULL;
	r->n_rates = 0;
}
