/* SPDX-License-Identifier: MIT */
/*
 * egress.c — a sandbox's own egress allowlist (docs/SANDBOX-API.md
 * "Egress"): SANDBOX_EGRESS from routerd's PUT /sandboxes/{id}/egress.
 *
 * The names asked for must each be in the operator's
 * [coordinatord] sandbox_egress_allow (host[:port], port 443 by default,
 * names compared case-insensitively); the first one that is not is refused
 * (-EPERM, reason egress_forbidden) and nothing changes. Then the thread's
 * sandbox is ensured (SANDBOX_ENSURE, key = thread id) and its egress proxy
 * is (re)opened as the harness's is — SANDBOX_PROXY under the pseudo run id
 * SANDBOX_EGRESS_RUN, with sandbox_egress_allow_private — on the port it
 * had, so that processes started earlier keep their HTTPS_PROXY. An empty
 * list closes it. The thread's list and port are kept in memory
 * (Coordinator.egress) for the sandbox API's execs: sandbox_egress_env().
 *
 * Nothing here touches the run log. Each thread's list and port are kept in
 * <state_dir>/egress/<sha256(thread)[0..32]> (its thread id, its port, the
 * names; written to a temporary file, fsync'd, renamed), loaded at start, so
 * that the proxy comes back: before an exec of the sandbox API
 * (sandbox_egress_reapply) whose ENSURE made the sandbox anew (an idle stop,
 * a destroy), or the first after the shim (re)connected or coordinatord
 * started, the proxy is opened again on its port (UNLISTEN, PROXY).
 */
#include "config.h"

#include "coordinator.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "macro.h"
#include "mp-cursor.h"
#include "strv.h"

#define EGRESS_CALL_TIMEOUT (60 * USEC_PER_SEC)
#define EGRESS_MAX_NAMES 64

struct SandboxEgress {
	SandboxEgress *next;
	char *thread_id;
	char **allow; /* as asked; NULL-terminated, never empty */
	char sandbox_id[17];
	uint64_t port;	   /* the proxy's port inside the sandbox */
	uint64_t shim_gen; /* the shim connection it was opened on (0: not since start) */
};

/* Bumped each time the shim's connection is ready (sandbox_egress_shim_ready):
 * a proxy opened on an earlier one may be gone with that shim. */
static uint64_t shim_gen = 1;

/* A SANDBOX_EGRESS on its way: ENSURE, UNLISTEN, PROXY, answer. */
typedef struct EgressReq {
	Coordinator *c;
	PeerDeferred *d;
	char *thread_id;
	char **allow;
	char sandbox_id[17];
	int step;
} EgressReq;

static size_t
vec_len(char *const *v)
{
	size_t n = 0;

	while (v && v[n])
		n++;
	return n;
}

/* A copy of v (an empty vector for NULL), or NULL when out of memory. */
static char **
vec_copy(char *const *v)
{
	char **r = calloc(vec_len(v) + 1, sizeof(char *));

	for (size_t i = 0; r && v && v[i]; i++)
		if (!(r[i] = strdup(v[i]))) {
			strv_free(r);
			return NULL;
		}
	return r;
}

static SandboxEgress *
egress_find(Coordinator *c, const char *thread_id)
{
	for (SandboxEgress *e = c->egress; e; e = e->next)
		if (streq(e->thread_id, thread_id))
			return e;
	return NULL;
}

static void
egress_free(SandboxEgress *e)
{
	free(e->thread_id);
	strv_free(e->allow);
	free(e);
}

static bool egress_permitted(char *const *operator_list, const char *name);

/* ---------- the lists on disk ---------- */

static int
egress_path(Coordinator *c, const char *thread_id, char *buf, size_t len)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen = 0;
	char hex[33];

	if (!EVP_Digest(thread_id, strlen(thread_id), md, &mdlen, EVP_sha256(), NULL) || mdlen < 16)
		return -EIO;
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", md[i]);
	if (snprintf(buf, len, "%s/egress/%s", c->conf.shared.state_dir, hex) >= (int)len)
		return -ENAMETOOLONG;
	return 0;
}

