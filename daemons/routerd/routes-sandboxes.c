/* SPDX-License-Identifier: MIT */
/*
 * routes-sandboxes.c — the sandbox API's lifecycle and capabilities
 * (docs/SANDBOX-API.md "Capabilities", "Lifecycle"):
 *
 *   GET    /capabilities                 what this server does, its limits, the
 *                                        token's thread scope
 *   PUT    /sandboxes/{id}               201 {id, created: true} / 200 {…false}
 *   GET    /sandboxes/{id}               200 {id, running, processes}; 404
 *                                        sandbox_not_found without a workspace
 *   POST   /sandboxes/{id}/stop          200 {}
 *   DELETE /sandboxes/{id}[?keep=workspace]   204
 *   GET    /sandboxes/{id}/watch[?path=&cursor=&waitMs=]   file events, a long
 *                                        poll (WATCH_POLL)
 *
 * A sandbox id is a thread id: the same rules and the token's thread scope
 * (403 thread_forbidden). coordinatord's SANDBOX_CTL and CAPABILITIES_GET
 * (docs/PROTOCOL.md) do the work.
 */
#include "config.h"

#include "routes-int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "log.h"
#include "macro.h"

/* A stop or delete waits for the sandbox to end (coordinatord: 60 s). */
#define CTL_WAIT_USEC (70 * USEC_PER_SEC)

static void
respond_json(HttpConn *c, int status, json_t *j)
{
	if (!j) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	http_respond_json(c, status, j);
	json_decref(j);
}

static const char *
ctl_id(HttpConn *c)
{
	/* /sandboxes/{id}…: checked by the route, kept on the connection for
	 * the answer (HttpConn.sandbox_id) */
	return c->sandbox_id ? c->sandbox_id : "";
}

static void
ctl_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	const char *a = c->sandbox_action;
	MpReader r;

	if (err < 0) {
		routes_coord_error(c, err, body, "no such sandbox");
		return;
	}
	if (streq(a, "put")) {
		bool created = false;
		mp_reader_init(&r, body);
		mp_read_bool_opt(&r, "created", &created, false);
		mp_reader_done(&r);
		respond_json(c, created ? 201 : 200,
			     json_pack("{s:s, s:b}", "id", ctl_id(c), "created", created));
	} else if (streq(a, "get")) {
		_cleanup_(reply_done_SANDBOX_STATE) Reply_SANDBOX_STATE rep = {};
		if (reply_decode_SANDBOX_STATE(body, &rep) < 0) {
			http_respond_error(c, 500, "internal", "bad reply from coordinatord");
			return;
		}
		respond_json(c, 200,
			     json_pack("{s:s, s:b, s:I}", "id", ctl_id(c), "running", rep.running,
				       "processes", (json_int_t)rep.processes));
	} else if (streq(a, "stop"))
		respond_json(c, 200, json_object());
	else
		http_respond(c, 204, NULL, NULL, 0, NULL, false);
}

static void
sandbox_ctl(HttpConn *c, const char *id, const char *action, bool keep, const char *image)
{
	int r;

	free(c->sandbox_id);
	c->sandbox_id = strdup(id);
	if (!c->sandbox_id) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	snprintf(c->sandbox_action, sizeof(c->sandbox_action), "%s", action);
	r = COORD_CALL_TIMEOUT(c->router, SANDBOX_CTL,
			       &((Msg_SANDBOX_CTL){.thread_id = id,
						   .action = action,
						   .keep_workspace = keep,
						   .has_keep_workspace = keep,
						   .tenant = router_token_tenant(c->req.token),
						   .image = image}),
			       ctl_reply, c, CTL_WAIT_USEC);
	if (r < 0)
		routes_unavailable(c);
}

