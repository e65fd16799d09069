/* SPDX-License-Identifier: MIT */
/*
 * bridge.c — host tools for harnesses: the MCP bridge (`/_bridge/{runId}`,
 * stateless JSON-RPC: initialize, notifications/initialized, tools/list,
 * tools/call) and `/tool-exec/{runId}` (tanstack-protocol.md §1.4, §1.5),
 * both reached through routerd as BRIDGE_CALL.
 *
 * A run whose harness lists tools gets a bridge when it starts: a bearer
 * token of 68 characters (two random UUIDs, the second without dashes) that
 * lives in memory only and is compared in constant time. Every authenticated
 * call touches the run on arrival (a call whose touch fails is not executed)
 * and on completion, and a call in flight protects the run from the stall
 * watchdog. A tool is its [tool.NAME] command, run on the host with the call's
 * JSON arguments on stdin and a minimal environment; its stdout, as JSON when
 * it parses and as text otherwise, is the result. When the run ends its bridge
 * goes (later calls 404) and tools still running are killed.
 *
 * The tools' cgroup (tool_cgroup): every call runs in a leaf e<seq> of one
 * group, <parent>/runwarden-tools.<instance>/tools, which carries the limits
 * of all host tools together (tool_memory_max, tool_pids_max, tool_cpu_max).
 * The child joins it before execve (the v1 groups of a hybrid host, then the
 * cgroup2 leaf), so nothing the tool starts is ever outside it. When the tool
 * exits, times out or its run ends, the leaf is killed: a process it left in
 * the background (`cmd &`, nohup, setsid) dies with the call instead of
 * holding its stdout open or outliving the run. A coordinatord that starts
 * kills what a previous one left in the group.
 */
#include "config.h"

#include "driver.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/crypto.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fd-util.h"
#include "id-util.h"
#include "json-util.h"
#include "macro.h"
#include "mp-cursor.h"

#define TOOL_OUTPUT_MAX (1 << 20)

typedef struct ToolCall {
	struct ToolCall *next;
	Run *run;
	PeerDeferred *reply; /* the BRIDGE_CALL, answered when the tool ended */
	bool mcp;	     /* JSON-RPC (else /tool-exec) */
	json_t *rpc_id;
	const Tool *tool;
	pid_t pid;
	int pidfd;
	struct event *pid_ev, *timer;
	struct bufferevent *in, *out;
	OutBuf buf;
	bool exited, eof, too_big, timed_out;
	bool counted;	  /* in coordinator->tool_calls */
	uint64_t leaf_id; /* its leaf in the tools' cgroup, 0 = none */
	int status;
} ToolCall;

/* These answer d and release it (NULL-safe). */
static void
reply(PeerDeferred *d, int status, const char *ctype, const char *body, size_t len)
{
	if (!d)
		return;
	(void)reply_deferred_BRIDGE_CALL(d, &(Reply_BRIDGE_CALL){.status = (uint64_t)status,
								 .content_type = ctype,
								 .body = body,
								 .body_len = len});
}

static void
reply_json(PeerDeferred *d, int status, json_t *j)
{
	_cleanup_free_ char *s = json_dump_compact(j);
	json_decref(j);
	reply(d, status, "application/json; charset=utf-8", s ? s : "{}", s ? strlen(s) : 2);
}

static void
reply_error(PeerDeferred *d, int status, const char *code, const char *message)
{
	reply_json(d, status, json_pack("{s:s, s:s}", "error", message, "code", code));
}

static json_t *
rpc_result(json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id ? id : json_null(), "result",
			 result);
}

static json_t *
rpc_error(json_t *id, int code, const char *message)
{
	return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
			 "error", "code", code, "message", message);
}

void
bridge_open(Run *run)
{
	_Static_assert(sizeof(run->bridge_token) > RANDOM_TOKEN_LEN, "bridge_token too small");

	if (!run->harness || !run->harness->tools || !run->harness->tools[0])
		return;
	if (random_token(run->bridge_token) < 0)
		return; /* no bridge rather than a guessable token */
	run->bridge_live = true;
}

static void call_free(ToolCall *tc);

/* ---------- the tools' cgroup ---------- */

/* Make the tools' cgroup as cc says, after killing what a previous instance
 * left in it. 0, or a negative errno with *err saying why (nothing kept). */
