/* SPDX-License-Identifier: MIT */
/*
 * sandbox-exec.c — the sandbox API's execs (docs/SANDBOX-API.md "Exec" and
 * "Processes"): SBX_EXEC, SBX_EXEC_INPUT, SBX_EXEC_KILL, SBX_EXEC_LIST from
 * routerd, and the shim's EXEC_OUTPUT/EXEC_EXIT of these execs relayed to the
 * routerd connection that started them as SBX_EXEC_OUTPUT/SBX_EXEC_EXIT.
 *
 * These execs are not runs: nothing goes to the run log, the /chat hydrate
 * or the runs' output budgets, and nothing here logs an exec's env. The
 * sandbox is the thread's (SANDBOX_ENSURE keyed by the thread id, as a run of
 * that thread ensures it), so a run and an exec share /workspace.
 *
 * Limits: max_execs_per_sandbox execs not ended per thread (429
 * too_many_execs), tenant_max_execs per tenant in all its sandboxes (429
 * tenant_execs_quota), exec_stdin_max stdin bytes (413 stdin_too_large), a
 * timeout of at most exec_timeout_max_ms. Output is not buffered here: each
 * EXEC_OUTPUT goes out to routerd as it comes; the shim's backpressure on its
 * own connection bounds what is in flight, and routerd bounds what waits for
 * a slow HTTP reader (it ends that exec, routes-exec.c).
 *
 * An exec lives in the list from SBX_EXEC until its EXEC_EXIT; a background
 * one stays listed ended (SBX_EXEC_MAX_ENDED per thread, oldest dropped).
 * routerd's connection lost: its foreground execs are killed (SIGKILL, the
 * exec cgroup), background ones run on. The shim lost: every exec here ends
 * "lost" (the shim is not asked to re-attach them). coordinatord restarted:
 * nothing here survives. Either way, once the shim (again) said HELLO, every
 * exec it lists as ours (run_id "sbx:…") that is not running here is killed:
 * nothing a lost stream started runs on.
 *
 * Layer: the driver's (driver-int.h); coordinator.c calls the handlers,
 * driver-output.c hands over the shim's pushes of execs that are no run's,
 * driver-link.c tells the shim's loss.
 */
#include "config.h"

#include "driver.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "driver-int.h"
#include "sandbox-exec-int.h"
#include "json-util.h"
#include "log.h"
#include "macro.h"
#include "strcache.h"
#include "strv.h"
#include "time-util.h"

static int
reply_empty_map(Peer *p, uint64_t req_id)
{
	MpWriter w;
	int k;

	mp_writer_init(&w);
	mp_w_map(&w, 0);
	k = peer_reply(p, req_id, &w);
	mp_writer_done(&w);
	return k < 0 ? k : 0;
}

static int
strv_copy(char *const *v, char ***ret)
{
	char **out = NULL;

	for (size_t i = 0; v[i]; i++)
		if (strv_push(&out, v[i]) < 0) {
			strv_free(out);
			return -ENOMEM;
		}
	*ret = out;
	return 0;
}

static SbxExec *
sbx_free(SbxExec *x)
{
	if (!x)
		return NULL;
	sbx_relay_release(x);
	free(x->next_id);
	free(x->bg[0]);
	free(x->bg[1]);
	peer_deferred_free(x->start);
	free(x->sandbox_id);
	strv_free(x->argv);
	strv_free(x->env);
	free(x->cwd);
	free(x->stdin_data);
	free(x);
	return NULL;
}

static void
sbx_unlink(SbxExec *x)
{
	for (SbxExec **pp = &x->c->sbx_execs; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			return;
		}
}

void
sbx_drop(SbxExec *x)
{
	if (x->ensure_pending && x->c->shim)
		peer_cancel_calls(x->c->shim, x); /* the ENSURE behind an early EXEC_START */
	sbx_unlink(x);
	sbx_free(x);
}

static SbxExec *
sbx_find_exec(Coordinator *c, uint64_t exec_id)
{
	for (SbxExec *x = c->sbx_execs; x; x = x->next)
		if (x->exec_id == exec_id && x->state == SBX_RUNNING)
			return x;
	return NULL;
}

static size_t
sbx_count(Coordinator *c, const char *thread_id, bool ended)
{
	size_t n = 0;
	for (SbxExec *x = c->sbx_execs; x; x = x->next)
		if ((x->state == SBX_ENDED) == ended && streq(x->thread_id, thread_id))
			n++;
	return n;
}

