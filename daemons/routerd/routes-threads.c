/* SPDX-License-Identifier: MIT */
/*
 * routes-threads.c — a thread's runs list and its snapshots:
 * GET /threads/{threadId}/runs, POST /threads/{threadId}/snapshots and
 * /restore (API.md). The route table (routes.c) sends them here after the
 * Host, Origin and token checks.
 */
#include "config.h"

#include "routes-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "id-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"

static void
thread_runs_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	const msgpack_object *recs = body ? mp_map_get(body, "records") : NULL;
	size_t len = 2;

	if (err < 0) {
		routes_coord_error(c, err, body, "unknown thread");
		return;
	}
	if (!recs || recs->type != MSGPACK_OBJECT_ARRAY) {
		log_warning("%s: THREAD_RUNS reply without records", c->addr);
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	for (uint32_t i = 0; i < recs->via.array.size; i++) {
		const msgpack_object *o = &recs->via.array.ptr[i];
		if (o->type != MSGPACK_OBJECT_STR) {
			http_respond_error(c, 500, "internal", "internal error");
			return;
		}
		len += o->via.str.size + 1;
	}
	/* The records are JSON texts already: splice them into an array. */
	_cleanup_free_ char *out = malloc(len + 1);
	if (!out) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	size_t n = 0;
	out[n++] = '[';
	for (uint32_t i = 0; i < recs->via.array.size; i++) {
		const msgpack_object *o = &recs->via.array.ptr[i];
		if (i > 0)
			out[n++] = ',';
		memcpy(out + n, o->via.str.ptr, o->via.str.size);
		n += o->via.str.size;
	}
	out[n++] = ']';
	http_respond(c, 200, "application/json; charset=utf-8", out, n, NULL, false);
}

void
route_thread_runs(HttpConn *c, Route *rt)
{
	_cleanup_free_ char *status = NULL;
	int r;

	if (!routes_path_thread_id(c, rt->seg[1]))
		return;
	r = route_query(rt, "status", &status);
	if (r < 0 || (status && !streq(status, "running") && !streq(status, "completed") &&
		      !streq(status, "failed") && !streq(status, "aborted"))) {
		http_respond_error(c, 400, "bad_request",
				   "status must be running, completed, failed or aborted");
		return;
	}
	r = COORD_CALL(c->router, THREAD_RUNS,
		       &((Msg_THREAD_RUNS){.thread_id = rt->seg[1], .status = status}),
		       thread_runs_reply, c);
	if (r < 0)
		routes_unavailable(c);
}

/* Wait as long as the shim's job may run (snapshot_wait_ms), not
 * coord_timeout_ms: a long snapshot still tells the client its id. */
static usec_t
snapshot_wait(HttpConn *c)
{
	return (usec_t)c->router->conf->snapshot_wait_ms * USEC_PER_MSEC;
}

/* SNAPSHOT_RESTORE of snapshot sid as thread_id's workspace: from (NULL: the
 * thread itself) names the sandbox whose snapshot it is, restored into a
 * fresh sandbox. */
static void
snapshot_restore_call(HttpConn *c, const char *thread_id, const char *sid, const char *from,
		      PeerReplyFn cb)
{
	int r = COORD_CALL_TIMEOUT(
	    c->router, SNAPSHOT_RESTORE,
	    &((Msg_SNAPSHOT_RESTORE){.thread_id = thread_id,
				     .snapshot_id = sid,
				     .from_thread = from,
				     .fresh = from != NULL,
				     .has_fresh = from != NULL,
				     .tenant = router_token_tenant(c->req.token)}),
	    cb, c, snapshot_wait(c));
	if (r < 0)
		routes_unavailable(c);
}

static void
snapshot_create_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	const msgpack_object *id = body ? mp_map_get(body, "snapshot_id") : NULL;

	if (err < 0) {
		routes_coord_error(c, err, body, "unknown thread");
		return;
	}
	_cleanup_free_ char *sid = id && id->type == MSGPACK_OBJECT_STR ? mp_obj_strdup(id) : NULL;
	/* snapshotId: the whole record (as before); id: its short id, the uuid
	 * in it, which restores and deletes name it by too */
	json_auto_t *rec = sid ? json_loads(sid, 0, NULL) : NULL;
	json_t *short_id = json_object_get(rec, "id");
	json_auto_t *j = sid && json_is_string(short_id)
			     ? json_pack("{s:s, s:O}", "snapshotId", sid, "id", short_id)
			     : NULL;
	if (!j) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	http_respond_json(c, 201, j);
}

void
route_snapshot_create(HttpConn *c, Route *rt)
{
	json_t *label;
	int r;

	if (!routes_path_thread_id(c, rt->seg[1]) || !routes_json_content_type(c, true))
		return;
	json_auto_t *body = routes_body_object(c, true);
	if (!body)
		return;
	label = json_object_get(body, "label");
	if (label && (!json_is_string(label) || json_string_length(label) > 256 ||
		      !string_printable(json_string_value(label)))) {
		http_respond_error(c, 400, "bad_request", "label must be a printable string");
		return;
	}
	r = COORD_CALL_TIMEOUT(
	    c->router, SNAPSHOT_CREATE,
	    &((Msg_SNAPSHOT_CREATE){.thread_id = rt->seg[1],
				    .label = json_string_value(label),
				    .tenant = router_token_tenant(c->req.token)}),
	    snapshot_create_reply, c, snapshot_wait(c));
	if (r < 0)
		routes_unavailable(c);
}