static int
tools_cgroup_open(Coordinator *c, const CgroupConf *cc, Reason *err)
{
	Cgroup *old = NULL;
	uint64_t n = 0;
	int r;

	err->msg[0] = '\0';
	r = cgroup_host_new(cc, &c->tool_cgh, err, false);
	if (r < 0)
		return r;
	if (cgroup_open(c->tool_cgh, "", &old) >= 0 && cgroup_count_procs(old, &n) >= 0 && n > 0)
		log_notice("Killing %" PRIu64 " host tool processes a previous coordinatord left",
			   n);
	cgroup_free(old);
	/* killed; a group whose last members are still exiting is reused */
	(void)cgroup_host_reap_stale(c->tool_cgh, NULL, NULL);
	r = cgroup_create(c->tool_cgh, "", &c->tool_cg, err);
	if (r < 0)
		c->tool_cgh = cgroup_host_free(c->tool_cgh);
	return r;
}

int
bridge_setup(Coordinator *c)
{
	const CoordConf *k = &c->conf;
	CgroupConf cc = {
	    .who = "coordinatord",
	    .parent = k->tool_cgroup_parent,
	    .state_dir = k->shared.state_dir,
	    .base_name = "runwarden-tools",
	    .group_prefix = "tools",
	    .memory_max = k->tool_memory_max,
	    .memory_swap_max = 0,
	    .pids_max = k->tool_pids_max,
	    .cpu_quota_us = k->tool_cpu_quota_us,
	    .cpu_period_us = k->tool_cpu_period_us,
	    .job_cpu_quota_us = -1,
	    .job_cpu_period_us = 100000,
	    .leaf_uid = -1, /* the leaves are joined by our own children */
	};
	Reason err;
	char why[sizeof(err.msg)];
	int r;

	/* leaves are never named twice, not even across restarts */
	c->tool_call_seq = (uint64_t)now_epoch_ms();
	if (k->tool_cgroup == TOOL_CGROUP_OFF) {
		log_info("Host tool calls run without a cgroup (tool_cgroup = off)");
		return 0;
	}
	r = tools_cgroup_open(c, &cc, &err);
	if (r >= 0) {
		log_info("Host tool calls run in the cgroup 'tools' of %s: memory.max %" PRId64
			 ", pids.max %" PRId64 ", cpu.max %s",
			 cgroup_host_describe(c->tool_cgh), k->tool_memory_max, k->tool_pids_max,
			 k->tool_cpu_max);
		if (!cgroup_has_leaves(c->tool_cg))
			log_warning("No cgroup2 hierarchy: host tool calls share the limits of "
				    "the tools' cgroup, but a tool's background processes are not "
				    "killed when its call ends");
		return 0;
	}
	snprintf(why, sizeof(why), "%s", reason_text(&err, r));
	if (k->tool_cgroup == TOOL_CGROUP_REQUIRED)
		return log_error_errno(r,
				       "Cannot set up the host tools' cgroup "
				       "(coordinatord.tool_cgroup = required): %s",
				       why);
	/* a hybrid host's v1 controllers are never delegated to an unprivileged
	 * service: its unified hierarchy still gives each call a leaf that dies
	 * with the call */
	cc.unified_only = true;
	if (tools_cgroup_open(c, &cc, &err) >= 0) {
		log_warning("Host tool calls get no memory, pids or CPU limits: %s. Each call "
			    "still runs in a leaf of %s, killed with all it started when the "
			    "call ends",
			    why, cgroup_host_describe(c->tool_cgh));
		return 0;
	}
	log_warning("Host tool calls run without a cgroup: %s. A tool's background processes "
		    "can outlive its call and nothing limits their memory or processes (give "
		    "coordinatord a delegated cgroup: Delegate=yes; or set "
		    "coordinatord.tool_cgroup = off)",
		    why);
	return 0;
}

void
bridge_metrics(Coordinator *c, FILE *f)
{
	uint64_t oom = 0, pids = 0;

	fprintf(f,
		"# HELP runwarden_tool_calls_running Host tool calls running now.\n"
		"# TYPE runwarden_tool_calls_running gauge\n"
		"runwarden_tool_calls_running %d\n",
		c->tool_calls);
	if (!c->tool_cg || cgroup_counters(c->tool_cg, &oom, &pids) < 0)
		return; /* no limits, nothing to count */
	fprintf(f,
		"# HELP runwarden_tool_oom_kills_total Host tool processes killed by the OOM "
		"killer at tool_memory_max.\n"
		"# TYPE runwarden_tool_oom_kills_total counter\n"
		"runwarden_tool_oom_kills_total %" PRIu64 "\n"
		"# HELP runwarden_tool_pids_max_total Forks of host tools refused at "
		"tool_pids_max.\n"
		"# TYPE runwarden_tool_pids_max_total counter\n"
		"runwarden_tool_pids_max_total %" PRIu64 "\n",
		oom, pids);
}

