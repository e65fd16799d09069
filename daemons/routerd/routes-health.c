/* SPDX-License-Identifier: MIT */
/*
 * routes-health.c — GET /healthz, /readyz and /metrics (API.md): liveness,
 * readiness (coordinatord and the shim behind it), and routerd's metrics
 * followed by coordinatord's.
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

void
route_healthz(HttpConn *c, Route *rt)
{
	static const char ok[] = "{\"status\":\"ok\"}";
	http_respond(c, 200, "application/json; charset=utf-8", ok, STRLEN(ok), NULL, false);
}

static void
readyz_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	bool shim = false, storage = false, cluster = true;
	uint64_t active = 0;
	MpReader mr;

	if (err < 0) {
		if (err == -ENOMSG)
			routes_coord_error(c, err, body, "");
		else
			http_respond_error(c, 503, "not_ready", "coordinator unavailable");
		return;
	}
	mp_reader_init(&mr, body);
	mp_read_bool_opt(&mr, "shim_connected", &shim, false);
	mp_read_bool_opt(&mr, "storage_ok", &storage, false);
	mp_read_bool_opt(&mr, "cluster_ok", &cluster, true); /* absent: single host */
	mp_read_uint(&mr, "active_runs", &active);
	mp_reader_done(&mr);
	if (!shim || !storage || !cluster) {
		http_respond_error(c, 503, "not_ready",
				   !shim      ? "containerd-shim not connected"
				   : !storage ? "storage not writable"
					      : "cluster (NATS JetStream) not reachable");
		return;
	}
	json_auto_t *j =
	    json_pack("{s:s, s:I}", "status", "ready", "activeRuns", (json_int_t)active);
	if (!j) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	http_respond_json(c, 200, j);
}

void
route_readyz(HttpConn *c, Route *rt)
{
	int r = COORD_CALL(c->router, STATUS_GET, &((Msg_STATUS_GET){}), readyz_reply, c);
	if (r < 0)
		http_respond_error(c, 503, "not_ready", "coordinator unavailable");
}

static void
metrics_respond(HttpConn *c, const char *coord_text, size_t coord_len)
{
	_cleanup_free_ char *own = NULL;
	size_t own_len = 0;

	if (metrics_format(c->router, coord_text != NULL, &own, &own_len) < 0) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	_cleanup_free_ char *all = malloc(own_len + coord_len + 2);
	if (!all) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	memcpy(all, own, own_len);
	if (coord_len > 0) {
		memcpy(all + own_len, coord_text, coord_len);
		if (coord_text[coord_len - 1] != '\n')
			all[own_len + coord_len++] = '\n';
	}
	http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", all, own_len + coord_len,
		     NULL, false);
}

static void
metrics_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	const msgpack_object *m = err >= 0 && body ? mp_map_get(body, "metrics") : NULL;

	if (m && m->type == MSGPACK_OBJECT_STR)
		metrics_respond(c, m->via.str.ptr, m->via.str.size);
	else
		metrics_respond(c, err >= 0 || err == -ENOMSG ? "" : NULL, 0);
}

void
route_metrics(HttpConn *c, Route *rt)
{
	int r = COORD_CALL(c->router, STATUS_GET, &((Msg_STATUS_GET){}), metrics_reply, c);
	if (r < 0)
		metrics_respond(c, NULL, 0);
}
