/* SPDX-License-Identifier: MIT */
/*
 * routes-net.c — a sandbox's network seen from the API (docs/SANDBOX-API.md
 * "Ports"): POST /sandboxes/{id}/ports/{port}, a live preview's URL
 * (preview.h). The route table (routes.c) sends requests here after the
 * Host, Origin and token checks; the thread scope is checked here.
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
