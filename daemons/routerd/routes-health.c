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

/* coordinatord's text, with routerd's samples of the families both report
 * (the loop lag, by daemon label) right after coordinatord's samples of the
 * same family: a family must be one group (its # TYPE told once). A family
 * coordinatord did not report comes whole at the end. */
static void
metrics_merge(const Router *r, const char *text, size_t len, FILE *f)
{
	bool told[_LOOP_LAG_FAMILY_MAX] = {false};

	for (const char *p = text, *end = text + len; p < end;) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		const char *next = p + n + (nl ? 1 : 0);
		fwrite(p, 1, n, f);
		fputc('\n', f);
		for (LoopLagFamily fam = 0; fam < _LOOP_LAG_FAMILY_MAX; fam++) {
			if (told[fam] || !loop_lag_is_sample(p, n, fam))
				continue;
			const char *nl2 = memchr(next, '\n', (size_t)(end - next));
			size_t n2 = nl2 ? (size_t)(nl2 - next) : (size_t)(end - next);
			if (next < end && loop_lag_is_sample(next, n2, fam))
				continue; /* not its last sample yet */
			loop_lag_samples(r->loop_lag, fam, "routerd", f);
			told[fam] = true;
		}
		p = next;
	}
	for (LoopLagFamily fam = 0; fam < _LOOP_LAG_FAMILY_MAX; fam++)
		if (!told[fam]) {
			loop_lag_header(fam, f);
			loop_lag_samples(r->loop_lag, fam, "routerd", f);
		}
}

static void
metrics_respond(HttpConn *c, const char *coord_text, size_t coord_len)
{
	_cleanup_free_ char *own = NULL, *all = NULL;
	size_t own_len = 0, all_len = 0;
	FILE *f;

	if (metrics_format(c->router, coord_text != NULL, &own, &own_len) < 0 ||
	    !(f = open_memstream(&all, &all_len))) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	fwrite(own, 1, own_len, f);
	metrics_merge(c->router, coord_text ?: "", coord_len, f);
	if (fclose(f) != 0) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	http_respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", all, all_len, NULL, false);
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