/* Execs of tenant not ended yet, in every sandbox. */
static size_t
sbx_count_tenant(Coordinator *c, const char *tenant)
{
	size_t n = 0;
	for (SbxExec *x = c->sbx_execs; x; x = x->next)
		if (x->state != SBX_ENDED && streq(x->tenant, tenant))
			n++;
	return n;
}

/* Drop the oldest ended execs of thread_id (all threads: NULL) past max. */
void
sbx_trim(Coordinator *c, const char *thread_id, size_t max)
{
	size_t n = 0;
	SbxExec *oldest = NULL;

	for (SbxExec *y = c->sbx_execs; y; y = y->next)
		if (y->state == SBX_ENDED && !y->relay_ended &&
		    (!thread_id || streq(y->thread_id, thread_id))) {
			n++;
			oldest = y; /* new ones are at the head: the last is the oldest */
		}
	if (n > max)
		sbx_drop(oldest); /* one end adds one: one goes */
}

/* The end of x told to its starter (when it still listens), then x kept
 * (background, for the list) or freed. */
static void
sbx_end(SbxExec *x, int64_t code, int64_t sig, const char *reason)
{
	Coordinator *c = x->c;

	x->exit_code = code;
	x->signal = sig;
	snprintf(x->reason, sizeof(x->reason), "%s", reason);
	if (x->start)
		(void)peer_deferred_error(TAKE_PTR(x->start), -EIO, REASON_SANDBOX_ERROR,
					  "the exec could not be started");
	else if (x->relayed && x->client) {
		/* kept until the asking node's poll has taken the end */
		x->state = SBX_ENDED;
		x->relay_ended = true;
		strv_free(TAKE_PTR(x->env));
		sbx_relay_answer(x);
		return;
	} else if (x->client)
		(void)msg_push_SBX_EXEC_EXIT(x->client->peer,
					     &(Msg_SBX_EXEC_EXIT){.stream_id = x->stream_id,
								  .exit_code = code,
								  .signal = sig,
								  .has_signal = sig > 0,
								  .reason = x->reason});
	if (!x->background) {
		sbx_drop(x);
		return;
	}
	x->state = SBX_ENDED;
	x->client = NULL;
	strv_free(TAKE_PTR(x->env));
	/* the oldest ended ones of the thread go first, then the oldest of all */
	sbx_trim(c, x->thread_id, SBX_EXEC_MAX_ENDED);
	sbx_trim(c, NULL, SBX_EXEC_MAX_ENDED_ALL);
}

static void
sbx_fail(SbxExec *x, int err, const char *reason, const char *msg)
{
	if (x->start)
		(void)peer_deferred_error(TAKE_PTR(x->start), err, reason, msg);
	sbx_drop(x);
}

static void
sbx_killed(Peer *p, int err, const msgpack_object *body, void *ud)
{
	/* -ENOENT: it ended meanwhile; its EXEC_EXIT says how */
}

int
sbx_kill_exec(Coordinator *c, uint64_t exec_id, int sig)
{
	if (!peer_is_ready(c->shim))
		return -ECONNRESET;
	return msg_call_EXEC_KILL(c->shim, &(Msg_EXEC_KILL){.exec_id = exec_id, .signal = sig},
				  SHIM_CALL_TIMEOUT, sbx_killed, NULL);
}

static bool sbx_early_refused(SbxExec *x);

static void
sbx_started(Peer *p, int err, const msgpack_object *body, void *ud)
{
	SbxExec *x = ud;
	Reply_EXEC_START rep = {};
	int k = err < 0 ? err : reply_decode_EXEC_START(body, &rep);
	char msg[400];
	const char *m = NULL;
	MpReader r;

	reply_done_EXEC_START(&rep);
	if (k < 0 && x->early && (k == -ENOENT || k == -EAGAIN || k == -EBUSY) &&
	    sbx_early_refused(x))
		return;
	if (k < 0) {
		mp_reader_init(&r, body);
		mp_read_str_opt(&r, "message", &m, NULL);
		snprintf(msg, sizeof(msg), "sandbox: could not start the command: %s",
			 m ? m : strerror(-k));
		mp_reader_done(&r);
		/* the shim's -EINVAL/-E2BIG: argv or cwd it refuses (never echoed) */
		sbx_fail(x, k,
			 k == -ECONNRESET	       ? REASON_SHIM_UNAVAILABLE
			 : k == -EINVAL || k == -E2BIG ? REASON_BAD_REQUEST
						       : REASON_SANDBOX_ERROR,
			 msg);
		return;
	}
	x->exec_id = rep.exec_id;
	x->state = SBX_RUNNING;
	free(TAKE_PTR(x->stdin_data));
	strv_free(TAKE_PTR(x->env)); /* the values are in the shim now, nowhere here */
	if (x->start)
		(void)reply_deferred_SBX_EXEC(TAKE_PTR(x->start),
					      &(Reply_SBX_EXEC){.pid = x->exec_id});
	/* a background exec without stdin_open (POST …/exec: 202) has no stream:
	 * its output goes nowhere, its end to the list */
	if (x->background && !x->stdin_open)
		x->client = NULL;
	if (x->kill_signal > 0)
		(void)sbx_kill_exec(x->c, x->exec_id, x->kill_signal);
	else if (!x->client && !x->background)
		(void)sbx_kill_exec(x->c, x->exec_id, SIGKILL); /* its requester left */
}