/* cgroup_prune_leaves(): is leaf id a call still running? */
static bool
tool_leaf_busy(uint64_t id, void *ud)
{
	Coordinator *c = ud;

	for (Run *run = c->runs; run; run = run->next)
		for (ToolCall *tc = run->bridge_calls; tc; tc = tc->next)
			if (tc->leaf_id == id)
				return true;
	return false;
}

void
bridge_teardown(Coordinator *c)
{
	if (c->tool_cg) {
		(void)cgroup_kill(c->tool_cg);
		/* leaves first, then the group; still busy after a second: the
		 * next start reaps it */
		for (int i = 0; i < 200 && cgroup_remove(c->tool_cg) == -EBUSY; i++)
			(void)usleep(5000);
	}
	c->tool_cg = cgroup_free(c->tool_cg);
	c->tool_cgh = cgroup_host_free(c->tool_cgh);
}

/* The call is over: kill all its leaf holds and remove it; one whose members
 * are still exiting is removed by a later call's prune. */
static void
call_leaf_release(ToolCall *tc)
{
	Coordinator *c = tc->run->c;

	if (!tc->leaf_id)
		return;
	(void)cgroup_leaf_kill(c->tool_cg, tc->leaf_id);
	(void)cgroup_leaf_remove(c->tool_cg, tc->leaf_id);
	tc->leaf_id = 0;
}

static void
call_unlink(ToolCall *tc)
{
	for (ToolCall **pp = (ToolCall **)&tc->run->bridge_calls; *pp; pp = &(*pp)->next)
		if (*pp == tc) {
			*pp = tc->next;
			break;
		}
}

static void
call_free(ToolCall *tc)
{
	if (tc->pid > 0 && !tc->exited) {
		if (tc->pidfd >= 0)
			(void)syscall(SYS_pidfd_send_signal, tc->pidfd, SIGKILL, NULL, 0);
		(void)waitpid(tc->pid, NULL, 0);
	}
	call_leaf_release(tc);
	if (tc->pid_ev)
		event_free(tc->pid_ev);
	if (tc->timer)
		event_free(tc->timer);
	if (tc->in)
		bufferevent_free(tc->in);
	if (tc->out)
		bufferevent_free(tc->out);
	safe_close(tc->pidfd);
	peer_deferred_free(tc->reply);
	if (tc->counted)
		tc->run->c->tool_calls--;
	json_decref(tc->rpc_id);
	outbuf_done(&tc->buf);
	free(tc);
}

void
bridge_close(Run *run)
{
	run->bridge_live = false;
	while (run->bridge_calls) {
		ToolCall *tc = run->bridge_calls;
		run->bridge_calls = tc->next;
		/* the run settled: the tool is cancelled and its caller told */
		if (tc->mcp)
			reply_json(
			    TAKE_PTR(tc->reply), 200,
			    rpc_result(tc->rpc_id,
				       json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text",
						 "text", "Tool execution failed: run ended",
						 "isError", 1)));
		else
			reply_error(TAKE_PTR(tc->reply), 500, "internal", "run ended");
		call_free(tc);
	}
	run->bridge_inflight = 0;
}

