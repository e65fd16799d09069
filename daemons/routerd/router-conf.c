/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "router-conf.h"

#include <errno.h>
#include <event2/util.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "id-util.h"
#include "log.h"
#include "macro.h"
#include "strv.h"

#define KIB 1024LL
#define MIB (1024LL * 1024)
#define GIB (1024LL * 1024 * 1024)

/* preview_domain: DNS labels of letters, digits and '-', joined by dots. */
static bool
preview_domain_valid(const char *s)
{
	size_t label = 0, n = strlen(s);

	if (n > 200)
		return false;
	for (const char *p = s; *p; p++) {
		if (*p == '.') {
			if (label == 0 || p[-1] == '-')
				return false;
			label = 0;
		} else if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			   (*p >= '0' && *p <= '9') || (*p == '-' && label > 0)) {
			if (++label > 63)
				return false;
		} else
			return false;
	}
	return label > 0 && s[n - 1] != '-';
}

/* The rows below are also what conf/runwarden.conf documents. */
const ConfItem router_conf_items[] = {
    CONF_SHARED_ITEMS(RouterConf, shared),
    {"routerd", "listen", CONF_STR, offsetof(RouterConf, listen), "127.0.0.1:8787", 0, 0,
     "TCP address of the HTTP/WebSocket front: IPv4:port or [IPv6]:port (numeric)"},
    {"routerd", "max_body", CONF_SIZE, offsetof(RouterConf, max_body), "1M", 1 * KIB, 1 * GIB,
     "largest request body accepted; larger ones get 413 and the connection is closed"},
    {"routerd", "max_file_body", CONF_SIZE, offsetof(RouterConf, max_file_body), "8M", 1 * KIB,
     1 * GIB,
     "largest body of a PUT /threads/{id}/files/... (a file written through the file API), "
     "instead of max_body; the shim's file_api_max_bytes caps the file too"},
    {"routerd", "max_header_bytes", CONF_SIZE, offsetof(RouterConf, max_header_bytes), "16K",
     1 * KIB, 64 * KIB, "largest request line plus headers; larger ones get 431"},
    {"routerd", "max_connections", CONF_INT, offsetof(RouterConf, max_connections), "10000", 1,
     1000000,
     "client connections (HTTP and WebSocket) served at once; accepting pauses "
     "beyond"},
    {"routerd", "max_unserved_per_address", CONF_INT,
     offsetof(RouterConf, max_unserved_per_address), "64", 0, 1000000,
     "once half of max_connections is in use: connections one client address (an IPv6 /64) "
     "may hold open before their first request head is complete; a further one is closed at "
     "once, so a flood of half-open connections cannot fill max_connections for everyone "
     "(tails and keep-alive connections do not count); 0 = no limit"},
    {"routerd", "first_request_timeout_ms", CONF_INT,
     offsetof(RouterConf, first_request_timeout_ms), "10000", 100, 3600000,
     "a new connection whose first request head is not complete this long after it was "
     "accepted gets 408 and is closed (later requests on it have header_timeout_ms)"},
    {"routerd", "idle_timeout_ms", CONF_INT, offsetof(RouterConf, idle_timeout_ms), "60000", 100,
     3600000,
     "an idle keep-alive connection, a stalled request or a client not reading is closed "
     "after this"},
    {"routerd", "coord_timeout_ms", CONF_INT, offsetof(RouterConf, coord_timeout_ms), "10000", 100,
     600000, "deadline of each request to coordinatord (then 503)"},
    {"routerd", "ws_max_queue", CONF_SIZE, offsetof(RouterConf, ws_max_queue), "1M", 64 * KIB,
     256 * MIB,
     "unsent output per tail (WebSocket or SSE): delivery pauses at half of it and resumes "
     "at a quarter"},
    {"routerd", "ws_stall_timeout_ms", CONF_INT, offsetof(RouterConf, ws_stall_timeout_ms), "10000",
     100, 3600000,
     "a tail whose client leaves its output paused this long is closed (WebSocket 1008)"},
    {"routerd", "tails_max_queued_bytes", CONF_SIZE, offsetof(RouterConf, tails_max_queued_bytes),
     "64M", 1 * MIB, 64 * GIB,
     "unsent output of all tails, Durable Streams SSE reads and sandbox exec streams "
     "together (each holds at most about ws_max_queue): past it the one whose client stopped "
     "reading longest ago is closed (WebSocket 1013, SSE and NDJSON end) and its memory freed "
     "at once; the client resumes with lastSeq (a dropped exec stream kills its exec)"},
    {"routerd", "ws_ping_interval_ms", CONF_INT, offsetof(RouterConf, ws_ping_interval_ms), "30000",
     0, 3600000, "ping interval on WebSocket tails; 0 disables server pings"},
    {"routerd", "tail_read_batch", CONF_INT, offsetof(RouterConf, tail_read_batch), "256", 1, 4096,
     "most events a tail asks coordinatord for in one RUN_READ"},
    {"routerd", "header_timeout_ms", CONF_INT, offsetof(RouterConf, header_timeout_ms), "20000",
     100, 3600000,
     "a request line and headers not complete this long after their first byte get 408 and "
     "the connection is closed (slowloris)"},
    {"routerd", "tokens_file", CONF_STR, offsetof(RouterConf, tokens_file), "", 0, 0,
     "file of bearer tokens, one a line ('#' comments), each optionally followed by "
     "threads=ID,PREFIX*,... (the threads it may touch), harnesses=NAME,... (the "
     "harnesses its runs may use) and tenant=NAME (whose quotas it uses; a line without "
     "one is a tenant of its own, t- and 12 hex digits of the token's SHA-256); when set "
     "every route but /healthz needs 'Authorization: Bearer <token>'; empty = no auth, "
     "which only a loopback listen address allows (one tenant, 'default')"},
    {"routerd", "tenant_rate_per_second", CONF_INT, offsetof(RouterConf, tenant_rate_per_second),
     "20", 0, 1000000,
     "expensive requests (POST /runs, /chat, snapshots, restores, file changes, GET "
     "/threads, the /chat hydrate, and the sandbox API's execs, watches and PUT "
     "/sandboxes/{id}) one tenant may make per second, on average, when "
     "tokens_file names two tenants or more; past it 429 tenant_rate_limited with "
     "Retry-After; 0 = no limit"},
    {"routerd", "tenant_rate_burst", CONF_INT, offsetof(RouterConf, tenant_rate_burst), "40", 1,
     1000000,
     "expensive requests one tenant may make at once before tenant_rate_per_second "
     "applies"},
    {"routerd", "cors_origins", CONF_STR, offsetof(RouterConf, cors_origins), "", 0, 0,
     "origins (scheme://host:port, space-separated, or *) whose browser pages may call the "
     "API cross-origin; a request with any other Origin (but routerd's own) gets 403 "
     "origin_forbidden; empty = none"},
    {"routerd", "server_names", CONF_STR, offsetof(RouterConf, server_names), "", 0, 0,
     "Host header values accepted besides the listen address (and localhost:PORT on "
     "loopback): names or name:port, space-separated (a bare name also matches name:PORT "
     "of the listen port); * = any Host (gives up the DNS-rebinding check); others get "
     "421"},
    {"routerd", "preview_listen", CONF_STR, offsetof(RouterConf, preview_listen), "", 0, 0,
     "TCP address (IPv4:port or [IPv6]:port, numeric) of the live-preview listener: "
     "POST /sandboxes/{id}/ports/{port} answers http://<token>.<preview_domain>:<its "
     "port>/, through which a browser reaches that port inside the sandbox (a listener "
     "of its own, never the API's origin); empty = no previews (the ports capability "
     "is false)"},
    {"routerd", "preview_domain", CONF_STR, offsetof(RouterConf, preview_domain),
     "preview.localhost", 0, 0,
     "the host name suffix of previews: each is <token>.<preview_domain>; the default "
     "needs no DNS (browsers resolve *.localhost to loopback); a real domain needs a "
     "wildcard record pointing at preview_listen",
     .valid = preview_domain_valid, .expected = "a DNS name (letters, digits, '-', '.')"},
    {"routerd", "preview_ttl_ms", CONF_INT, offsetof(RouterConf, preview_ttl_ms), "86400000", 1000,
     30LL * 86400000,
     "a preview's URL works this long after the POST that made (or renewed) it, then "
     "answers 410 preview_expired"},
    {"routerd", "ui_dir", CONF_STR, offsetof(RouterConf, ui_dir), "", 0, 0,
     "directory of the web UI's files served under /ui/ (index.html, app.js, ...); empty = "
     "the installed ones ($(datadir)/runwarden/ui)"},
};
const size_t router_conf_n_items = ELEMENTSOF(router_conf_items);

