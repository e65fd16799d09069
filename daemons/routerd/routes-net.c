/* SPDX-License-Identifier: MIT */
/*
 * routes-net.c — a sandbox's network seen from the API (docs/SANDBOX-API.md
 * "Ports", "Egress"): POST /sandboxes/{id}/ports/{port}, a live preview's
 * URL (preview.h); PUT /sandboxes/{id}/egress, the names its egress proxy
 * may reach (SANDBOX_EGRESS, coordinatord's egress.c). The route table (routes.c) sends requests
 * here after the Host, Origin and token checks; the thread scope is checked here.
 */
#include "config.h"

#include "routes-int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "preview.h"

/* "1".."65535", digits only; 0 when s is no port. */
static uint16_t
port_parse(const char *s)
{
	unsigned long v = 0;

	if (s[0] < '1' || s[0] > '9' || strlen(s) > 5)
		return 0;
	for (const char *p = s; *p; p++) {
		if (*p < '0' || *p > '9')
			return 0;
		v = v * 10 + (unsigned long)(*p - '0');
	}
	return v <= 65535 ? (uint16_t)v : 0;
}

/* POST /sandboxes/{id}/ports/{port} → {"url", "headers": {}, "expiresAt"} */
void
route_sandbox_port(HttpConn *c, Route *rt)
{
	_cleanup_free_ char *url = NULL;
	json_auto_t *j = NULL;
	int64_t expires_ms = 0;
	uint16_t port;
	int r;

	if (!routes_path_thread_id(c, rt->seg[1]))
		return;
	port = port_parse(rt->seg[3]);
	if (port == 0) {
		http_respond_error(c, 400, "bad_request", "port must be 1..65535");
		return;
	}
	if (!c->router->preview) {
		http_respond_error(c, 501, "ports_disabled",
				   "previews are off on this server ([routerd] preview_listen)");
		return;
	}
	/* a body is optional, and then JSON (no cross-site "simple" POST acts) */
	if (!routes_json_content_type(c, true))
		return;
	r = preview_mint(c->router->preview, rt->seg[1], port, &url, &expires_ms);
	if (r == -ENOSPC) {
		http_respond_error(c, 503, "too_many_previews",
				   "too many live previews; try again later");
		return;
	}
	if (r < 0) {
		log_warning_errno(r, "%s: cannot make a preview: %m", c->addr);
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	j = json_pack("{s:s,s:{},s:I}", "url", url, "headers", "expiresAt", (json_int_t)expires_ms);
	if (!j) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	http_respond_json(c, 200, j);
}

static void
egress_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	_cleanup_(reply_done_SANDBOX_EGRESS) Reply_SANDBOX_EGRESS rep = {};
	json_auto_t *j = NULL, *allow = NULL;

	if (err < 0) {
		routes_coord_error(c, err, body, "unknown sandbox");
		return;
	}
	if (reply_decode_SANDBOX_EGRESS(body, &rep) < 0 || !(allow = json_array())) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	for (size_t i = 0; rep.allow && rep.allow[i]; i++)
		json_array_append_new(allow, json_string(rep.allow[i]));
	j = json_pack("{s:O}", "allow", allow);
	if (j && rep.has_port)
		json_object_set_new(j, "proxy",
				    json_sprintf("http://127.0.0.1:%u", (unsigned)rep.port));
	if (!j) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	http_respond_json(c, 200, j);
}

/* PUT /sandboxes/{id}/egress {"allow": ["host[:port]", …]} → {"allow", "proxy"?} */
void
route_sandbox_egress(HttpConn *c, Route *rt)
{
	json_auto_t *body = NULL;
	json_t *allow, *v;
	_cleanup_free_ char **names = NULL;
	size_t i, n;
	int r;

	if (!routes_path_thread_id(c, rt->seg[1]))
		return;
	body = routes_json_request(c);
	if (!body)
		return;
	allow = json_object_get(body, "allow");
	if (!json_is_object(body) || !json_is_array(allow)) {
		http_respond_error(c, 400, "bad_request", "the body must be {\"allow\": [names]}");
		return;
	}
	n = json_array_size(allow);
	if (n > 64) {
		http_respond_error(c, 400, "bad_request", "allow: at most 64 names");
		return;
	}
	names = calloc(n + 1, sizeof(char *));
	if (!names) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	json_array_foreach(allow, i, v)
	{
		if (!json_is_string(v) || json_string_length(v) == 0 ||
		    strlen(json_string_value(v)) != json_string_length(v)) {
			http_respond_error(c, 400, "bad_request", "allow: names are strings");
			return;
		}
		names[i] = (char *)json_string_value(v);
	}
	if (!coord_ready(c->router)) {
		routes_unavailable(c);
		return;
	}
	r = COORD_CALL(c->router, SANDBOX_EGRESS,
		       &((Msg_SANDBOX_EGRESS){.thread_id = rt->seg[1], .allow = names}),
		       egress_reply, c);
	if (r < 0)
		routes_unavailable(c);
}
