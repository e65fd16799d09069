/* SPDX-License-Identifier: MIT */
/*
 * routes-files.c — /threads/{threadId}/files/{path…}: the workspace file API
 * (THREAD_FILE to coordinatord, SANDBOX_FILE to the shim; docs/PROTOCOL.md).
 *
 *   GET    …/files/PATH          a regular file: its bytes (application/octet-stream);
 *                                a directory: {"type", "entries": [...]} (JSON)
 *   GET    …/files/PATH?stat=1   lstat: {"type", "mode", "size", "mtimeNs"}
 *   PUT    …/files/PATH[?mode=0644][&parents=1]   body = content; 201 created,
 *                                200 replaced; parents: missing directories made
 *   DELETE …/files/PATH[?recursive=1][&force=1]   204 (recursive: a tree;
 *                                force: a missing path too)
 *   POST   …/files/PATH?op=mkdir[&mode=0755][&parents=1]   201; mkdir -p: 200
 *                                when it was a directory already
 *   POST   …/files/PATH?op=rename&to=NEW[&overwrite=1]     200
 *
 * Also reachable as /sandboxes/{id}/files/… (the sandbox API, SANDBOX-API.md).
 *
 * The path is everything after "/files/", percent-decoded as one string (%2F is
 * a slash like '/'); a bad escape or %00 is 400 invalid_path here, everything
 * else is checked by the shim, whose ERROR reason picks the status
 * (reasons.def, through routes_coord_reason()).
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

/* By the ERROR's reason; else by errno: the coordinator link (503), a
 * coordinatord without THREAD_FILE (501), anything else 500 (logged). */
static void
files_error(HttpConn *c, int err, const msgpack_object *body)
{
	size_t ml = 0;
	const char *m = coord_error_message(body, &ml);

	if (routes_coord_reason(c, body))
		return;
	if (err == -ECONNRESET || err == -ETIMEDOUT) {
		http_respond_error(c, 503, "unavailable", "coordinator unavailable");
		return;
	}
	if (err == -ENOMSG) {
		http_respond_error(c, 501, "not_implemented", "the file API is not available");
		return;
	}
	log_warning_errno(err, "%s: file API request failed: %.*s: %m", c->addr, (int)MIN(ml, 200),
			  m ? m : "");
	http_respond_error(c, 500, "internal", "internal error");
}

static const char *
str_of(const msgpack_object *o, char *buf, size_t n)
{
	if (!o || o->type != MSGPACK_OBJECT_STR)
		return NULL;
	snprintf(buf, n, "%.*s", (int)o->via.str.size, o->via.str.ptr);
	return buf;
}