bool
router_conf_listen_is_loopback(const RouterConf *c)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);

	if (!c->listen || evutil_parse_sockaddr_port(c->listen, (struct sockaddr *)&ss, &len) < 0)
		return false;
	if (ss.ss_family == AF_INET)
		return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
	if (ss.ss_family == AF_INET6) {
		const struct in6_addr *a6 = &((struct sockaddr_in6 *)&ss)->sin6_addr;
		if (IN6_IS_ADDR_LOOPBACK(a6))
			return true;
		return IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127;
	}
	return false;
}

static void
fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

static bool
startswith(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static bool
scope_char_ok(char ch)
{
	return (unsigned char)ch > 0x20 && ch != 0x7f && ch != ',';
}

/* Split v (a comma-separated list) into a NULL-terminated array. Every item
 * non-empty; a '*' only as the last byte of a thread pattern; harness names
 * of [A-Za-z0-9_.-]. -EINVAL with *why set. */
static int
scope_list(const char *v, bool threads, char ***ret, const char **why)
{
	char **out = NULL;
	size_t n = 0;

	for (const char *s = v;;) {
		size_t l = strcspn(s, ",");
		if (l == 0 || (threads && l > 256)) {
			*why = "an empty or overlong item";
			goto fail;
		}
		for (size_t i = 0; i < l; i++) {
			char ch = s[i];
			bool ok = threads ? scope_char_ok(ch) && (ch != '*' || i == l - 1)
					  : (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
						(ch >= '0' && ch <= '9') || strchr("_.-", ch);
			if (!ok) {
				*why = threads ? "a thread pattern may hold '*' only at its end"
					       : "a harness name is letters, digits, '_', '.', '-'";
				goto fail;
			}
		}
		char **p = reallocarray(out, n + 2, sizeof(*out));
		if (!p)
			goto oom;
		out = p;
		out[n] = strndup(s, l);
		if (!out[n])
			goto oom;
		out[++n] = NULL;
		s += l;
		if (!*s)
			break;
		s++;
		if (!*s) {
			*why = "an empty item";
			goto fail;
		}
	}
	*ret = out;
	return 0;
oom:
	*why = "out of memory";
fail:
	strv_free(out);
	return -EINVAL;
}

/* The words after the token: threads=… and harnesses=…, each at most once. */
static int
token_scope(RouterConf *c, RouterToken *t, char *words, size_t lineno)
{
	for (char *w = words; *w;) {
		size_t l = strcspn(w, " \t");
		char save = w[l];
		const char *why = NULL;
		w[l] = '\0';
		if (startswith(w, "threads=") && !t->threads) {
			if (scope_list(w + 8, true, &t->threads, &why) < 0)
				return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
						       "%s:%zu: threads=: %s", c->tokens_file,
						       lineno, why);
		} else if (startswith(w, "tenant=") && !t->tenant[0]) {
			if (!tenant_name_valid(w + 7))
				return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
						       "%s:%zu: tenant=: expected 1..%d of "
						       "[A-Za-z0-9_.-]",
						       c->tokens_file, lineno, TENANT_NAME_MAX);
			strcpy(t->tenant, w + 7);
		} else if (startswith(w, "harnesses=") && !t->harnesses) {
			char **names = NULL;
			if (scope_list(w + 10, false, &names, &why) < 0)
				return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
						       "%s:%zu: harnesses=: %s", c->tokens_file,
						       lineno, why);
			t->harnesses = names;
		} else
			return log_error_errno(
			    SYNTHETIC_ERRNO(EINVAL),
			    "%s:%zu: after the token only threads=LIST, "
			    "harnesses=LIST and tenant=NAME may follow, each once",
			    c->tokens_file, lineno);
		w[l] = save;
		w += l;
		w += strspn(w, " \t");
	}
	return 0;
}