static void sbx_egress_step(Peer *p, int err, const msgpack_object *body, void *ud);
static void sbx_start(SbxExec *x);
static void sbx_after_ensure(SbxExec *x, bool created);

/* The thread's sandbox id as its last ENSURE gave it (this shim connection). */
#define SBX_IDS_MAX 4096

static void
sbx_ids_put(Coordinator *c, const char *thread_id, const char *sandbox_id)
{
	if (!c->sbx_ids)
		c->sbx_ids = strcache_new(SBX_IDS_MAX);
	if (c->sbx_ids)
		(void)strcache_put(c->sbx_ids, thread_id, sandbox_id);
}

/* The early EXEC_START was refused (the sandbox was not ready): true when
 * that is handled here — after the ENSURE's answer, or now with its
 * sandbox. false: the refusal is the exec's (the ENSURE said this sandbox). */
static bool
sbx_early_refused(SbxExec *x)
{
	if (x->c->sbx_ids)
		(void)strcache_drop(x->c->sbx_ids, x->thread_id);
	if (x->ensure_pending) {
		x->early_refused = true;
		x->state = SBX_ENSURING;
		return true;
	}
	if (!x->early_stale)
		return false;
	x->early = false;
	if (!x->next_id) {
		sbx_fail(x, x->ensure_err ? x->ensure_err : -EIO, "sandbox_error",
			 "sandbox: it could not be ensured");
		return true;
	}
	free(x->sandbox_id);
	x->sandbox_id = TAKE_PTR(x->next_id);
	x->state = SBX_ENSURING;
	sbx_after_ensure(x, x->next_created);
	return true;
}

/* The ENSURE's answer for an exec whose EXEC_START went out early. */
static void
sbx_ensured_early(SbxExec *x, int err, const char *sandbox_id, bool created)
{
	if (x->early_refused) { /* the sandbox was not ready: now it is */
		x->early = false;
		if (err < 0)
			return; /* answered by the caller's failure path */
		free(x->sandbox_id);
		x->sandbox_id = strdup(sandbox_id);
		if (!x->sandbox_id) {
			sbx_fail(x, -ENOMEM, "sandbox_error", "out of memory");
			return;
		}
		sbx_after_ensure(x, created);
		return;
	}
	if (err < 0 || created || !streq(sandbox_id, x->sandbox_id)) {
		/* the EXEC_START out on the old id will be refused: then this */
		x->early_stale = true;
		x->ensure_err = err;
		x->next_created = created;
		free(x->next_id);
		x->next_id = err < 0 ? NULL : strdup(sandbox_id);
	}
}

