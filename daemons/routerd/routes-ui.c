/* SPDX-License-Identifier: MIT */
/*
 * routes-ui.c — the run viewer's static files under /ui/ and GET /threads,
 * the listing of the host's threads it starts from.
 *
 *   GET /ui                   308 to /ui/
 *   GET /ui/                  index.html
 *   GET /ui/threads/…, /ui/runs/…, /ui/health   index.html (the page's deep links)
 *   GET /ui/FILE              FILE from ui_dir
 *   GET /threads?limit=&prefix=&status=&cursor=   one page of threads
 *
 * The files need no token (they hold no data; the page asks for the token and
 * sends it with its API calls). Every path is resolved beneath ui_dir:
 * segments starting with '.' (so "." and "..") or holding a decoded '/' are
 * refused before openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS) does the same
 * again in the kernel. Every file goes with a strict Content-Security-Policy
 * (scripts, styles and connections from this origin only, no inline script),
 * nosniff, no framing, and an ETag (inode, size, mtime) for If-None-Match.
 */
#include "config.h"

#include "routes-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fd-util.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"

#define UI_FILE_MAX (8 * 1024 * 1024)
#define THREADS_LIMIT_DEFAULT 50
#define THREADS_LIMIT_MAX 200

#define UI_HEADERS                                                                                 \
	"Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; "       \
	"img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "          \
	"frame-ancestors 'none'\r\n"                                                               \
	"X-Content-Type-Options: nosniff\r\n"                                                      \
	"X-Frame-Options: DENY\r\n"                                                                \
	"Referrer-Policy: no-referrer\r\n"                                                         \
	"Cache-Control: no-cache\r\n"

static const struct {
	const char *ext;
	const char *type;
} ui_types[] = {
    {".html", "text/html; charset=utf-8"},
    {".js", "text/javascript; charset=utf-8"},
    {".mjs", "text/javascript; charset=utf-8"},
    {".css", "text/css; charset=utf-8"},
    {".json", "application/json; charset=utf-8"},
    {".svg", "image/svg+xml"},
    {".png", "image/png"},
    {".ico", "image/x-icon"},
    {".txt", "text/plain; charset=utf-8"},
    {".woff2", "font/woff2"},
};

static const char *
ui_content_type(const char *name)
{
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot && i < ELEMENTSOF(ui_types); i++)
		if (streq(dot, ui_types[i].ext))
			return ui_types[i].type;
	return "application/octet-stream";
}

const char *
routes_ui_dir(const Router *r)
{
	const char *d = r->conf->ui_dir;
	return d && *d ? d : UIDIR;
}

/* A file path from the segments after "ui": every segment a plain name. */
static int
ui_rel_path(char *const *seg, size_t n, char *buf, size_t size)
{
	size_t o = 0;

	if (n == 0 || streq(seg[0], "threads") || streq(seg[0], "runs") ||
	    streq(seg[0], "health")) {
		snprintf(buf, size, "index.html");
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		const char *s = seg[i];
		if (!*s || s[0] == '.' || strchr(s, '/') || strchr(s, '\\'))
			return -EINVAL;
		int w = snprintf(buf + o, size - o, "%s%s", i ? "/" : "", s);
		if (w < 0 || (size_t)w >= size - o)
			return -ENAMETOOLONG;
		o += (size_t)w;
	}
	return 0;
}

void
route_ui(HttpConn *c, char *const *seg, size_t n, bool trailing_slash)
{
	_cleanup_close_ int root = -EBADF, fd = -EBADF;
	_cleanup_free_ char *body = NULL;
	char rel[1024], etag[96], hdr[1200];
	struct stat st;
	int r;

	if (c->req.method != HTTP_GET) {
		http_respond_405(c, "GET");
		return;
	}
	if (n == 0 && !trailing_slash) {
		http_respond(c, 308, "text/plain; charset=utf-8", "/ui/\n", 5, "Location: /ui/\r\n",
			     false);
		return;
	}
	if (ui_rel_path(seg, n, rel, sizeof(rel)) < 0) {
		http_respond_error(c, 404, "not_found", "not found");
		return;
	}
	root = open(routes_ui_dir(c->router), O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		log_warning_errno(-errno, "%s: the UI directory '%s' cannot be opened: %m", c->addr,
				  routes_ui_dir(c->router));
		http_respond_error(c, 404, "not_found", "the web UI is not installed (ui_dir)");
		return;
	}
	struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
			       .resolve =
				   RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	fd = (int)syscall(SYS_openat2, root, rel, &how, sizeof(how));
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		http_respond_error(c, 404, "not_found", "not found");
		return;
	}
	if (st.st_size > UI_FILE_MAX) {
		http_respond_error(c, 500, "internal", "file too large");
		return;
	}
	snprintf(etag, sizeof(etag), "\"%" PRIx64 "-%" PRIx64 "-%" PRIx64 "\"", (uint64_t)st.st_ino,
		 (uint64_t)st.st_size,
		 (uint64_t)st.st_mtim.tv_sec * UINT64_C(1000000000) + (uint64_t)st.st_mtim.tv_nsec);
	snprintf(hdr, sizeof(hdr), "ETag: %s\r\n" UI_HEADERS, etag);
	const char *inm = http_header(c, "If-None-Match");
	if (inm && (strstr(inm, etag) || streq(inm, "*"))) {
		http_respond(c, 304, NULL, NULL, 0, hdr, false);
		return;
	}
	body = malloc((size_t)st.st_size + 1);
	if (!body) {
		http_respond_error(c, 500, "internal", "out of memory");
		return;
	}
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t k = read(fd, body + got, (size_t)st.st_size - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			r = k < 0 ? -errno : -EIO;
			log_warning_errno(r, "%s: reading '%s' of the UI failed: %m", c->addr, rel);
			http_respond_error(c, 500, "internal", "read error");
			return;
		}
		got += (size_t)k;
	}
	http_respond(c, 200, ui_content_type(rel), body, got, hdr, false);
}