/* Read the tokens file: one token a line, blank lines and '#' comments
 * skipped, surrounding whitespace trimmed; after the token, optionally
 * `threads=P,P…`, `harnesses=H,H…` and `tenant=NAME` (RouterToken). Only SHA-256 digests
 * are kept, so the comparison works on equal-length values and no token stays
 * in memory. Never logs a token. */
static int
tokens_load(RouterConf *c)
{
	_cleanup_(fclosep) FILE *f = NULL;
	_cleanup_free_ char *line = NULL;
	size_t cap = 0, lineno = 0;
	ssize_t n;
	int r;

	f = fopen(c->tokens_file, "re");
	if (!f)
		return log_error_errno(errno, "routerd.tokens_file: cannot read '%s': %m",
				       c->tokens_file);
	while ((n = getline(&line, &cap, f)) >= 0) {
		char *t = line, *e = line + n;
		lineno++;
		while (t < e && strchr(" \t\r\n", *t))
			t++;
		while (e > t && strchr(" \t\r\n", e[-1]))
			e--;
		if (t == e || *t == '#')
			continue;
		*e = '\0';
		for (char *p = t; p < e; p++)
			if (((unsigned char)*p < 0x20 && *p != '\t') || *p == 0x7f) {
				OPENSSL_cleanse(line, (size_t)n);
				return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
						       "%s:%zu: a token line must be printable "
						       "characters",
						       c->tokens_file, lineno);
			}
		size_t tl = strcspn(t, " \t");
		void *p = reallocarray(c->tokens, c->n_tokens + 1, sizeof(RouterToken));
		if (!p)
			return log_error_errno(SYNTHETIC_ERRNO(ENOMEM), "Out of memory");
		c->tokens = p;
		RouterToken *tok = &c->tokens[c->n_tokens++];
		*tok = (RouterToken){0};
		if (EVP_Digest(t, tl, tok->digest, NULL, EVP_sha256(), NULL) != 1)
			return log_error_errno(SYNTHETIC_ERRNO(EIO), "SHA-256 failed");
		OPENSSL_cleanse(t, tl);
		r = token_scope(c, tok, t + tl + strspn(t + tl, " \t"), lineno);
		if (r < 0)
			return r;
		if (!tok->tenant[0]) { /* its own tenant, named after its digest */
			char hex[2 * 6 + 1];
			hex_encode(tok->digest, 6, hex);
			snprintf(tok->tenant, sizeof(tok->tenant), "t-%s", hex);
		}
	}
	if (c->n_tokens == 0)
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "routerd.tokens_file: '%s' holds no token", c->tokens_file);
	for (size_t i = 0; i < c->n_tokens; i++) {
		size_t j = 0;
		while (j < i && !streq(c->tokens[j].tenant, c->tokens[i].tenant))
			j++;
		c->n_tenants += j == i;
	}
	return 0;
}