static void
sbx_ensured(Peer *p, int err, const msgpack_object *body, void *ud)
{
	SbxExec *x = ud;
	Coordinator *c = x->c;
	Reply_SANDBOX_ENSURE rep = {};
	char msg[400];
	const char *m = NULL;
	MpReader r;

	x->ensure_pending = false;
	if (x->early && !x->early_refused) {
		/* the EXEC_START is out (or done): it decides, this only corrects */
		if (err < 0) {
			if (x->state != SBX_RUNNING)
				sbx_ensured_early(x, err, NULL, false);
			return;
		}
		if (reply_decode_SANDBOX_ENSURE(body, &rep) >= 0) {
			sbx_ids_put(c, x->thread_id, rep.sandbox_id);
			if (x->state != SBX_RUNNING)
				sbx_ensured_early(x, 0, rep.sandbox_id, rep.created);
		}
		reply_done_SANDBOX_ENSURE(&rep);
		return;
	}
	if (err < 0) {
		mp_reader_init(&r, body);
		mp_read_str_opt(&r, "message", &m, NULL);
		snprintf(msg, sizeof(msg), "sandbox: %s", m ? m : strerror(-err));
		mp_reader_done(&r);
		/* -ETIMEDOUT: it waited in the shim's queue past queue_timeout_ms */
		sbx_fail(x, err,
			 err == -ECONNRESET  ? REASON_SHIM_UNAVAILABLE
			 : err == -ETIMEDOUT ? REASON_OVERLOADED
					     : REASON_SANDBOX_ERROR,
			 msg);
		return;
	}
	if (reply_decode_SANDBOX_ENSURE(body, &rep) < 0) {
		reply_done_SANDBOX_ENSURE(&rep);
		sbx_fail(x, -EIO, REASON_SANDBOX_ERROR, "sandbox: malformed SANDBOX_ENSURE reply");
		return;
	}
	sbx_ids_put(c, x->thread_id, rep.sandbox_id);
	if (x->early_refused) {
		sbx_ensured_early(x, 0, rep.sandbox_id, rep.created);
		reply_done_SANDBOX_ENSURE(&rep);
		return;
	}
	free(x->sandbox_id);
	x->sandbox_id = strdup(rep.sandbox_id);
	bool created = rep.created;
	reply_done_SANDBOX_ENSURE(&rep);
	if (!x->sandbox_id) {
		sbx_fail(x, -ENOMEM, "sandbox_error", "out of memory");
		return;
	}
	sbx_after_ensure(x, created);
}

/* The sandbox is there (x->sandbox_id): its egress proxy, then EXEC_START. */
static void
sbx_after_ensure(SbxExec *x, bool created)
{
	Coordinator *c = x->c;
	int k;

	/* its egress proxy (PUT …/egress) back first when the sandbox is new or
	 * the shim or coordinatord restarted (egress.c) */
	if (c->egress_ops && c->egress_ops->stale(c, x->thread_id, x->sandbox_id, created)) {
		x->egress_step = 0;
		k = c->egress_ops->reopen(c, x->thread_id, x->sandbox_id, 0, NULL, sbx_egress_step,
					  x);
		if (k == 0)
			return;
	}
	sbx_start(x);
}

/* The egress proxy's reopening, a step a reply; then the exec starts
 * whatever came of it (a failure is logged: HTTPS_PROXY then leads nowhere). */
static void
sbx_egress_step(Peer *p, int err, const msgpack_object *body, void *ud)
{
	SbxExec *x = ud;
	int k = err < 0 ? err
			: x->c->egress_ops->reopen(x->c, x->thread_id, x->sandbox_id,
						   ++x->egress_step, body, sbx_egress_step, x);

	if (k == 0)
		return;
	if (k < 0)
		log_ctx_errno(LOG_WARNING, k, &(LogCtx){.thread_id = x->thread_id},
			      "Could not open the sandbox's egress proxy again: %m");
	sbx_start(x);
}

/* The sandbox is there: EXEC_START. */
static void
sbx_start(SbxExec *x)
{
	Coordinator *c = x->c;
	int k;

	if ((x->kill_signal > 0 || !x->client) && !x->background) {
		sbx_fail(x, -ECANCELED, NULL, "killed before it started");
		return;
	}
	char rid[sizeof(SBX_RUN_PREFIX) + THREAD_ID_MAX];
	snprintf(rid, sizeof(rid), SBX_RUN_PREFIX "%s", x->thread_id);
	Msg_EXEC_START m2 = {
	    .sandbox_id = x->sandbox_id,
	    .run_id = rid,
	    .argv = x->argv,
	    .env = x->env,
	    .cwd = x->cwd,
	    .stdin = x->stdin_data,
	    .stdin_len = x->stdin_len,
	    .has_stdin = x->stdin_len > 0,
	    .stdin_open = true,
	    .has_stdin_open = x->stdin_open,
	    .timeout_ms = x->timeout_ms,
	    .has_timeout_ms = true,
	    .kill_leftovers = true,
	    .has_kill_leftovers = true,
	};
	k = msg_call_EXEC_START(c->shim, &m2, SHIM_CALL_TIMEOUT, sbx_started, x);
	if (k < 0) {
		sbx_fail(x, -ECONNRESET, REASON_SHIM_UNAVAILABLE, "containerd-shim unavailable");
		return;
	}
	x->state = SBX_STARTING;
}