static void
snapshot_restore_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	static const char ok[] = "{\"restored\":true}";

	if (err < 0) {
		routes_coord_error(c, err, body, "unknown thread");
		return;
	}
	http_respond(c, 200, "application/json; charset=utf-8", ok, STRLEN(ok), NULL, false);
}

void
route_snapshot_restore(HttpConn *c, Route *rt)
{
	json_t *sid;

	if (!routes_path_thread_id(c, rt->seg[1]) || !routes_json_content_type(c, false))
		return;
	json_auto_t *body = routes_body_object(c, false);
	if (!body)
		return;
	sid = json_object_get(body, "snapshotId");
	if (!json_is_string(sid) || json_string_length(sid) == 0 ||
	    strlen(json_string_value(sid)) != json_string_length(sid)) {
		http_respond_error(c, 400, "bad_request", "snapshotId must be a non-empty string");
		return;
	}
	snapshot_restore_call(c, rt->seg[1], json_string_value(sid), NULL, snapshot_restore_reply);
}

/* {"snapshots": [{id, label, createdAt, bytes}]} from the shim's records */
static void
snapshot_list_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	_cleanup_(reply_done_SNAPSHOT_LIST) Reply_SNAPSHOT_LIST rep = {};
	json_auto_t *arr = json_array();

	if (err < 0) {
		routes_coord_error(c, err, body, "unknown thread");
		return;
	}
	if (reply_decode_SNAPSHOT_LIST(body, &rep) < 0 || !arr) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	for (char *const *r = rep.records; r && *r; r++) {
		json_auto_t *rec = json_loads(*r, 0, NULL);
		json_t *label = json_object_get(rec, "label");
		if (!json_is_string(json_object_get(rec, "id")))
			continue;
		if (json_array_append_new(
			arr, json_pack("{s:O, s:O, s:O, s:O}", "id", json_object_get(rec, "id"),
				       "label", label ? label : json_null(), "createdAt",
				       json_object_get(rec, "createdAt") ?: json_null(), "bytes",
				       json_object_get(rec, "bytes") ?: json_null())) < 0) {
			http_respond_error(c, 500, "internal", "out of memory");
			return;
		}
	}
	json_auto_t *j = json_pack("{s:O}", "snapshots", arr);
	if (!j) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	http_respond_json(c, 200, j);
}

static void
snapshot_delete_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;

	if (err < 0) {
		routes_coord_error(c, err, body, "no such snapshot");
		return;
	}
	http_respond(c, 204, NULL, NULL, 0, NULL, false);
}

/* GET (list) and POST (create) /threads/{id}/snapshots */
void
route_snapshots(HttpConn *c, Route *rt)
{
	if (c->req.method == HTTP_POST) {
		route_snapshot_create(c, rt);
		return;
	}
	if (!routes_path_thread_id(c, rt->seg[1]))
		return;
	if (COORD_CALL(c->router, SNAPSHOT_LIST, &((Msg_SNAPSHOT_LIST){.thread_id = rt->seg[1]}),
		       snapshot_list_reply, c) < 0)
		routes_unavailable(c);
}

/* DELETE /threads/{id}/snapshots/{snap}: snap is a snapshot's short id */
void
route_snapshot_delete(HttpConn *c, Route *rt)
{
	if (!routes_path_thread_id(c, rt->seg[1]))
		return;
	/* the shim checks the form exactly; anything else names no snapshot */
	if (strlen(rt->seg[3]) != 36 || strspn(rt->seg[3], "0123456789abcdef-") != 36) {
		http_respond_error(c, 404, "snapshot_not_found", "no such snapshot");
		return;
	}
	if (COORD_CALL(c->router, SNAPSHOT_LIST,
		       &((Msg_SNAPSHOT_LIST){.thread_id = rt->seg[1], .delete = rt->seg[3]}),
		       snapshot_delete_reply, c) < 0)
		routes_unavailable(c);
}

static void
sandbox_restore_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;

	if (err < 0) {
		routes_coord_error(c, err, body, "no such snapshot");
		return;
	}
	json_auto_t *j = json_pack("{s:s}", "id", c->sandbox_id ? c->sandbox_id : "");
	if (!j) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	http_respond_json(c, 201, j);
}

/* POST /sandboxes/{new}/restore {"from", "snapshotId"}: a snapshot of
 * sandbox `from` unpacked as the workspace of a new sandbox (fork). Both ids
 * within the token's scope. */
void
route_sandbox_restore(HttpConn *c, Route *rt)
{
	json_t *from, *sid;

	if (!routes_path_thread_id(c, rt->seg[1]) || !routes_json_content_type(c, false))
		return;
	json_auto_t *body = routes_body_object(c, false);
	if (!body)
		return;
	from = json_object_get(body, "from");
	sid = json_object_get(body, "snapshotId");
	if (!json_is_string(from) || !json_is_string(sid) || json_string_length(sid) == 0 ||
	    strlen(json_string_value(sid)) != json_string_length(sid) ||
	    strlen(json_string_value(from)) != json_string_length(from)) {
		http_respond_error(c, 400, "bad_request",
				   "from (a sandbox id) and snapshotId must be strings");
		return;
	}
	if (!routes_path_thread_id(c, json_string_value(from)))
		return;
	free(c->sandbox_id);
	c->sandbox_id = strdup(rt->seg[1]);
	if (!c->sandbox_id) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	snapshot_restore_call(c, rt->seg[1], json_string_value(sid), json_string_value(from),
			      sandbox_restore_reply);
}
