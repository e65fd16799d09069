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
 *
 * A sandbox id is a thread id: the same rules and the token's thread scope
 * (403 thread_forbidden). coordinatord's SANDBOX_CTL and CAPABILITIES_GET
 * (docs/PROTOCOL.md) do the work.
 */
#include "config.h"

#include "routes-int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "log.h"
#include "macro.h"

/* The shell a `command` runs in (SANDBOX-API.md "Exec"). */
#define SANDBOX_SHELL "/bin/bash"

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
sandbox_ctl(HttpConn *c, const char *id, const char *action, bool keep)
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
						   .has_keep_workspace = keep}),
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
		sandbox_ctl(c, id, "put", false);
		return;
	}
	case HTTP_GET: sandbox_ctl(c, id, "get", false); return;
	case HTTP_DELETE:
		if (route_query(rt, "keep", &keep) < 0 || (keep && !streq(keep, "workspace"))) {
			http_respond_error(c, 400, "bad_request", "keep must be 'workspace'");
			return;
		}
		sandbox_ctl(c, id, "delete", keep != NULL);
		return;
	default: http_respond_405(c, "GET, PUT, DELETE"); return;
	}
}

void
route_sandbox_stop(HttpConn *c, Route *rt)
{
	if (routes_path_thread_id(c, rt->seg[1]))
		sandbox_ctl(c, rt->seg[1], "stop", false);
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
	respond_json(c, 200,
		     json_pack("{s:i, s:{s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:b, s:b}, "
			       "s:{s:I, s:I, s:I, s:I}, s:{s:o}, s:s}",
			       "version", 1, "sandbox", "exec", true, "writableStdin", true,
			       "backgroundProcesses", true, "killableProcesses", true, "fsWatch",
			       true, "snapshots", true, "fork", true, "ports", false,
			       "networkPolicy", false, "durableFilesystem", true, "limits",
			       "fileApiMaxBytes",
			       (json_int_t)MIN(rep.file_api_max_bytes,
					       (uint64_t)c->router->conf->max_file_body),
			       "execStdinMaxBytes", (json_int_t)rep.exec_stdin_max_bytes,
			       "maxExecsPerSandbox", (json_int_t)rep.max_execs_per_sandbox,
			       "execTimeoutMaxMs", (json_int_t)rep.exec_timeout_max_ms, "scope",
			       "threads", scope, "shell", SANDBOX_SHELL));
}

void
route_capabilities(HttpConn *c, Route *rt)
{
	(void)rt;
	if (COORD_CALL(c->router, CAPABILITIES_GET, &((Msg_CAPABILITIES_GET){}), capabilities_reply,
		       c) < 0)
		routes_unavailable(c);
}