/* The tool ended and its output is all in: answer, touch, release. */
static void
call_finish(ToolCall *tc)
{
	Run *run = tc->run;
	char msg[160];
	bool failed =
	    tc->timed_out || tc->too_big || !WIFEXITED(tc->status) || WEXITSTATUS(tc->status) != 0;
	json_t *result = NULL;

	if (tc->timed_out)
		snprintf(msg, sizeof(msg), "tool '%s' timed out", tc->tool->name);
	else if (tc->too_big)
		snprintf(msg, sizeof(msg), "tool '%s' output is over %d bytes", tc->tool->name,
			 TOOL_OUTPUT_MAX);
	else if (failed)
		snprintf(msg, sizeof(msg), "tool '%s' exited with status %d", tc->tool->name,
			 WIFEXITED(tc->status) ? WEXITSTATUS(tc->status)
					       : 128 + WTERMSIG(tc->status));
	if (!failed) {
		size_t len;
		_cleanup_free_ char *text =
		    utf8_sanitize(tc->buf.data ? tc->buf.data : "", tc->buf.len, &len);
		result = text ? json_loadb(text, len, JSON_DECODE_ANY, NULL) : NULL;
		if (!result && text)
			result = json_stringn(text, len); /* plain text is a string result */
		/* a host tool's output goes back to a sandbox: no configured secret in it */
		if (result && redact_json(run->secret_values, result) < 0) {
			json_decref(result);
			result = json_string("[REDACTED]");
		}
	}
	if (tc->mcp) {
		json_t *content;
		if (failed) {
			char t[200];
			snprintf(t, sizeof(t), "Tool execution failed: %s", msg);
			content = json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text",
					    "text", t, "isError", 1);
		} else {
			_cleanup_free_ char *s = json_is_string(result)
						     ? strdup(json_string_value(result))
						     : json_dump_compact(result);
			content = json_pack("{s:[{s:s, s:s}]}", "content", "type", "text", "text",
					    s ? s : "");
		}
		reply_json(TAKE_PTR(tc->reply), 200, rpc_result(tc->rpc_id, content));
	} else if (failed) {
		reply_error(TAKE_PTR(tc->reply), 500, "tool_failed", msg);
	} else {
		reply_json(TAKE_PTR(tc->reply), 200, json_pack("{s:O}", "result", result));
	}
	json_decref(result);
	LogCtx lc = run->log;
	if (failed)
		log_ctx(LOG_NOTICE, &lc, "Host tool call failed: %s", msg);
	else
		log_ctx(LOG_INFO, &lc, "Host tool '%s' finished", tc->tool->name);
	(void)runlog_touch(run->c->runlog, run->run_id, now_epoch_ms());
	run->bridge_inflight--;
	call_unlink(tc);
	call_free(tc);
}

static void
maybe_finish(ToolCall *tc)
{
	if (tc->exited && tc->eof)
		call_finish(tc);
}

static void
out_read(struct bufferevent *bev, void *arg)
{
	ToolCall *tc = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t n = evbuffer_get_length(in);

	if (tc->buf.len + n > TOOL_OUTPUT_MAX) {
		tc->too_big = true;
		evbuffer_drain(in, n);
		return;
	}
	char *p = (char *)evbuffer_pullup(in, -1);
	if (p)
		(void)outbuf_add(&tc->buf, p, n);
	evbuffer_drain(in, n);
}

static void
out_event(struct bufferevent *bev, short what, void *arg)
{
	ToolCall *tc = arg;
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
		out_read(bev, arg);
		tc->eof = true;
		maybe_finish(tc);
	}
}

static void
in_drained(struct bufferevent *bev, void *arg)
{
	ToolCall *tc = arg;
	/* all of stdin written: close it so the tool sees EOF */
	bufferevent_free(tc->in);
	tc->in = NULL;
}

static void
in_event(struct bufferevent *bev, short what, void *arg)
{
	in_drained(bev, arg); /* EPIPE: the tool does not read its input */
}

static void
pid_exited(evutil_socket_t fd, short what, void *arg)
{
	ToolCall *tc = arg;
	if (waitpid(tc->pid, &tc->status, WNOHANG) != tc->pid)
		return;
	tc->exited = true;
	event_del(tc->pid_ev);
	/* what the tool left running dies with it, and its stdout reaches EOF */
	if (tc->leaf_id)
		(void)cgroup_leaf_kill(tc->run->c->tool_cg, tc->leaf_id);
	maybe_finish(tc);
}

static void
call_timeout(evutil_socket_t fd, short what, void *arg)
{
	ToolCall *tc = arg;
	tc->timed_out = true;
	(void)syscall(SYS_pidfd_send_signal, tc->pidfd, SIGKILL, NULL, 0);
	if (tc->leaf_id)
		(void)cgroup_leaf_kill(tc->run->c->tool_cg, tc->leaf_id);
}

/* The cgroup a call's process joins: a new leaf (cgroup2) and the v1 groups
 * (hybrid host). *ret_procs is the leaf's cgroup.procs, or -1. */