/* ---- GET /threads ---- */

static void
threads_reply(Peer *p, int err, const msgpack_object *body, void *userdata)
{
	HttpConn *c = userdata;
	const msgpack_object *items = body ? mp_map_get(body, "threads") : NULL;
	const msgpack_object *more = body ? mp_map_get(body, "more") : NULL;

	if (err < 0) {
		if (err == -ENOMSG || err == -EOPNOTSUPP)
			http_respond_error(c, 501, "not_implemented", "not implemented");
		else if (err == -EINVAL)
			http_respond_error(c, 400, "bad_request", "bad request");
		else if (err == -ECONNRESET || err == -ETIMEDOUT)
			http_respond_error(c, 503, "unavailable", "coordinator unavailable");
		else if (body && mp_map_get(body, "reason")) /* cluster_unavailable … */
			routes_coord_error(c, err, body, "unknown thread");
		else {
			log_warning_errno(err, "%s: THREAD_LIST failed: %m", c->addr);
			http_respond_error(c, 500, "internal", "internal error");
		}
		return;
	}
	json_auto_t *out = json_object(), *arr = json_array();
	if (!out || !arr || !items || items->type != MSGPACK_OBJECT_ARRAY) {
		http_respond_error(c, 500, "internal", "internal error");
		return;
	}
	for (uint32_t i = 0; i < items->via.array.size; i++) {
		const msgpack_object *o = &items->via.array.ptr[i];
		if (o->type != MSGPACK_OBJECT_STR) {
			http_respond_error(c, 500, "internal", "internal error");
			return;
		}
		json_t *j = json_loadb(o->via.str.ptr, o->via.str.size, 0, NULL);
		if (!j || json_array_append_new(arr, j) < 0) {
			http_respond_error(c, 500, "internal", "internal error");
			return;
		}
	}
	json_t *next = json_null();
	size_t n = json_array_size(arr);
	if (more && more->type == MSGPACK_OBJECT_BOOLEAN && more->via.boolean && n > 0) {
		json_t *last = json_array_get(arr, n - 1);
		_cleanup_free_ char *cur = NULL;
		if (asprintf(&cur, "%" JSON_INTEGER_FORMAT ".%s",
			     json_integer_value(json_object_get(last, "lastRunAt")),
			     json_string_value(json_object_get(last, "threadId")) ?: "") < 0) {
			http_respond_error(c, 500, "internal", "out of memory");
			return;
		}
		next = json_string(cur);
	}
	json_object_set(out, "threads", arr);
	json_object_set_new(out, "nextCursor", next);
	http_respond_json(c, 200, out);
}

void
route_threads(HttpConn *c, const char *query)
{
	_cleanup_free_ char *limit_s = NULL, *prefix = NULL, *status = NULL, *cursor = NULL;
	const RouterToken *t = c->req.token;
	int64_t after_ms = 0;
	const char *after_thread = NULL;
	long limit = THREADS_LIMIT_DEFAULT;
	int r;

	if (c->req.method != HTTP_GET) {
		http_respond_405(c, "GET");
		return;
	}
	if (routes_query(query, "limit", &limit_s) < 0 ||
	    routes_query(query, "prefix", &prefix) < 0 ||
	    routes_query(query, "status", &status) < 0 ||
	    routes_query(query, "cursor", &cursor) < 0) {
		http_respond_error(c, 400, "bad_request", "malformed query");
		return;
	}
	if (limit_s) {
		char *end;
		errno = 0;
		limit = strtol(limit_s, &end, 10);
		if (errno || end == limit_s || *end || limit < 1 || limit > THREADS_LIMIT_MAX) {
			http_respond_error(c, 400, "bad_request", "limit must be 1..200");
			return;
		}
	}
	if (status && !streq(status, "running") && !streq(status, "completed") &&
	    !streq(status, "failed") && !streq(status, "aborted")) {
		http_respond_error(c, 400, "bad_request",
				   "status must be running, completed, failed or aborted");
		return;
	}
	if (prefix && (strlen(prefix) > 256 || strpbrk(prefix, "\x7f") ||
		       strcspn(prefix, "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d"
				       "\x0e\x0f\x10\x11\x12\x13\x14\x15\x16\x17\x18\x19\x1a\x1b"
				       "\x1c\x1d\x1e\x1f") != strlen(prefix))) {
		http_respond_error(c, 400, "bad_request", "prefix must be a thread id prefix");
		return;
	}
	if (cursor) {
		char *end;
		errno = 0;
		long long ms = strtoll(cursor, &end, 10);
		if (errno || end == cursor || *end != '.' || ms < 0 || !end[1] ||
		    strlen(end + 1) > 256) {
			http_respond_error(c, 400, "bad_request", "malformed cursor");
			return;
		}
		after_ms = ms;
		after_thread = end + 1;
	}
	if (prefix && !*prefix) {
		free(prefix);
		prefix = NULL;
	}
	r = COORD_CALL(c->router, THREAD_LIST,
		       &((Msg_THREAD_LIST){
			   .limit = (uint64_t)limit,
			   .prefix = prefix,
			   .status = status,
			   .scope = t ? t->threads : NULL,
			   .after_ms = after_ms,
			   .has_after_ms = after_thread != NULL,
			   .after_thread = after_thread,
		       }),
		       threads_reply, c);
	if (r < 0)
		http_respond_error(c, 503, "unavailable", "coordinator unavailable");
}
