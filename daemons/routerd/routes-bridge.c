/* SPDX-License-Identifier: MIT */
/*
 * routes-bridge.c — the host tools' routes, /_bridge/{runId} and
 * /tool-exec/{runId} (tanstack-protocol.md §1.4, §1.5): relayed to
 * coordinatord as BRIDGE_CALL with the run's own token; on the bridge socket
 * (a sandbox's forward) they are all that is served.
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
bridge_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	_cleanup_(reply_done_BRIDGE_CALL) Reply_BRIDGE_CALL rep = {};

	if (err < 0) {
		routes_coord_error(c, err, body, "no active bridge for run");
		return;
	}
	if (reply_decode_BRIDGE_CALL(body, &rep) < 0 || rep.status < 200 || rep.status > 599) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	http_respond(c, (int)rep.status, rep.content_type ?: "application/json; charset=utf-8",
		     rep.body, rep.body_len, NULL, false);
}

void
route_bridge(HttpConn *c, Route *rt, const char *kind)
{
	_cleanup_free_ char *thread_id = NULL;
	const char *auth = http_header(c, "Authorization");
	MpWriter w;

	if (route_query(rt, "threadId", &thread_id) < 0) {
		http_respond_error(c, 400, "bad_request", "malformed threadId");
		return;
	}
	if (!coord_ready(c->router)) {
		routes_unavailable(c);
		return;
	}
	mp_writer_init(&w);
	mp_w_map(&w, 3 + !!thread_id + !!auth);
	mp_w_str(&w, "run_id", rt->seg[1]);
	mp_w_str(&w, "kind", kind);
	if (thread_id)
		mp_w_str(&w, "thread_id", thread_id);
	if (auth) /* passed on, never logged */
		mp_w_str(&w, "authorization", auth);
	mp_w_key(&w, "body");
	mp_w_strn(&w, c->req.body ? c->req.body : "", c->req.body_len);
	int r = coord_call_timeout(c->router, MSG_BRIDGE_CALL, &w, bridge_reply, c,
				   BRIDGE_TIMEOUT_USEC);
	mp_writer_done(&w);
	if (r < 0)
		routes_coord_error(c, r == -ECONNRESET ? r : -EIO, NULL, "not found");
}

/* The bridge socket (a sandbox's forward, through the shim): the host tools
 * of the run the connection came from, nothing else. Every other route, and
 * another run's bridge, is 404 as if it did not exist; the run's own token is
 * still required (coordinatord checks it against exactly that run). */
void
route_bridge_only(HttpConn *c, Route *rt)
{
	if (rt->n_seg != 2 || rt->rest ||
	    (!streq(rt->seg[0], "_bridge") && !streq(rt->seg[0], "tool-exec")) ||
	    !streq(rt->seg[1], c->bridge_run)) {
		http_respond_error(c, 404, "not_found", "not found");
		return;
	}
	if (c->req.method != HTTP_POST) {
		http_respond_405(c, "POST");
		return;
	}
	if (!http_header(c, "Authorization")) {
		http_respond(c, 401, "application/json; charset=utf-8",
			     "{\"error\":\"unauthorized\",\"code\":\"unauthorized\"}",
			     STRLEN("{\"error\":\"unauthorized\",\"code\":\"unauthorized\"}"),
			     "WWW-Authenticate: Bearer realm=\"runwarden\"\r\n", false);
		return;
	}
	route_bridge(c, rt, streq(rt->seg[0], "_bridge") ? "bridge" : "tool_exec");
}