static int
call_cgroup(Run *run, uint64_t *ret_leaf, int *ret_procs, const int **ret_v1, size_t *ret_n_v1)
{
	Coordinator *c = run->c;
	Reason err = {""};
	_cleanup_close_ int dfd = -1;
	int cg2fd, r = 0;

	*ret_leaf = 0;
	*ret_procs = -1;
	*ret_v1 = NULL;
	*ret_n_v1 = 0;
	if (!c->tool_cg)
		return 0;
	cgroup_spawn_fds(c->tool_cg, &cg2fd, ret_v1, ret_n_v1);
	if (!cgroup_has_leaves(c->tool_cg))
		return 0;
	/* leaves of ended calls whose last members had not exited yet */
	(void)cgroup_prune_leaves(c->tool_cg, tool_leaf_busy, c);
	uint64_t id = ++c->tool_call_seq;
	r = cgroup_leaf_create(c->tool_cg, id, &dfd, &err);
	if (r >= 0) {
		*ret_procs = openat(dfd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
		if (*ret_procs < 0) {
			r = -errno;
			reason_set(&err, "open cgroup.procs: %s", strerror(errno));
			(void)cgroup_leaf_remove(c->tool_cg, id);
		}
	}
	if (r < 0)
		return log_ctx_errno(LOG_ERR, r, &run->log,
				     "Cannot create the cgroup of a host tool call: %s",
				     reason_text(&err, r));
	*ret_leaf = id;
	return 0;
}

/* In the forked child: join the call's cgroup. Async-signal-safe. */
static bool
child_join_cgroup(int leaf_procs, const int *v1, size_t n_v1)
{
	for (size_t i = 0; i < n_v1; i++)
		if (write(v1[i], "0", 1) != 1)
			return false;
	return leaf_procs < 0 || write(leaf_procs, "0", 1) == 1;
}

/* Start the tool; takes *d (NULL) on success: the answer goes out from
 * call_finish(). */
static int
call_start(Run *run, PeerDeferred **d, bool mcp, json_t *rpc_id, const Tool *tool,
	   const json_t *args)
{
	Coordinator *c = run->c;
	int in[2] = {-1, -1}, out[2] = {-1, -1};
	_cleanup_free_ char *input = json_dump_compact(args ? args : json_object());
	char env_run[64], env_thread[300];
	ToolCall *tc;
	_cleanup_close_ int leaf_procs = -1;
	const int *v1_procs;
	size_t n_v1_procs;
	uint64_t leaf_id;
	int r;

	/* one run cannot hog the host's tool processes, nor all runs the host */
	if (run->bridge_inflight >= c->conf.max_tool_calls_per_run ||
	    c->tool_calls >= c->conf.max_tool_calls) {
		c->m.tool_calls_refused++;
		log_ctx(LOG_DEBUG, &run->log,
			"Host tool call refused: %d running in this run, %d in all",
			run->bridge_inflight, c->tool_calls);
		return -EBUSY;
	}
	r = call_cgroup(run, &leaf_id, &leaf_procs, &v1_procs, &n_v1_procs);
	if (r < 0)
		return r;
	tc = calloc(1, sizeof(*tc));
	if (!tc || !input || pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0) {
		free(tc);
		safe_close(in[0]), safe_close(in[1]), safe_close(out[0]), safe_close(out[1]);
		if (leaf_id)
			(void)cgroup_leaf_remove(c->tool_cg, leaf_id);
		return -ENOMEM;
	}
	snprintf(env_run, sizeof(env_run), "RUNWARDEN_RUN_ID=%s", run->run_id);
	snprintf(env_thread, sizeof(env_thread), "RUNWARDEN_THREAD_ID=%s", run->thread_id);
	char *env[] = {(char *)"PATH=/usr/local/bin:/usr/bin:/bin", (char *)"LANG=C.UTF-8", env_run,
		       env_thread, NULL};
	pid_t pid = fork();
	if (pid < 0) {
		r = -errno;
		free(tc);
		safe_close(in[0]), safe_close(in[1]), safe_close(out[0]), safe_close(out[1]);
		if (leaf_id)
			(void)cgroup_leaf_remove(c->tool_cg, leaf_id);
		return r;
	}
	if (pid == 0) {
		/* the child: into the call's cgroup before anything of the tool runs
		 * (fail closed), then stdin and stdout are the pipes, stderr goes to
		 * ours (the journal) */
		if (!child_join_cgroup(leaf_procs, v1_procs, n_v1_procs)) {
			static const char m[] = "coordinatord: cannot move a host tool into "
						"its cgroup; not running it\n";
			(void)!write(2, m, sizeof(m) - 1);
			_exit(126);
		}
		if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0)
			_exit(127);
		(void)syscall(SYS_close_range, 3, ~0U, 0);
		signal(SIGPIPE, SIG_DFL);
		execve(tool->command[0], tool->command, env);
		_exit(127);
	}
	safe_close(in[0]);
	safe_close(out[1]);
	tc->run = run;
	tc->mcp = mcp;
	tc->rpc_id = json_incref(rpc_id);
	tc->tool = tool;
	tc->leaf_id = leaf_id;
	tc->pid = pid;
	tc->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	fd_nonblock(in[1], 1);
	fd_nonblock(out[0], 1);
	tc->in = bufferevent_socket_new(c->base, in[1], BEV_OPT_CLOSE_ON_FREE);
	tc->out = bufferevent_socket_new(c->base, out[0], BEV_OPT_CLOSE_ON_FREE);
	tc->pid_ev = tc->pidfd >= 0
			 ? event_new(c->base, tc->pidfd, EV_READ | EV_PERSIST, pid_exited, tc)
			 : NULL;
	tc->timer = evtimer_new(c->base, call_timeout, tc);
	/* linked first, so that any failure below is released by call_free */
	tc->next = run->bridge_calls;
	run->bridge_calls = tc;
	run->bridge_inflight++;
	tc->counted = true;
	c->tool_calls++;
	if (!tc->in || !tc->out || !tc->pid_ev || !tc->timer) {
		run->bridge_inflight--;
		call_unlink(tc);
		call_free(tc);
		return -ENOMEM;
	}
	tc->reply = TAKE_PTR(*d); /* answered from call_finish() or bridge_close() */
	bufferevent_setcb(tc->in, NULL, in_drained, in_event, tc);
	bufferevent_setcb(tc->out, out_read, NULL, out_event, tc);
	bufferevent_enable(tc->out, EV_READ);
	bufferevent_enable(tc->in, EV_WRITE);
	bufferevent_write(tc->in, input, strlen(input));
	event_add(tc->pid_ev, NULL);
	struct timeval tv;
	evtimer_add(tc->timer, timeval_from_usec(&tv, (usec_t)tool->timeout_ms * USEC_PER_MSEC));
	log_ctx(LOG_INFO, &run->log, "Host tool '%s' called", tool->name);
	return 0;
}