/* Write (or with port 0 remove) thread_id's file; a failure is logged: the
 * list then lives until the next restart only. */
static void
egress_store(Coordinator *c, const char *thread_id, char *const *allow, uint64_t port)
{
	char path[4096], tmp[4120], dir[4096];
	FILE *f;
	int r = egress_path(c, thread_id, path, sizeof(path));

	if (r < 0)
		goto fail;
	if (port == 0) {
		if (unlink(path) < 0 && errno != ENOENT)
			r = -errno;
		goto done;
	}
	snprintf(dir, sizeof(dir), "%s/egress", c->conf.shared.state_dir);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		r = -errno;
		goto fail;
	}
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	f = fopen(tmp, "we");
	if (!f) {
		r = -errno;
		goto fail;
	}
	fprintf(f, "%s\n%" PRIu64 "\n", thread_id, port);
	for (size_t i = 0; allow && allow[i]; i++)
		fprintf(f, "%s\n", allow[i]);
	r = fflush(f) == 0 && fsync(fileno(f)) == 0 ? 0 : -errno;
	if (fclose(f) != 0 && r == 0)
		r = -errno;
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		(void)unlink(tmp);
done:
	if (r >= 0)
		return;
fail:
	log_ctx_errno(LOG_WARNING, r, &(LogCtx){.thread_id = thread_id},
		      "Failed to keep the sandbox's egress list on disk: %m");
}

/* One file: "thread\nport\nname\n…"; names the operator no longer
 * permits are dropped (never wider than the configuration). */
static void
egress_load_one(Coordinator *c, int dfd, const char *name)
{
	char line[512], *thread = NULL, **allow = NULL;
	uint64_t port = 0;
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	FILE *f = fd >= 0 ? fdopen(fd, "re") : NULL;
	int n = 0;

	if (!f) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (n == 0)
			thread = strdup(line);
		else if (n == 1)
			port = strtoull(line, NULL, 10);
		else if (egress_permitted(c->conf.sandbox_egress_allow, line) &&
			 vec_len(allow) < EGRESS_MAX_NAMES)
			(void)strv_push(&allow, line);
		n++;
	}
	fclose(f);
	if (thread && thread_id_valid(thread) && allow && port > 0 && port < 65536 &&
	    !egress_find(c, thread)) {
		SandboxEgress *e = calloc(1, sizeof(*e));
		if (e) {
			e->thread_id = TAKE_PTR(thread);
			e->allow = TAKE_PTR(allow);
			e->port = port;
			e->next = c->egress;
			c->egress = e;
		}
	}
	free(thread);
	strv_free(allow);
}

void
sandbox_egress_load(Coordinator *c)
{
	char dir[4096];
	DIR *d;
	struct dirent *de;
	size_t n = 0;

	snprintf(dir, sizeof(dir), "%s/egress", c->conf.shared.state_dir);
	d = opendir(dir);
	if (!d)
		return;
	while ((de = readdir(d)))
		if (strlen(de->d_name) == 32 && strspn(de->d_name, "0123456789abcdef") == 32) {
			egress_load_one(c, dirfd(d), de->d_name);
			n++;
		}
	closedir(d);
	if (n > 0)
		log_info("Loaded the egress lists of %zu sandbox(es)", n);
}

void
sandbox_egress_shim_ready(Coordinator *c)
{
	shim_gen++;
}

void
sandbox_egress_forget(Coordinator *c, const char *thread_id)
{
	egress_store(c, thread_id, NULL, 0);
	for (SandboxEgress **pp = &c->egress; *pp; pp = &(*pp)->next)
		if (streq((*pp)->thread_id, thread_id)) {
			SandboxEgress *e = *pp;
			*pp = e->next;
			egress_free(e);
			return;
		}
}