/* The sandbox's base environment (with its egress proxy's variables), then
 * the request's (K=V each, checked by the decoder: no NUL), a request's key
 * replacing a base one. */
static int
sbx_env(Coordinator *c, const char *thread_id, char *const *req, char ***ret)
{
	static const char *const base[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace",
					   "LANG=C.UTF-8", "TERM=dumb"};
	char **env = NULL, **proxy = NULL;
	size_t nb = ELEMENTSOF(base), np = 0;

	/* the sandbox's egress proxy (PUT …/egress): HTTPS_PROXY, https_proxy */
	if (c->egress_ops && c->egress_ops->env(c, thread_id, &proxy) < 0)
		goto oom;
	while (proxy && proxy[np])
		np++;
	for (size_t i = 0; i < nb + np; i++) {
		const char *b = i < nb ? base[i] : proxy[i - nb];
		size_t kl = strcspn(b, "=") + 1;
		bool overridden = false;
		for (size_t j = 0; req && req[j]; j++)
			if (strncmp(req[j], b, kl) == 0)
				overridden = true;
		if (!overridden && strv_push(&env, b) < 0)
			goto oom;
	}
	strv_free(TAKE_PTR(proxy));
	for (size_t j = 0; req && req[j]; j++) {
		const char *eq = strchr(req[j], '=');
		if (!eq || eq == req[j]) {
			strv_free(env);
			return -EINVAL;
		}
		if (strv_push(&env, req[j]) < 0)
			goto oom;
	}
	*ret = env;
	return 0;
oom:
	strv_free(env);
	strv_free(proxy);
	return -ENOMEM;
}

/* cwd of the request: absolute, or relative to /workspace; none: /workspace.
 * ".." is the shim's to confine (the init chdirs inside the sandbox). */
static char *
sbx_cwd(const char *cwd)
{
	char *s = NULL;

	if (!cwd || !*cwd)
		return strdup("/workspace");
	if (cwd[0] == '/')
		return strdup(cwd);
	return asprintf(&s, "/workspace/%s", cwd) < 0 ? NULL : s;
}

/* An SBX_EXEC's checks; a reason and message for the refusal, or NULL. */
static const char *
sbx_exec_problem(Coordinator *c, const Msg_SBX_EXEC *m, const char **ret_reason)
{
	*ret_reason = REASON_BAD_REQUEST;
	if (!thread_id_valid(m->thread_id))
		return "threadId must be a non-empty printable string of at most 256 bytes";
	if ((m->argv && m->command) || (!m->argv && !m->command))
		return "give argv or command, not both";
	if (m->argv && (!m->argv[0] || !m->argv[0][0]))
		return "argv must be a non-empty array whose first item is not empty";
	if (m->has_timeout_ms &&
	    (m->timeout_ms <= 0 || m->timeout_ms > c->conf.exec_timeout_max_ms))
		return "timeoutMs must be > 0 and at most coordinatord.exec_timeout_max_ms";
	*ret_reason = REASON_REUSE_NONE;
	if (c->conf.reuse == REUSE_NONE)
		return "with reuse = none each run has its own sandbox and a thread has none";
	*ret_reason = REASON_STDIN_TOO_LARGE;
	if (m->has_stdin && (int64_t)m->stdin_len > c->conf.exec_stdin_max)
		return "stdin is over coordinatord.exec_stdin_max";
	*ret_reason = REASON_TOO_MANY_EXECS;
	if (sbx_count(c, m->thread_id, false) >= (size_t)c->conf.max_execs_per_sandbox)
		return "this sandbox runs coordinatord.max_execs_per_sandbox execs already";
	*ret_reason = REASON_TENANT_EXECS_QUOTA;
	if (c->conf.tenant_max_execs > 0 &&
	    sbx_count_tenant(c, m->tenant ? m->tenant : TENANT_DEFAULT) >=
		(size_t)c->conf.tenant_max_execs)
		return "this tenant runs coordinatord.tenant_max_execs execs already";
	return NULL;
}