static uint64_t
uint_of(const msgpack_object *o)
{
	return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

/* {type, mode "0644", size, mtimeNs} (+ name) from a shim stat map. */
static json_t *
stat_json(const msgpack_object *m, bool with_name)
{
	char type[32], mode[8];
	const msgpack_object *mt = mp_map_get(m, "mtime_ns");
	int64_t mtime = mt && mt->type == MSGPACK_OBJECT_POSITIVE_INTEGER   ? (int64_t)mt->via.u64
			: mt && mt->type == MSGPACK_OBJECT_NEGATIVE_INTEGER ? mt->via.i64
									    : 0;
	json_t *j;

	snprintf(mode, sizeof(mode), "%04llo",
		 (unsigned long long)(uint_of(mp_map_get(m, "mode")) & 07777));
	j = json_pack("{s:s, s:s, s:I, s:I}", "type",
		      str_of(mp_map_get(m, "type"), type, sizeof(type)) ?: "unknown", "mode", mode,
		      "size", (json_int_t)uint_of(mp_map_get(m, "size")), "mtimeNs",
		      (json_int_t)mtime);
	if (j && with_name) {
		/* a name a run made need not be UTF-8: invalid bytes become U+FFFD */
		const msgpack_object *n = mp_map_get(m, "name");
		size_t len = 0;
		_cleanup_free_ char *name =
		    n && n->type == MSGPACK_OBJECT_STR
			? utf8_sanitize(n->via.str.ptr, n->via.str.size, &len)
			: NULL;
		if (!name || json_object_set_new(j, "name", json_stringn_nocheck(name, len)) < 0) {
			json_decref(j);
			return NULL;
		}
	}
	return j;
}

static void
respond_json_or_500(HttpConn *c, int status, json_t *j)
{
	if (!j) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	http_respond_json(c, status, j);
	json_decref(j);
}

static void
file_get_reply(Peer *peer, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	const msgpack_object *type, *data, *entries;
	char t[16];

	if (err < 0) {
		files_error(c, err, body);
		return;
	}
	type = mp_map_get(body, "type");
	if (str_of(type, t, sizeof(t)) && streq(t, "file")) {
		static const char hdr[] = "X-Content-Type-Options: nosniff\r\n";
		data = mp_map_get(body, "data");
		if (!data ||
		    (data->type != MSGPACK_OBJECT_BIN && data->type != MSGPACK_OBJECT_STR)) {
			http_respond_error(c, 500, "internal", "bad reply from containerd-shim");
			return;
		}
		http_respond(c, 200, "application/octet-stream", data->via.bin.ptr,
			     data->via.bin.size, hdr, false);
		return;
	}
	entries = mp_map_get(body, "entries");
	if (!entries || entries->type != MSGPACK_OBJECT_ARRAY) {
		http_respond_error(c, 500, "internal", "bad reply from containerd-shim");
		return;
	}
	json_t *arr = json_array();
	for (uint32_t i = 0; arr && i < entries->via.array.size; i++)
		if (json_array_append_new(arr, stat_json(&entries->via.array.ptr[i], true)) < 0) {
			json_decref(arr);
			arr = NULL;
		}
	respond_json_or_500(
	    c, 200, arr ? json_pack("{s:s, s:o}", "type", "directory", "entries", arr) : NULL);
}

static void
file_stat_reply(Peer *peer, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;

	if (err < 0) {
		files_error(c, err, body);
		return;
	}
	respond_json_or_500(c, 200, stat_json(body, false));
}

static void
file_write_reply(Peer *peer, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	bool created = false;
	MpReader r;

	if (err < 0) {
		files_error(c, err, body);
		return;
	}
	mp_reader_init(&r, body);
	mp_read_bool_opt(&r, "created", &created, false);
	mp_reader_done(&r);
	respond_json_or_500(c, created ? 201 : 200, json_pack("{s:b}", "created", created));
}

static void
file_delete_reply(Peer *peer, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;

	if (err < 0) {
		files_error(c, err, body);
		return;
	}
	http_respond(c, 204, NULL, NULL, 0, NULL, false);
}

static void
file_mkdir_reply(Peer *peer, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	bool created = true;
	MpReader r;

	if (err < 0) {
		files_error(c, err, body);
		return;
	}
	/* mkdir -p answers whether it made it; a plain mkdir always did */
	mp_reader_init(&r, body);
	mp_read_bool_opt(&r, "created", &created, true);
	mp_reader_done(&r);
	respond_json_or_500(c, created ? 201 : 200, json_pack("{s:b}", "created", created));
}

static void
file_rename_reply(Peer *peer, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;

	if (err < 0) {
		files_error(c, err, body);
		return;
	}
	respond_json_or_500(c, 200, json_pack("{s:b}", "renamed", true));
}

/* "0644": 1 to 4 octal digits, at most 0777; *ret -1 when absent. */
static int
parse_mode(const char *query, int *ret)
{
	_cleanup_free_ char *m = NULL;
	unsigned v = 0;
	size_t n;

	*ret = -1;
	if (routes_query(query, "mode", &m) < 0)
		return -EINVAL;
	if (!m)
		return 0;
	n = strlen(m);
	if (n == 0 || n > 4 || strspn(m, "01234567") != n)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		v = v * 8 + (unsigned)(m[i] - '0');
	if (v > 0777)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

static bool
query_flag(const char *query, const char *name)
{
	_cleanup_free_ char *v = NULL;

	if (routes_query(query, name, &v) < 0 || !v)
		return false;
	return streq(v, "") || streq(v, "1") || streq(v, "true");
}

void
route_files(HttpConn *c, const char *thread_id, const char *raw, const char *query)
{
	enum http_method m = c->req.method;
	_cleanup_free_ char *path = NULL, *op = NULL, *to = NULL;
	bool parents = false, recursive = false, force = false, overwrite = false;
	const char *wop;
	PeerReplyFn cb;
	int mode = -1, r;

	/* "" and "/" are the workspace root; "/x" is x; "//x" is "/x" (refused). */
	if (*raw == '/')
		raw++;
	if (routes_url_decode(raw, strlen(raw), false, &path) < 0) {
		http_respond_error(c, 400, "invalid_path",
				   "the path has a malformed percent-escape or a NUL byte");
		return;
	}
	switch (m) {
	case HTTP_GET:
		wop = query_flag(query, "stat") ? "lstat" : "get";
		cb = streq(wop, "lstat") ? file_stat_reply : file_get_reply;
		break;
	case HTTP_PUT:
		wop = "write";
		cb = file_write_reply;
		parents = query_flag(query, "parents");
		break;
	case HTTP_DELETE:
		wop = "remove";
		cb = file_delete_reply;
		recursive = query_flag(query, "recursive");
		force = query_flag(query, "force");
		break;
	case HTTP_POST:
		if (routes_query(query, "op", &op) < 0 || !op ||
		    (!streq(op, "mkdir") && !streq(op, "rename"))) {
			http_respond_error(c, 400, "bad_request",
					   "POST needs ?op=mkdir or ?op=rename&to=PATH");
			return;
		}
		wop = op;
		cb = streq(op, "mkdir") ? file_mkdir_reply : file_rename_reply;
		parents = streq(op, "mkdir") && query_flag(query, "parents");
		overwrite = streq(op, "rename") && query_flag(query, "overwrite");
		if (streq(op, "rename") && (routes_query(query, "to", &to) < 0 || !to)) {
			http_respond_error(c, 400, "bad_request",
					   "rename needs ?to=PATH (relative to the workspace)");
			return;
		}
		break;
	default: http_respond_405(c, "GET, PUT, DELETE, POST"); return;
	}
	if ((m == HTTP_PUT || (op && streq(op, "mkdir"))) && parse_mode(query, &mode) < 0) {
		http_respond_error(c, 400, "bad_request",
				   "mode must be octal permission bits, e.g. 0644");
		return;
	}
	r = COORD_CALL(c->router, THREAD_FILE,
		       &((Msg_THREAD_FILE){
			   .thread_id = thread_id,
			   .op = wop,
			   .path = path,
			   .path_len = strlen(path),
			   .to = to,
			   .to_len = to ? strlen(to) : 0,
			   .has_to = to != NULL,
			   .data = c->req.body ? c->req.body : "",
			   .data_len = c->req.body_len,
			   .has_data = m == HTTP_PUT,
			   .tenant = router_token_tenant(c->req.token),
			   .mode = mode,
			   .has_mode = mode >= 0,
			   .parents = parents,
			   .has_parents = parents,
			   .recursive = recursive,
			   .has_recursive = recursive,
			   .force = force,
			   .has_force = force,
			   .overwrite = overwrite,
			   .has_overwrite = overwrite,
		       }),
		       cb, c);
	if (r == -EMSGSIZE)
		http_respond_error(c, 413, "too_large",
				   "the file does not fit in one frame (max_frame)");
	else if (r < 0)
		http_respond_error(c, 503, "unavailable", "coordinator unavailable");
}