void
sandbox_egress_free_all(Coordinator *c)
{
	while (c->egress) {
		SandboxEgress *e = c->egress;
		c->egress = e->next;
		egress_free(e);
	}
}

int
sandbox_egress_env(Coordinator *c, const char *thread_id, char ***env)
{
	SandboxEgress *e = egress_find(c, thread_id);

	if (!e || e->port == 0)
		return 0;
	if (strv_pushf(env, "HTTPS_PROXY=http://127.0.0.1:%" PRIu64, e->port) < 0 ||
	    strv_pushf(env, "https_proxy=http://127.0.0.1:%" PRIu64, e->port) < 0)
		return -ENOMEM;
	return 2;
}

/* "host[:port]" → its host and port (443 when none); false when malformed. */
static bool
name_split(const char *s, size_t *ret_host_len, unsigned *ret_port)
{
	size_t n = strcspn(s, ":");
	unsigned long port = 443;

	if (n == 0 || n > 253)
		return false;
	if (s[n] == ':') {
		char *end = NULL;
		if (s[n + 1] < '1' || s[n + 1] > '9')
			return false;
		port = strtoul(s + n + 1, &end, 10);
		if (*end || port > 65535)
			return false;
	}
	*ret_host_len = n;
	*ret_port = (unsigned)port;
	return true;
}

/* Whether the operator's list holds name (same host, case folded, and
 * port). */
static bool
egress_permitted(char *const *operator_list, const char *name)
{
	size_t hl, ol;
	unsigned port, oport;

	if (!name_split(name, &hl, &port) || !conf_valid_egress_host(name))
		return false;
	for (size_t i = 0; operator_list && operator_list[i]; i++)
		if (name_split(operator_list[i], &ol, &oport) && ol == hl && oport == port &&
		    strncasecmp(operator_list[i], name, hl) == 0)
			return true;
	return false;
}

static void
req_free(EgressReq *q)
{
	if (q->d)
		peer_deferred_free(q->d);
	free(q->thread_id);
	strv_free(q->allow);
	free(q);
}

static void egress_step(Peer *p, int err, const msgpack_object *body, void *ud);

/* The proxy is open (port) or closed (0): keep the list, answer. */
static void
egress_done(EgressReq *q, uint64_t port)
{
	Coordinator *c = q->c;
	SandboxEgress *e = egress_find(c, q->thread_id);
	char *empty[] = {NULL};

	if (port == 0 && e)
		sandbox_egress_forget(c, q->thread_id);
	else if (port > 0) {
		if (!e) {
			e = calloc(1, sizeof(*e));
			if (!e || !(e->thread_id = strdup(q->thread_id))) {
				free(e);
				peer_deferred_error(TAKE_PTR(q->d), -ENOMEM, REASON_INTERNAL,
						    "out of memory");
				req_free(q);
				return;
			}
			e->next = c->egress;
			c->egress = e;
		}
		strv_free(e->allow);
		e->allow = TAKE_PTR(q->allow);
		e->port = port;
		e->shim_gen = shim_gen;
		memcpy(e->sandbox_id, q->sandbox_id, sizeof(e->sandbox_id));
		egress_store(c, e->thread_id, e->allow, e->port);
	}
	(void)reply_deferred_SANDBOX_EGRESS(TAKE_PTR(q->d),
					    &(Reply_SANDBOX_EGRESS){
						.allow = e && port > 0 ? e->allow : empty,
						.port = port,
						.has_port = port > 0,
					    });
	req_free(q);
}