int
handle_sbx_exec(Peer *p, const Frame *f, const Msg_SBX_EXEC *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	const char *reason, *why = sbx_exec_problem(c, m, &reason);
	SbxExec *x;
	int k;

	if (why) {
		peer_reply_error_reason(p, f->req_id,
					streq(reason, REASON_TOO_MANY_EXECS) ||
						streq(reason, REASON_TENANT_EXECS_QUOTA)
					    ? -EAGAIN
					: streq(reason, REASON_STDIN_TOO_LARGE) ? -E2BIG
										: -EINVAL,
					reason, why);
		return 0;
	}
	if (!peer_is_ready(c->shim)) {
		peer_reply_error_reason(p, f->req_id, -ECONNRESET, REASON_SHIM_UNAVAILABLE,
					"containerd-shim unavailable");
		return 0;
	}
	x = calloc(1, sizeof(*x));
	if (!x)
		return -ENOMEM;
	x->c = c;
	x->client = cl;
	x->relayed = cl->forwarded && !(m->background && !m->stdin_open);
	x->stream_id = m->stream_id;
	x->background = m->background;
	x->stdin_open = m->stdin_open;
	x->timeout_ms = m->has_timeout_ms ? m->timeout_ms : c->conf.exec_timeout_max_ms;
	snprintf(x->thread_id, sizeof(x->thread_id), "%s", m->thread_id);
	snprintf(x->tenant, sizeof(x->tenant), "%s", m->tenant ? m->tenant : TENANT_DEFAULT);
	if (m->argv)
		k = strv_copy(m->argv, &x->argv);
	else
		k = strv_push(&x->argv, c->conf.sandbox_shell) < 0 ||
			    strv_push(&x->argv, "-c") < 0 || strv_push(&x->argv, m->command) < 0
			? -ENOMEM
			: 0;
	if (k >= 0)
		k = sbx_env(c, x->thread_id, m->env, &x->env);
	if (k >= 0 && !(x->cwd = sbx_cwd(m->cwd)))
		k = -ENOMEM;
	if (k >= 0 && m->has_stdin && m->stdin_len > 0) {
		x->stdin_data = malloc(m->stdin_len);
		if (!x->stdin_data)
			k = -ENOMEM;
		else
			memcpy(x->stdin_data, m->stdin, m->stdin_len);
		x->stdin_len = m->stdin_len;
	}
	if (k >= 0 && !(x->start = peer_defer(p, f)))
		k = -ENOMEM;
	if (k < 0) {
		if (k == -EINVAL)
			peer_reply_error_reason(p, f->req_id, k, REASON_BAD_REQUEST,
						"env names must be non-empty and without '='");
		sbx_free(x);
		return k == -EINVAL ? 0 : k;
	}
	/* tenant: the tenant's share of the slots (coordinator.c checked it) */
	Msg_SANDBOX_ENSURE en = {
	    .key = x->thread_id, .thread_id = x->thread_id, .tenant = m->tenant};
	/* no deadline: it may wait in the shim's queue (queue_timeout_ms ends it) */
	k = msg_call_SANDBOX_ENSURE(c->shim, &en, 0, sbx_ensured, x);
	if (k < 0) {
		sbx_fail(x, -ECONNRESET, REASON_SHIM_UNAVAILABLE, "containerd-shim unavailable");
		return 0;
	}
	x->state = SBX_ENSURING;
	x->ensure_pending = true;
	x->next = c->sbx_execs;
	c->sbx_execs = x;
	/* The sandbox the thread had (this shim connection): EXEC_START goes out
	 * right behind the ENSURE, which the shim answers first when that sandbox
	 * is live — one round trip to the shim instead of two. Not ready, or
	 * another: refused, and started again after the ENSURE's answer. Not with
	 * an egress list (its proxy may have to be opened again first). */
	const char *known = c->sbx_ids ? strcache_get(c->sbx_ids, x->thread_id) : NULL;
	if (known && !(c->egress_ops && c->egress_ops->listed(c, x->thread_id)) &&
	    (x->sandbox_id = strdup(known))) {
		x->early = true;
		sbx_start(x); /* may drop x */
	}
	return 0;
}

/* The exec of thread_id named by pid, or by the stream of the asking client. */
SbxExec *
sbx_lookup(Coordinator *c, Client *cl, const char *thread_id, uint64_t pid, bool has_pid,
	   uint64_t stream_id, bool has_stream)
{
	for (SbxExec *x = c->sbx_execs; x; x = x->next) {
		if (!streq(x->thread_id, thread_id))
			continue;
		if (has_pid && x->exec_id == pid && x->exec_id != 0)
			return x;
		if (!has_pid && has_stream && x->client == cl && x->stream_id == stream_id)
			return x;
	}
	return NULL;
}