static bool
tool_offered(const Run *run, const char *name)
{
	for (size_t i = 0; run->harness->tools && run->harness->tools[i]; i++)
		if (streq(run->harness->tools[i], name))
			return true;
	return false;
}

static void
reply_too_many(PeerDeferred *d)
{
	reply_error(d, 429, "too_many_tool_calls",
		    "too many host tool calls running (max_tool_calls_per_run, max_tool_calls); "
		    "retry when one has finished");
}

static void
handle_rpc(Run *run, PeerDeferred *d, const char *body)
{
	Coordinator *c = run->c;
	json_t *msg = json_loads(body, 0, NULL);
	int r;

	if (!msg) {
		reply_json(d, 200, rpc_error(NULL, -32700, "Parse error"));
		return;
	}
	if (!json_is_object(msg)) {
		json_decref(msg);
		reply_json(d, 200, rpc_error(NULL, -32600, "Invalid Request"));
		return;
	}
	json_t *id = json_object_get(msg, "id");
	const char *method = json_string_value(json_object_get(msg, "method"));
	const json_t *params = json_object_get(msg, "params");
	if (!id || json_is_null(id)) {
		/* a notification (notifications/initialized, …): no answer */
		json_decref(msg);
		reply(d, 202, "application/json; charset=utf-8", "", 0);
		return;
	}
	if (!method) {
		reply_json(d, 200, rpc_error(id, -32600, "Invalid Request"));
	} else if (streq(method, "initialize")) {
		reply_json(
		    d, 200,
		    rpc_result(id, json_pack("{s:s, s:{s:{}}, s:{s:s, s:s}}", "protocolVersion",
					     "2024-11-05", "capabilities", "tools", "serverInfo",
					     "name", "tanstack", "version", "1.0.0")));
	} else if (streq(method, "tools/list")) {
		json_t *tools = json_array();
		for (size_t i = 0; run->harness->tools && run->harness->tools[i]; i++) {
			const Tool *t = tool_find(c->harnesses, run->harness->tools[i]);
			if (!t)
				continue;
			json_t *schema =
			    json_is_object(t->schema)
				? json_incref(t->schema)
				: json_pack("{s:s, s:{}}", "type", "object", "properties");
			json_array_append_new(tools, json_pack("{s:s, s:s, s:o}", "name", t->name,
							       "description",
							       t->description ? t->description : "",
							       "inputSchema", schema));
		}
		reply_json(d, 200, rpc_result(id, json_pack("{s:o}", "tools", tools)));
	} else if (streq(method, "tools/call")) {
		const char *name = json_string_value(json_object_get(params, "name"));
		const Tool *t =
		    name && tool_offered(run, name) ? tool_find(c->harnesses, name) : NULL;
		if (!name)
			reply_json(d, 200, rpc_error(id, -32602, "Invalid params: name"));
		else if (!t) {
			char m[160];
			snprintf(m, sizeof(m), "Tool execution failed: Unknown tool: %.64s", name);
			reply_json(
			    d, 200,
			    rpc_result(id, json_pack("{s:[{s:s, s:s}], s:b}", "content", "type",
						     "text", "text", m, "isError", 1)));
		} else if ((r = call_start(run, &d, true, id, t,
					   json_object_get(params, "arguments"))) == -EBUSY)
			reply_too_many(d);
		else if (r < 0)
			reply_json(
			    d, 200,
			    rpc_result(id,
				       json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text",
						 "text", "Tool execution failed: cannot start it",
						 "isError", 1)));
	} else {
		reply_json(d, 200, rpc_error(id, -32601, "Method not found"));
	}
	json_decref(msg);
}