static int
egress_call_proxy(EgressReq *q, uint64_t port)
{
	char **priv = q->c->conf.sandbox_egress_allow_private;

	return msg_call_SANDBOX_PROXY(q->c->shim,
				      &(Msg_SANDBOX_PROXY){
					  .sandbox_id = q->sandbox_id,
					  .run_id = SANDBOX_EGRESS_RUN,
					  .allow = q->allow,
					  .allow_private = priv && priv[0] ? priv : NULL,
					  .port = (int64_t)port,
					  .has_port = port > 0,
				      },
				      EGRESS_CALL_TIMEOUT, egress_step, q);
}

/* ENSURE's reply (step 0), UNLISTEN's (1), PROXY's (2). */
static void
egress_step(Peer *p, int err, const msgpack_object *body, void *ud)
{
	EgressReq *q = ud;
	SandboxEgress *e = egress_find(q->c, q->thread_id);
	uint64_t old = e && streq(e->sandbox_id, q->sandbox_id) ? e->port : 0;
	int r = err;

	if (err < 0) {
		peer_deferred_relay_error(TAKE_PTR(q->d), err, body, "sandbox egress failed");
		req_free(q);
		return;
	}
	switch (q->step++) {
	case 0: {
		Reply_SANDBOX_ENSURE rep = {};
		r = reply_decode_SANDBOX_ENSURE(body, &rep);
		if (r >= 0 && strlen(rep.sandbox_id) == 16)
			memcpy(q->sandbox_id, rep.sandbox_id, 17);
		else
			r = -EBADMSG;
		reply_done_SANDBOX_ENSURE(&rep);
		if (r >= 0)
			r = msg_call_SANDBOX_UNLISTEN(
			    q->c->shim,
			    &(Msg_SANDBOX_UNLISTEN){.sandbox_id = q->sandbox_id,
						    .run_id = SANDBOX_EGRESS_RUN},
			    EGRESS_CALL_TIMEOUT, egress_step, q);
		break;
	}
	case 1:
		if (!q->allow[0]) {
			egress_done(q, 0);
			return;
		}
		/* the port it had in this sandbox: HTTPS_PROXY of processes
		 * started before stays true */
		r = egress_call_proxy(q, old);
		break;
	default: {
		Reply_SANDBOX_PROXY rep = {};
		r = reply_decode_SANDBOX_PROXY(body, &rep);
		uint64_t port = rep.port;
		reply_done_SANDBOX_PROXY(&rep);
		if (r >= 0 && port > 0 && port < 65536) {
			egress_done(q, port);
			return;
		}
		r = -EBADMSG;
	}
	}
	if (r < 0) {
		peer_deferred_error(TAKE_PTR(q->d), r, NULL, "sandbox egress failed");
		req_free(q);
	}
}

/* ---------- the proxy opened again (sandbox-exec.c, before an exec) ---------- */

bool
sandbox_egress_listed(Coordinator *c, const char *thread_id)
{
	return egress_find(c, thread_id) != NULL;
}

bool
sandbox_egress_stale(Coordinator *c, const char *thread_id, const char *sandbox_id, bool created)
{
	SandboxEgress *e = egress_find(c, thread_id);

	return e && e->port > 0 &&
	       (created || e->shim_gen != shim_gen || !streq(e->sandbox_id, sandbox_id));
}