int
handle_sbx_exec_kill(Peer *p, const Frame *f, const Msg_SBX_EXEC_KILL *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	SbxExec *x;

	if (m->signal <= 0 || m->signal >= NSIG) {
		peer_reply_error_reason(p, f->req_id, -EINVAL, REASON_BAD_REQUEST,
					"unknown signal");
		return 0;
	}
	x = sbx_lookup(c, cl, m->thread_id, m->pid, m->has_pid, m->stream_id, m->has_stream_id);
	if (!x || x->state == SBX_ENDED) {
		peer_reply_error_reason(p, f->req_id, -ENOENT, REASON_PROCESS_NOT_FOUND,
					x ? "the process has ended" : "no such process");
		return 0;
	}
	if (x->state != SBX_RUNNING)
		x->kill_signal = (int)m->signal; /* sent once it started */
	else if (sbx_kill_exec(c, x->exec_id, (int)m->signal) < 0) {
		peer_reply_error_reason(p, f->req_id, -ECONNRESET, REASON_SHIM_UNAVAILABLE,
					"containerd-shim unavailable");
		return 0;
	}
	return reply_empty_map(p, f->req_id);
}

static void
sbx_input_sent(Peer *p, int err, const msgpack_object *body, void *ud)
{
	/* refused (stdin closed, the exec gone): the exec's own end tells the client */
}

int
handle_sbx_exec_input(Peer *p, const Frame *f, const Msg_SBX_EXEC_INPUT *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	SbxExec *x = sbx_lookup(c, cl, m->thread_id, 0, false, m->stream_id, true);
	int k;

	if (!x || x->state != SBX_RUNNING || !x->stdin_open) {
		peer_reply_error_reason(p, f->req_id, -ENOENT, REASON_PROCESS_NOT_FOUND,
					"no running exec with open stdin on this stream");
		return 0;
	}
	if (m->has_data && (int64_t)(x->stdin_sent + m->data_len) > c->conf.exec_stdin_max) {
		peer_reply_error_reason(p, f->req_id, -E2BIG, REASON_STDIN_TOO_LARGE,
					"stdin is over coordinatord.exec_stdin_max");
		return 0;
	}
	x->stdin_sent += m->has_data ? m->data_len : 0;
	k = msg_call_EXEC_STDIN(c->shim,
				&(Msg_EXEC_STDIN){.exec_id = x->exec_id,
						  .data = m->data,
						  .data_len = m->data_len,
						  .has_data = m->has_data,
						  .eof = m->eof,
						  .has_eof = m->has_eof},
				SHIM_CALL_TIMEOUT, sbx_input_sent, NULL);
	if (k < 0) {
		peer_reply_error_reason(p, f->req_id, -ECONNRESET, REASON_SHIM_UNAVAILABLE,
					"containerd-shim unavailable");
		return 0;
	}
	if (m->eof)
		x->stdin_open = false;
	return reply_empty_map(p, f->req_id);
}

int
handle_sbx_exec_list(Peer *p, const Frame *f, const Msg_SBX_EXEC_LIST *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	json_auto_t *list = json_array();
	_cleanup_free_ char *text = NULL;

	if (!list)
		return -ENOMEM;
	for (SbxExec *x = c->sbx_execs; x; x = x->next) {
		if (!streq(x->thread_id, m->thread_id) || x->exec_id == 0)
			continue;
		json_t *argv = json_array(), *o;
		for (size_t i = 0; argv && x->argv && x->argv[i]; i++)
			json_array_append_new(argv, json_string(x->argv[i]));
		o = json_pack("{s:I, s:o, s:b, s:b}", "pid", (json_int_t)x->exec_id, "argv",
			      argv ? argv : json_array(), "running", x->state != SBX_ENDED,
			      "background", x->background);
		if (o && x->state == SBX_ENDED) {
			json_object_set_new(o, "exitCode", json_integer(x->exit_code));
			json_object_set_new(o, "reason", json_string(x->reason));
		}
		if (!o || json_array_append_new(list, o) < 0)
			return -ENOMEM;
	}
	text = json_dumps(list, JSON_COMPACT);
	if (!text)
		return -ENOMEM;
	return reply_send_SBX_EXEC_LIST(p, f->req_id, &(Reply_SBX_EXEC_LIST){.processes = text});
}

