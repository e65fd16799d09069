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
 * Nothing here touches the run log. A coordinatord restart forgets the
 * lists (the proxies the shim holds stay until their sandbox stops).
 */
#include "config.h"

#include "coordinatord.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
	uint64_t port; /* the proxy's port inside the sandbox */
};

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

void
sandbox_egress_forget(Coordinator *c, const char *thread_id)
{
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
		memcpy(e->sandbox_id, q->sandbox_id, sizeof(e->sandbox_id));
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