int
sandbox_egress_reopen(Coordinator *c, const char *thread_id, const char *sandbox_id, int step,
		      const msgpack_object *body, PeerReplyFn cb, void *ud)
{
	SandboxEgress *e = egress_find(c, thread_id);
	char **priv = c->conf.sandbox_egress_allow_private;
	Reply_SANDBOX_PROXY rep = {};
	uint64_t port;
	int r;

	if (!e || e->port == 0)
		return 1; /* closed meanwhile: nothing to open */
	switch (step) {
	case 0:
		return msg_call_SANDBOX_UNLISTEN(
		    c->shim,
		    &(Msg_SANDBOX_UNLISTEN){.sandbox_id = sandbox_id, .run_id = SANDBOX_EGRESS_RUN},
		    EGRESS_CALL_TIMEOUT, cb, ud);
	case 1:
		return msg_call_SANDBOX_PROXY(c->shim,
					      &(Msg_SANDBOX_PROXY){
						  .sandbox_id = sandbox_id,
						  .run_id = SANDBOX_EGRESS_RUN,
						  .allow = e->allow,
						  .allow_private = priv && priv[0] ? priv : NULL,
						  .port = (int64_t)e->port,
						  .has_port = true,
					      },
					      EGRESS_CALL_TIMEOUT, cb, ud);
	default:
		r = reply_decode_SANDBOX_PROXY(body, &rep);
		port = rep.port;
		reply_done_SANDBOX_PROXY(&rep);
		if (r < 0 || port == 0 || port > 65535)
			return r < 0 ? r : -EBADMSG;
		snprintf(e->sandbox_id, sizeof(e->sandbox_id), "%s", sandbox_id);
		e->shim_gen = shim_gen;
		if (port != e->port) {
			e->port = port;
			egress_store(c, e->thread_id, e->allow, e->port);
		}
		log_ctx(LOG_INFO, &(LogCtx){.thread_id = thread_id},
			"The sandbox's egress proxy is open again on port %" PRIu64, port);
		return 1;
	}
}

static int dispatch_again(Peer *p, const Frame *f, void *userdata);

int
handle_sandbox_egress(Peer *p, const Frame *f, const Msg_SANDBOX_EGRESS *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	size_t n = vec_len(m->allow);
	EgressReq *q;
	int r;

	if (!request_thread_id_ok(p, f, m->thread_id, REASON_BAD_REQUEST))
		return 0;
	/* cluster mode: the thread's sandbox is on its owner (a claim, as a
	 * first run makes) */
	if (placement_run_start(c, p, f, m->thread_id, dispatch_again, ud))
		return 0;
	if (!request_reuse_ok(p, f, c, "with reuse = none a thread has no sandbox of its own"))
		return 0;
	if (n > EGRESS_MAX_NAMES) {
		peer_reply_error_reason(p, f->req_id, -EINVAL, REASON_BAD_REQUEST,
					"allow: more than 64 names");
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		if (!egress_permitted(c->conf.sandbox_egress_allow, m->allow[i])) {
			char msg[400];
			snprintf(msg, sizeof(msg),
				 "egress_forbidden: '%.256s' is not in the operator's "
				 "[coordinatord] sandbox_egress_allow",
				 m->allow[i]);
			peer_reply_error_reason(p, f->req_id, -EPERM, REASON_EGRESS_FORBIDDEN, msg);
			return 0;
		}
	if (!request_shim_ready(p, f, c, REASON_SHIM_UNAVAILABLE))
		return 0;
	q = calloc(1, sizeof(*q));
	if (!q)
		return -ENOMEM;
	q->c = c;
	q->thread_id = strdup(m->thread_id);
	q->allow = vec_copy(m->allow);
	q->d = peer_defer(p, f);
	if (!q->thread_id || !q->allow || !q->d) {
		req_free(q);
		return -ENOMEM;
	}
	r = msg_call_SANDBOX_ENSURE(
	    c->shim, &(Msg_SANDBOX_ENSURE){.key = q->thread_id, .thread_id = q->thread_id},
	    EGRESS_CALL_TIMEOUT, egress_step, q);
	if (r < 0) {
		peer_deferred_error(TAKE_PTR(q->d), r, REASON_SHIM_UNAVAILABLE,
				    "containerd-shim unavailable");
		req_free(q);
	}
	return 0;
}

MSG_HANDLER(dispatch_again, SANDBOX_EGRESS, handle_sandbox_egress)

const SandboxEgressOps sandbox_egress_ops = {
    .stale = sandbox_egress_stale,
    .reopen = sandbox_egress_reopen,
    .env = sandbox_egress_env,
    .listed = sandbox_egress_listed,
    .shim_ready = sandbox_egress_shim_ready,
};