static void
handle_tool_exec(Run *run, PeerDeferred *d, const char *body)
{
	Coordinator *c = run->c;
	json_t *msg = json_loads(body, 0, NULL);
	int r;

	if (!msg) {
		reply_json(d, 400,
			   json_pack("{s:s, s:s}", "error", "body must be valid JSON", "code",
				     "bad_request"));
		return;
	}
	const char *name = json_string_value(json_object_get(msg, "name"));
	if (!json_is_object(msg) || !name) {
		json_decref(msg);
		reply_json(d, 400,
			   json_pack("{s:s, s:s}", "error", "body must be { name, args }", "code",
				     "bad_request"));
		return;
	}
	const Tool *t = tool_offered(run, name) ? tool_find(c->harnesses, name) : NULL;
	if (!t) {
		char m[160];
		snprintf(m, sizeof(m), "Unknown tool: %.64s", name);
		reply_error(d, 500, "unknown_tool", m);
	} else if ((r = call_start(run, &d, false, NULL, t, json_object_get(msg, "args"))) ==
		   -EBUSY)
		reply_too_many(d);
	else if (r < 0)
		reply_error(d, 500, "tool_failed", "cannot start the tool");
	json_decref(msg);
}

int
handle_bridge_call(Peer *p, const Frame *f, const Msg_BRIDGE_CALL *m, void *ud)
{
	Client *cl = ud;
	Coordinator *c = cl->c;
	const char *auth = m->authorization;

	/* every path below answers d once, now or when the tool ended */
	PeerDeferred *d = peer_defer(p, f);
	if (!d)
		return -ENOMEM;
	Run *run = run_find(c, m->run_id);
	if (!run || !run->bridge_live || run->state == RUN_DONE ||
	    (m->thread_id && !streq(m->thread_id, run->thread_id))) {
		reply_error(d, 404, "not_found", "no active bridge for run");
		goto out;
	}
	/* "Bearer <token>", compared in constant time; a length mismatch fails fast */
	size_t tl = strlen(run->bridge_token);
	if (!auth || strncmp(auth, "Bearer ", 7) != 0 || strlen(auth + 7) != tl ||
	    CRYPTO_memcmp(auth + 7, run->bridge_token, tl) != 0) {
		reply_error(d, 401, "unauthorized", "unauthorized");
		goto out;
	}
	/* arrival is activity; a call whose touch fails is not executed */
	if (runlog_touch(c->runlog, run->run_id, now_epoch_ms()) < 0) {
		reply_error(d, 503, "storage_error", "run log unavailable");
		goto out;
	}
	if (streq(m->kind, "bridge"))
		handle_rpc(run, d, m->body);
	else if (streq(m->kind, "tool_exec"))
		handle_tool_exec(run, d, m->body);
	else
		reply_error(d, 404, "not_found", "not found");
out:
	return 0;
}
