/* SPDX-License-Identifier: MIT */
/*
 * routes-int.h — what the route files share (routes.c and routes-*.c), and
 * nothing else includes: the parsed request target, the handlers the route
 * table (routes.c) names, and the checks and answers every handler uses.
 *
 * A handler is called after Host, Origin and the token were checked, for a
 * method its row allows; it answers (http_respond*, or an upgrade) now or
 * from a coordinatord reply callback with the HttpConn as userdata.
 */
#pragma once

#include "routes.h"

#define ROUTE_MAX_SEGMENTS 8

/* The request target: decoded path segments, the raw query. */
typedef struct Route {
	char *seg[ROUTE_MAX_SEGMENTS];
	size_t n_seg;
	char *query; /* raw, without '?', or NULL */
	char *rest;  /* /threads/{id}/files, /sandboxes/{id}/files: the raw path after "files", or
			NULL */
} Route;

/* ---- handlers (rows of route_table) ---- */

/* routes-health.c */
void route_healthz(HttpConn *c, Route *rt);
void route_readyz(HttpConn *c, Route *rt);
void route_metrics(HttpConn *c, Route *rt);
/* routes-threads.c */
void route_thread_runs(HttpConn *c, Route *rt);
void route_snapshot_create(HttpConn *c, Route *rt);
void route_snapshot_restore(HttpConn *c, Route *rt);
void route_snapshots(HttpConn *c, Route *rt);
void route_snapshot_delete(HttpConn *c, Route *rt);
void route_sandbox_restore(HttpConn *c, Route *rt);
/* routes-sandboxes.c */
void route_sandbox(HttpConn *c, Route *rt);
void route_sandbox_stop(HttpConn *c, Route *rt);
void route_capabilities(HttpConn *c, Route *rt);
void route_sandbox_watch(HttpConn *c, Route *rt);
/* routes-exec.c: /sandboxes/{id}/exec (POST: NDJSON, GET: WebSocket),
 * /sandboxes/{id}/processes, /sandboxes/{id}/processes/{pid}/kill */
void route_sbx_exec(HttpConn *c, Route *rt);
void route_sbx_processes(HttpConn *c, Route *rt);
void route_sbx_kill(HttpConn *c, Route *rt);
void route_sbx_output(HttpConn *c, Route *rt);
/* Router.sbx_push and .sbx_lost */
void routes_sandbox_attach(Router *r);
/* routes-net.c */
void route_sandbox_port(HttpConn *c, Route *rt);
void route_sandbox_egress(HttpConn *c, Route *rt);
/* routes-bridge.c: kind "bridge" or "tool_exec" */
void route_bridge(HttpConn *c, Route *rt, const char *kind);
/* Everything served on the bridge socket (HttpConn.bridge). */
void route_bridge_only(HttpConn *c, Route *rt);

/* ---- shared by the handlers (routes.c) ---- */

/* The decoded value of query parameter name (the first one), or NULL when it
 * is absent. -EINVAL on a malformed escape. */
int route_query(const Route *rt, const char *name, char **ret);
/* A run id that could name a run: non-empty, printable, at most ROUTER_MAX_ID. */
bool routes_run_id_plausible(const char *s);
/* 503 unavailable: coordinatord is not connected. */
void routes_unavailable(HttpConn *c);
/* threadId from the query (required), validated and within the token's
 * threads; false after answering 400 or 403. */
bool routes_get_thread_id(HttpConn *c, const Route *rt, char **ret);
/* threadId from the path segment, within the token's threads; false after
 * answering 400 or 403. */
bool routes_path_thread_id(HttpConn *c, const char *tid);
/* The request body as a JSON object; an empty body counts as {} when
 * empty_ok. NULL after answering 400. */
json_t *routes_body_object(HttpConn *c, bool empty_ok);

/* ---- Host, Origin, CORS (routes-host.c), for routes_dispatch ---- */
/* Each answers the request (400/421, 403) and returns false when it fails. */
bool host_ok(HttpConn *c);
bool origin_ok(HttpConn *c);
/* Access-Control-Allow-Origin for an allowed Origin, kept on the request. */
void cors_prepare(HttpConn *c);
/* The answer to OPTIONS. */
void route_options(HttpConn *c);

/* ---- requests per second per tenant (tenant-rate.c) ---- */

/* Is a request on the route of this pattern, with this method (and an
 * Upgrade header or not), one of the expensive ones? */
bool tenant_rate_expensive(const char *pattern, enum http_method m, bool upgrade);
/* The request's tenant may make it now (its bucket had a token); false after
 * answering 429 tenant_rate_limited. */
bool tenant_rate_ok(HttpConn *c);