bool
sbx_exec_output(Coordinator *c, const Msg_EXEC_OUTPUT *m)
{
	SbxExec *x = sbx_find_exec(c, m->exec_id);

	if (!x)
		return false;
	if (x->background && m->data_len > 0)
		sbx_bg_keep(x, (int)m->stream, m->data, m->data_len);
	if (x->relayed && x->client && m->data_len > 0) {
		sbx_relay_buffer(x, (int)m->stream, m->data, m->data_len);
		return true;
	}
	if (x->client && m->data_len > 0)
		(void)msg_push_SBX_EXEC_OUTPUT(x->client->peer,
					       &(Msg_SBX_EXEC_OUTPUT){.stream_id = x->stream_id,
								      .stream = m->stream,
								      .data = m->data,
								      .data_len = m->data_len});
	return true;
}

bool
sbx_exec_exit(Coordinator *c, const Msg_EXEC_EXIT *m)
{
	SbxExec *x = sbx_find_exec(c, m->exec_id);
	const char *reason = m->reason ? m->reason : "exit";

	if (!x)
		return false;
	/* a binary that is not there: 127, as a shell says it, not a failure */
	if (streq(reason, "failed") && m->exit_code == 127)
		reason = "exit";
	sbx_end(x, m->exit_code, m->has_signal ? m->signal : 0, reason);
	return true;
}

void
sbx_exec_client_gone(Coordinator *c, Client *cl)
{
	for (SbxExec *x = c->sbx_execs; x; x = x->next) {
		if (x->client != cl)
			continue;
		x->client = NULL;
		if (!x->background && x->state == SBX_RUNNING)
			(void)sbx_kill_exec(c, x->exec_id, SIGKILL);
		/* ENSURING/STARTING: killed once started (sbx_ensured, sbx_started) */
	}
}

void
sbx_exec_shim_lost(Coordinator *c)
{
	strcache_free(TAKE_PTR(c->sbx_ids)); /* its sandboxes' ids with it */
	/* from the head each time: an end may drop other (ended) entries */
	for (;;) {
		SbxExec *x = c->sbx_execs;
		while (x && x->state != SBX_RUNNING)
			x = x->next;
		if (!x)
			break;
		sbx_end(x, -1, 0, "lost"); /* no longer RUNNING, or gone */
	}
	/* ENSURING/STARTING: their calls fail with -ECONNRESET */
}

static void
sbx_listed(Peer *p, int err, const msgpack_object *body, void *ud)
{
	Coordinator *c = ud;
	const msgpack_object *execs = body ? mp_map_get(body, "execs") : NULL;
	size_t killed = 0;

	if (err < 0 || !execs || execs->type != MSGPACK_OBJECT_ARRAY)
		return;
	for (uint32_t i = 0; i < execs->via.array.size; i++) {
		const msgpack_object *e = &execs->via.array.ptr[i];
		const msgpack_object *id = mp_map_get(e, "exec_id"), *rid = mp_map_get(e, "run_id");
		const msgpack_object *running = mp_map_get(e, "running");
		if (!id || id->type != MSGPACK_OBJECT_POSITIVE_INTEGER || !rid ||
		    rid->type != MSGPACK_OBJECT_STR || rid->via.str.size < STRLEN(SBX_RUN_PREFIX) ||
		    memcmp(rid->via.str.ptr, SBX_RUN_PREFIX, STRLEN(SBX_RUN_PREFIX)) != 0 ||
		    (running && running->type == MSGPACK_OBJECT_BOOLEAN && !running->via.boolean) ||
		    sbx_find_exec(c, id->via.u64))
			continue;
		if (sbx_kill_exec(c, id->via.u64, SIGKILL) >= 0)
			killed++;
	}
	if (killed > 0)
		log_notice("Killed %zu sandbox exec(s) nobody here knows (left by an earlier "
			   "coordinatord or connection)",
			   killed);
}

void
sbx_exec_shim_ready(Coordinator *c)
{
	if (c->egress_ops)
		c->egress_ops->shim_ready(c);
	/* Sent before any EXEC_START of this connection: the list holds only
	 * execs started before, none of which is ours any more. */
	(void)msg_call_EXEC_LIST(c->shim, &(Msg_EXEC_LIST){}, SHIM_CALL_TIMEOUT, sbx_listed, c);
}

void
sbx_exec_free_all(Coordinator *c)
{
	strcache_free(TAKE_PTR(c->sbx_ids));
	while (c->sbx_execs) {
		SbxExec *x = c->sbx_execs;
		c->sbx_execs = x->next;
		if (c->shim)
			peer_cancel_calls(c->shim, x);
		sbx_free(x);
	}
}