void
route_sandbox(HttpConn *c, Route *rt)
{
	const char *id = rt->seg[1];
	_cleanup_free_ char *keep = NULL;

	if (!routes_path_thread_id(c, id))
		return;
	switch (c->req.method) {
	case HTTP_PUT: {
		if (!routes_json_content_type(c, true))
			return;
		json_auto_t *body = routes_body_object(c, true);
		if (!body)
			return;
		json_t *image = json_object_get(body, "image");
		if (image && !json_is_null(image) && !json_is_string(image)) {
			http_respond_error(c, 400, "bad_request", "image must be a string");
			return;
		}
		/* the image's name is checked by the shim (404 image_not_found) */
		sandbox_ctl(c, id, "put", false, json_string_value(image));
		return;
	}
	case HTTP_GET: sandbox_ctl(c, id, "get", false, NULL); return;
	case HTTP_DELETE:
		if (route_query(rt, "keep", &keep) < 0 || (keep && !streq(keep, "workspace"))) {
			http_respond_error(c, 400, "bad_request", "keep must be 'workspace'");
			return;
		}
		sandbox_ctl(c, id, "delete", keep != NULL, NULL);
		return;
	default: http_respond_405(c, "GET, PUT, DELETE"); return;
	}
}

void
route_sandbox_stop(HttpConn *c, Route *rt)
{
	if (routes_path_thread_id(c, rt->seg[1]))
		sandbox_ctl(c, rt->seg[1], "stop", false, NULL);
}

static void
capabilities_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	_cleanup_(reply_done_CAPABILITIES_GET) Reply_CAPABILITIES_GET rep = {};
	const RouterToken *t = c->req.token;
	json_t *scope;

	if (err < 0) {
		routes_coord_error(c, err, body, "not found");
		return;
	}
	if (reply_decode_CAPABILITIES_GET(body, &rep) < 0) {
		http_respond_error(c, 500, "internal", "bad reply from coordinatord");
		return;
	}
	/* the token's threads= items as written (null: any thread) */
	scope = t && t->threads ? json_array() : json_null();
	for (char **s = t && t->threads ? t->threads : NULL; scope && s && *s; s++)
		if (json_array_append_new(scope, json_string(*s)) < 0) {
			json_decref(scope);
			scope = NULL;
		}
	if (!scope) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	/* previews have their own listener; a sandbox's egress needs an allow list */
	bool ports = c->router->conf->preview_listen && c->router->conf->preview_listen[0];
	respond_json(c, 200,
		     json_pack("{s:i, s:{s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:b}, "
			       "s:{s:I, s:I, s:I, s:I}, s:{s:o}, s:s}",
			       "version", 1, "sandbox", "exec", true, "writableStdin", true,
			       "backgroundProcesses", true, "killableProcesses", true, "fsWatch",
			       true, "snapshots", true, "fork", true, "ports", ports,
			       "networkPolicy", rep.has_network_policy && rep.network_policy,
			       "durableFilesystem", true, "limits", "fileApiMaxBytes",
			       (json_int_t)MIN(rep.file_api_max_bytes,
					       (uint64_t)c->router->conf->max_file_body),
			       "execStdinMaxBytes", (json_int_t)rep.exec_stdin_max_bytes,
			       "maxExecsPerSandbox", (json_int_t)rep.max_execs_per_sandbox,
			       "execTimeoutMaxMs", (json_int_t)rep.exec_timeout_max_ms, "scope",
			       "threads", scope, "shell", rep.shell ? rep.shell : "/bin/sh"));
}

void
route_capabilities(HttpConn *c, Route *rt)
{
	(void)rt;
	if (COORD_CALL(c->router, CAPABILITIES_GET, &((Msg_CAPABILITIES_GET){}), capabilities_reply,
		       c) < 0)
		routes_unavailable(c);
}