const char *
router_token_tenant(const RouterToken *t)
{
	return t ? t->tenant : TENANT_DEFAULT;
}

bool
router_token_allows_thread(const RouterToken *t, const char *thread_id)
{
	if (!t || !t->threads)
		return true;
	if (!thread_id)
		return false;
	for (char **p = t->threads; *p; p++) {
		size_t l = strlen(*p);
		if (l > 0 && (*p)[l - 1] == '*') {
			if (strncmp(thread_id, *p, l - 1) == 0)
				return true;
		} else if (streq(thread_id, *p))
			return true;
	}
	return false;
}

/* server_names: space- or comma-separated host names (or host:port), or "*". */
static int
server_names_check(const RouterConf *c)
{
	const char *s = c->server_names;

	for (s = s ? s : ""; *s;) {
		s += strspn(s, " ,");
		size_t n = strcspn(s, " ,");
		for (size_t i = 0; i < n; i++) {
			char ch = s[i];
			if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
			      (ch >= '0' && ch <= '9') || strchr("-.:[]_", ch) ||
			      (ch == '*' && n == 1)))
				return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
						       "routerd.server_names: '%.*s' is not a host "
						       "name, host:port or *",
						       (int)n, s);
		}
		s += n;
	}
	return 0;
}

int
router_conf_load(const DaemonArgs *a, RouterConf *c)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	int r;

	r = daemon_load_config(a, router_conf_items, router_conf_n_items, c, &c->shared);
	if (r < 0)
		return r;
	/* Snapshot/restore replies come when the shim's job ends (at most its
	 * snapshot_timeout_ms): wait that long, past coordinatord's own margin. */
	r = daemon_snapshot_wait_ms(a, ROUTER_SNAPSHOT_MARGIN_MS, &c->snapshot_wait_ms);
	if (r < 0)
		return r;
	if (!c->listen || evutil_parse_sockaddr_port(c->listen, (struct sockaddr *)&ss, &len) < 0)
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "routerd.listen: '%s' is not a numeric host:port or "
				       "[IPv6]:port address",
				       c->listen ? c->listen : "");
	if (c->shared.runtime_dir == NULL || c->shared.runtime_dir[0] != '/')
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "runwarden.runtime_dir must be an absolute path");
	if (c->preview_listen[0] != '\0' &&
	    evutil_parse_sockaddr_port(c->preview_listen, (struct sockaddr *)&ss, &len) < 0)
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "routerd.preview_listen: '%s' is not a numeric host:port or "
				       "[IPv6]:port address",
				       c->preview_listen);
	if (c->preview_listen[0] != '\0' && c->preview_domain[0] == '\0')
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "routerd.preview_domain: empty while preview_listen is set");
	if (c->preview_listen[0] != '\0' && streq(c->preview_listen, c->listen))
		return log_error_errno(SYNTHETIC_ERRNO(EINVAL),
				       "routerd.preview_listen: '%s' is the API's listen address: "
				       "previews need a listener (an origin) of their own",
				       c->preview_listen);
	r = server_names_check(c);
	if (r < 0)
		return r;
	if (c->tokens_file && *c->tokens_file) {
		r = tokens_load(c);
		if (r < 0)
			return r;
	} else if (!router_conf_listen_is_loopback(c))
		return log_error_errno(
		    SYNTHETIC_ERRNO(EPERM),
		    "routerd.listen: refusing to serve %s without authentication: "
		    "set routerd.tokens_file, or listen on a loopback address",
		    c->listen);
	return 0;
}

void
router_conf_done(RouterConf *c)
{
	conf_free_strings(router_conf_items, router_conf_n_items, c);
	for (size_t i = 0; i < c->n_tokens; i++) {
		strv_free(c->tokens[i].threads);
		strv_free(c->tokens[i].harnesses);
	}
	if (c->tokens)
		OPENSSL_cleanse(c->tokens, c->n_tokens * sizeof(RouterToken));
	free(c->tokens);
	c->tokens = NULL;
	c->n_tokens = 0;
}
