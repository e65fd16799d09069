/* SPDX-License-Identifier: MIT */
/*
 * routes.h — the routes layer (routes*.c, tenant-rate.c, metrics.c): what
 * the lifecycle and the route family share (routes-int.h has the rest).
 * Layers: daemons/routerd/LAYERS.
 */
#pragma once

#include "preview.h"
#include "tail.h"

/* metrics.c */

/* routerd's own part of /metrics in the Prometheus text format 0.0.4, into
 * a new string (*ret, length *ret_len). coord_up: whether coordinatord
 * answered STATUS_GET. 0 or -ENOMEM. */
int metrics_format(const Router *r, bool coord_up, char **ret, size_t *ret_len);

/* tenant-rate.c */

/* runwarden_router_tenant_rate_limited_total{tenant=} lines. */
void tenant_rate_metrics(const Router *r, FILE *f);
/* Take one request from token's tenant's bucket: 0, or the seconds to wait
 * (refused; a /chat WebSocket's run start, routes-chat.c). */
unsigned tenant_rate_take(Router *r, const RouterToken *token);
void tenant_rate_free(Router *r);

/* routes.c */

/* Make r's connections answered by the route table: Router.on_request (answer
 * c->req, complete: eventually http_respond*() or an upgrade),
 * Router.on_conn_free and Router.big_body. */
void routes_attach(Router *r);
/* Percent-decode s[0..len) ('+' a space when plus_space); -EINVAL on a bad
 * escape or %00. */
int routes_url_decode(const char *s, size_t len, bool plus_space, char **ret);
/* The decoded value of a query parameter of the raw query (NULL when absent). */
int routes_query(const char *query, const char *name, char **ret);

/* routes-ds.c */
/* GET (head: HEAD) /ds/v1/threads/{thread_id}/runs/{run_id}, the thread
 * already checked against the token. */
void route_ds(HttpConn *c, bool head, const char *thread_id, const char *run_id, const char *query);
void ds_read_free(HttpConn *c);

/* routes-files.c */

/* /threads/{thread_id}/files{raw}: raw is the undecoded rest of the path
 * ("" or starting with '/'), query the raw query or NULL. */
void route_files(HttpConn *c, const char *thread_id, const char *raw, const char *query);

/* routes-ui.c */

/* GET /ui[/…]: seg are the segments after "ui"; trailing_slash: the path
 * ended with '/'. Needs no token. */
void route_ui(HttpConn *c, char *const *seg, size_t n, bool trailing_slash);
/* GET /threads (query: the raw query or NULL). */
void route_threads(HttpConn *c, const char *query);
/* ui_dir, or the installed default when it is empty. */
const char *routes_ui_dir(const Router *r);

/* routes-exec.c */
/* A data message on an exec WebSocket (inside wslay's receive). */
void sbx_conn_free(HttpConn *c);

/* routes-chat.c */

/* /chat (the query raw or NULL): POST a run, GET a join or the hydrate, or the
 * WebSocket of the stock webSocket() adapter. Auth and Host/Origin are done. */
void route_chat(HttpConn *c, const char *query);
/* A text message on a /chat conversation WebSocket (inside wslay's receive:
 * it only queues frames and makes coordinator calls). */
void chat_ws_refuse_unauthorized(HttpConn *c);
void chat_start_free(HttpConn *c);

/* Helpers routes.c shares with the other route files (see their definitions
 * there; routes-int.h has the rest). */
bool routes_json_content_type(HttpConn *c, bool empty_ok);
json_t *routes_body_json(HttpConn *c);
json_t *routes_json_request(HttpConn *c);
bool routes_thread_allowed(HttpConn *c, const char *thread_id);
void routes_coord_error(HttpConn *c, int err, const msgpack_object *body, const char *not_found);
bool routes_run_get_answered(HttpConn *c, const void *start, int err, const msgpack_object *body);
bool routes_coord_reason(HttpConn *c, const msgpack_object *body);
bool routes_parse_last_seq(const char *s, int64_t *ret);
/* The error code of a request body's problem (run_body_problem,
 * chat_body_problem): "invalid_thread_id" for one about its threadId, else
 * "bad_request". */
const char *routes_problem_code(const char *why);