/* {events: [{type, path}], cursor, dropped} from the shim's map */
static void
watch_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	const msgpack_object *ev = body ? mp_map_get(body, "events") : NULL;
	const msgpack_object *cur = body ? mp_map_get(body, "cursor") : NULL;
	const msgpack_object *dr = body ? mp_map_get(body, "dropped") : NULL;
	json_auto_t *arr = json_array();

	if (err < 0) {
		routes_coord_error(c, err, body, "no such directory");
		return;
	}
	if (!arr || !ev || ev->type != MSGPACK_OBJECT_ARRAY || !cur ||
	    cur->type != MSGPACK_OBJECT_POSITIVE_INTEGER) {
		http_respond_error(c, 500, "internal", "bad reply from containerd-shim");
		return;
	}
	for (uint32_t i = 0; i < ev->via.array.size; i++) {
		const msgpack_object *e = &ev->via.array.ptr[i];
		const msgpack_object *t = mp_map_get(e, "type"), *pa = mp_map_get(e, "path");
		size_t len = 0;
		if (!t || t->type != MSGPACK_OBJECT_STR || !pa ||
		    (pa->type != MSGPACK_OBJECT_BIN && pa->type != MSGPACK_OBJECT_STR))
			continue;
		/* a name a sandbox made need not be UTF-8: invalid bytes become U+FFFD */
		_cleanup_free_ char *path = utf8_sanitize(pa->via.bin.ptr, pa->via.bin.size, &len);
		json_t *o = path ? json_pack("{s:s%, s:s%}", "type", t->via.str.ptr,
					     (size_t)t->via.str.size, "path", path, len)
				 : NULL;
		if (json_array_append_new(arr, o) < 0) {
			http_respond_error(c, 500, "internal", "out of memory");
			return;
		}
	}
	respond_json(
	    c, 200,
	    json_pack(
		"{s:O, s:I, s:I}", "events", arr, "cursor", (json_int_t)cur->via.u64, "dropped",
		(json_int_t)(dr && dr->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? dr->via.u64 : 0)));
}

/* A uint query parameter no larger than max; *ret unchanged when absent.
 * False after answering 400. */
static bool
query_uint(HttpConn *c, Route *rt, const char *name, uint64_t max, bool *has, uint64_t *ret)
{
	_cleanup_free_ char *v = NULL;
	char *end = NULL;
	unsigned long long n;

	if (route_query(rt, name, &v) < 0)
		goto bad;
	if (!v)
		return true;
	errno = 0;
	n = strtoull(v, &end, 10);
	if (!*v || *end || errno || v[0] == '-' || n > max)
		goto bad;
	*ret = n;
	if (has)
		*has = true;
	return true;
bad:
	http_respond_error(c, 400, "bad_request",
			   "cursor must be a cursor of this watch, waitMs 0..60000");
	return false;
}

/* GET /sandboxes/{id}/watch[?path=DIR&cursor=N&waitMs=25000] */
void
route_sandbox_watch(HttpConn *c, Route *rt)
{
	_cleanup_free_ char *path = NULL;
	uint64_t cursor = 0, wait = 25000;
	bool has_cursor = false;
	int r;

	if (!routes_path_thread_id(c, rt->seg[1]))
		return;
	if (route_query(rt, "path", &path) < 0) {
		http_respond_error(c, 400, "invalid_path",
				   "the path has a malformed percent-escape");
		return;
	}
	if (!query_uint(c, rt, "cursor", UINT64_MAX, &has_cursor, &cursor) ||
	    !query_uint(c, rt, "waitMs", 60000, NULL, &wait))
		return;
	/* "/x" and "x" name the same directory; "" and "/" the workspace */
	const char *pv = path ? path + (path[0] == '/') : NULL;
	r = COORD_CALL_TIMEOUT(c->router, WATCH_POLL,
			       &((Msg_WATCH_POLL){.thread_id = rt->seg[1],
						  .path = pv,
						  .path_len = pv ? strlen(pv) : 0,
						  .has_path = pv != NULL,
						  .cursor = cursor,
						  .has_cursor = has_cursor,
						  .wait_ms = wait}),
			       watch_reply, c, wait * USEC_PER_MSEC + 15 * USEC_PER_SEC);
	if (r < 0)
		routes_unavailable(c);
}
