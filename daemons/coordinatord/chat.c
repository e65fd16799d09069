/* SPDX-License-Identifier: MIT */
/*
 * chat.c — the hydrate answer of GET /chat?threadId= (CHAT_HYDRATE): a
 * thread's runs rebuilt into TanStack AI UIMessages, the way the client's
 * StreamProcessor builds them from the same chunks.
 *
 * Per run, oldest first: the user messages stored with it (the `inputs`
 * database, written by RUN_START with client_run_id in the run's own
 * transaction), then one assistant message built from its events:
 *   TEXT_MESSAGE_CONTENT  appended to the last part when it is text, else a
 *                         new {type:"text", content} part;
 *   TOOL_CALL_START       a {type:"tool-call", id, name, arguments:"",
 *                         state:"awaiting-input"} part;
 *   TOOL_CALL_ARGS        arguments += delta, state "input-streaming";
 *   TOOL_CALL_END         state "input-complete", input = the parsed arguments;
 *   TOOL_CALL_RESULT      the call's output (content parsed as JSON when it is)
 *                         and state "complete" ("error" and output {error} for
 *                         an output-error result), plus a {type:"tool-result",
 *                         toolCallId, content, state} part;
 *   RUN_FINISHED          calls still streaming their input become
 *                         "input-complete".
 * The assistant message's id is the messageId of the run's first
 * TEXT_MESSAGE_START (else the run id). Runs without a stored input (POST
 * /runs) contribute their assistant message only. The newest
 * CHAT_HYDRATE_MAX_RUNS runs are rebuilt; the answer is refused (-EFBIG) past
 * read_max_bytes.
 *
 * Cluster mode, a thread taken over from a lost node (chat_hydrate_merged):
 * the runs that ran there are in no local log. The answer is deferred, and
 * each such run is read from the cluster in turn — its input from rw_inputs
 * (put by its owner: replicate_input), its last event at the stream's
 * leader, its events by direct gets — with the same rebuild.
 */
#include "config.h"

#include "coordinatord.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "cluster/cluster.h"
#include "json-util.h"
#include "macro.h"

#define CHAT_HYDRATE_MAX_RUNS 100

/* The text of a wire message's content: a string, or the text parts of an
 * array joined. */
static char *
content_text(const json_t *content)
{
	size_t i;
	json_t *part;

	if (json_is_string(content))
		return strdup(json_string_value(content));
	char *out = strdup("");
	if (!out || !json_is_array(content))
		return out;
	json_array_foreach(content, i, part)
	{
		const char *t = json_string_value(json_object_get(part, "text"));
		if (!t)
			t = json_string_value(json_object_get(part, "content"));
		if (!t)
			continue;
		char *n = NULL;
		if (asprintf(&n, "%s%s", out, t) < 0) {
			free(out);
			return NULL;
		}
		free(out);
		out = n;
	}
	return out;
}

static int
add_user_messages(json_t *out, const char *run_id, const char *input)
{
	json_auto_t *arr = json_loads(input, 0, NULL);
	json_t *m;
	size_t i;

	if (!json_is_array(arr))
		return 0;
	json_array_foreach(arr, i, m)
	{
		const char *role = json_string_value(json_object_get(m, "role"));
		if (!role || !streq(role, "user"))
			continue;
		_cleanup_free_ char *text = content_text(json_object_get(m, "content"));
		const char *id = json_string_value(json_object_get(m, "id"));
		char fallback[RUN_ID_LEN + 32];
		if (!text)
			return -ENOMEM;
		if (!id) {
			snprintf(fallback, sizeof(fallback), "%s-user-%zu", run_id, i);
			id = fallback;
		}
		json_t *um = json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "id", id, "role", "user",
				       "parts", "type", "text", "content", text);
		if (!um || json_array_append_new(out, um) < 0)
			return -ENOMEM;
	}
	return 0;
}

static json_t *
find_call(json_t *parts, const char *id)
{
	json_t *p;
	size_t i;

	json_array_foreach(parts, i, p)
	{
		const char *t = json_string_value(json_object_get(p, "type"));
		const char *pid = json_string_value(json_object_get(p, "id"));
		if (t && pid && streq(t, "tool-call") && streq(pid, id))
			return p;
	}
	return NULL;
}

static void
append_string(json_t *obj, const char *key, const char *delta)
{
	const char *old = json_string_value(json_object_get(obj, key)) ?: "";
	char *n = NULL;
	if (asprintf(&n, "%s%s", old, delta) >= 0) {
		json_object_set_new(obj, key, json_string(n));
		free(n);
	}
}

/* One chunk into the assistant message being built (msg: {id?, parts}). */
static void
apply_chunk(json_t *msg, const json_t *ch)
{
	json_t *parts = json_object_get(msg, "parts");
	const char *type = json_string_value(json_object_get(ch, "type"));
	const char *call = json_string_value(json_object_get(ch, "toolCallId"));
	json_t *p;
	size_t i;

	if (!type)
		return;
	if (streq(type, "TEXT_MESSAGE_START")) {
		const char *mid = json_string_value(json_object_get(ch, "messageId"));
		if (mid && !json_object_get(msg, "id"))
			json_object_set_new(msg, "id", json_string(mid));
	} else if (streq(type, "TEXT_MESSAGE_CONTENT")) {
		const char *delta = json_string_value(json_object_get(ch, "delta"));
		size_t n = json_array_size(parts);
		json_t *last = n ? json_array_get(parts, n - 1) : NULL;
		if (!delta || !*delta)
			return;
		if (last && streq(json_string_value(json_object_get(last, "type")) ?: "", "text"))
			append_string(last, "content", delta);
		else
			json_array_append_new(
			    parts, json_pack("{s:s, s:s}", "type", "text", "content", delta));
	} else if (streq(type, "TOOL_CALL_START") && call && !find_call(parts, call)) {
		const char *name = json_string_value(json_object_get(ch, "toolCallName")) ?: "";
		json_array_append_new(parts, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type",
						       "tool-call", "id", call, "name", name,
						       "arguments", "", "state", "awaiting-input"));
	} else if (streq(type, "TOOL_CALL_ARGS") && call && (p = find_call(parts, call))) {
		const char *delta = json_string_value(json_object_get(ch, "delta"));
		if (delta && *delta) {
			append_string(p, "arguments", delta);
			if (streq(json_string_value(json_object_get(p, "state")) ?: "",
				  "awaiting-input"))
				json_object_set_new(p, "state", json_string("input-streaming"));
		}
	} else if (streq(type, "TOOL_CALL_END") && call && (p = find_call(parts, call))) {
		json_t *in = json_loads(json_string_value(json_object_get(p, "arguments")) ?: "",
					JSON_DECODE_ANY, NULL);
		json_object_set_new(p, "state", json_string("input-complete"));
		if (in)
			json_object_set_new(p, "input", in);
	} else if (streq(type, "TOOL_CALL_RESULT") && call && (p = find_call(parts, call))) {
		const char *content = json_string_value(json_object_get(ch, "content")) ?: "";
		const char *st = json_string_value(json_object_get(ch, "state"));
		bool err = st && streq(st, "output-error");
		json_t *out = json_loads(content, JSON_DECODE_ANY, NULL);
		if (!out)
			out = json_string(content);
		if (err) {
			const char *e = json_string_value(json_object_get(out, "error"));
			if (!e && json_is_string(out))
				e = json_string_value(out);
			json_object_set_new(
			    p, "output", json_pack("{s:s}", "error", e ?: "Tool execution failed"));
			json_decref(out);
		} else
			json_object_set_new(p, "output", out);
		json_object_set_new(p, "state", json_string(err ? "error" : "complete"));
		json_array_foreach(parts, i, p)
		{
			const char *pt = json_string_value(json_object_get(p, "type")) ?: "";
			const char *pc = json_string_value(json_object_get(p, "toolCallId")) ?: "";
			if (streq(pt, "tool-result") && streq(pc, call)) {
				json_array_remove(parts, i);
				break;
			}
		}
		json_array_append_new(parts,
				      json_pack("{s:s, s:s, s:s, s:s}", "type", "tool-result",
						"toolCallId", call, "content", content, "state",
						err ? "error" : "complete"));
	} else if (streq(type, "RUN_FINISHED")) {
		json_array_foreach(parts, i, p)
		{
			const char *pt = json_string_value(json_object_get(p, "type")) ?: "";
			const char *ps = json_string_value(json_object_get(p, "state")) ?: "";
			if (streq(pt, "tool-call") &&
			    (streq(ps, "awaiting-input") || streq(ps, "input-streaming")))
				json_object_set_new(p, "state", json_string("input-complete"));
		}
	}
}

/* Append the assistant message built into msg (run_id's id when it has none),
 * unless it has no part. */
static int
finish_assistant_message(json_t *out, json_t *msg, const char *run_id)
{
	if (json_array_size(json_object_get(msg, "parts")) == 0)
		return 0;
	if (!json_object_get(msg, "id"))
		json_object_set_new(msg, "id", json_string(run_id));
	json_object_set_new(msg, "role", json_string("assistant"));
	return json_array_append(out, msg) < 0 ? -ENOMEM : 0;
}

static void
apply_text(json_t *msg, const void *text, size_t len)
{
	json_auto_t *ch = json_loadb(text, len, 0, NULL);
	if (json_is_object(ch))
		apply_chunk(msg, ch);
}

static int
add_assistant_message(Coordinator *c, json_t *out, const char *run_id)
{
	json_auto_t *msg = json_pack("{s:[]}", "parts");
	int64_t from = -1;
	int r;

	if (!msg)
		return -ENOMEM;
	for (;;) {
		RunLogEvents ev = {0};
		json_t *rec = NULL;
		r = runlog_read(c->runlog, run_id, from, (size_t)c->conf.read_max, &ev, &rec);
		json_decref(rec);
		if (r < 0)
			return r;
		for (size_t i = 0; i < ev.n; i++)
			apply_text(msg, ev.texts[i], ev.lens[i]);
		size_t n = ev.n;
		from = ev.first_seq + (int64_t)n - 1;
		runlog_events_done(&ev);
		if (n == 0)
			break;
	}
	return finish_assistant_message(out, msg, run_id);
}

/* A run of the local log: its stored user messages, then its assistant
 * message; *active set to it while it runs. */
static int
add_local_run(Coordinator *c, json_t *messages, const json_t *rec, const char **active)
{
	const char *run_id = json_string_value(json_object_get(rec, "runId"));
	const char *status = json_string_value(json_object_get(rec, "status"));
	_cleanup_free_ char *input = NULL;
	int r;

	if (!run_id)
		return 0;
	if (status && !run_status_terminal(status))
		*active = run_id;
	r = runlog_input_get(c->runlog, run_id, &input);
	if (r == 0)
		r = add_user_messages(messages, run_id, input);
	if (r < 0 && r != -ENOENT)
		return r;
	r = add_assistant_message(c, messages, run_id);
	return r < 0 && r != -ENOENT ? r : 0;
}

/* The answer's text; -EFBIG past read_max_bytes. */
static int
hydrate_body(Coordinator *c, json_t *messages, const char *active, char **ret_json)
{
	json_auto_t *body =
	    json_pack("{s:O, s:o, s:n}", "messages", messages, "activeRun",
		      active ? json_pack("{s:s}", "runId", active) : json_null(), "interrupts");
	char *s = body ? json_dump_compact(body) : NULL;
	if (!s)
		return -ENOMEM;
	if ((int64_t)strlen(s) > c->conf.read_max_bytes) {
		free(s);
		return -EFBIG;
	}
	*ret_json = s;
	return 0;
}

int
chat_hydrate(Coordinator *c, const json_t *runs, char **ret_json)
{
	json_auto_t *messages = json_array();
	const char *active = NULL;
	size_t n = MIN(json_array_size(runs), (size_t)CHAT_HYDRATE_MAX_RUNS);
	int r;

	if (!messages)
		return -ENOMEM;
	/* newest first: rebuild from the oldest kept */
	for (size_t k = n; k-- > 0;)
		if ((r = add_local_run(c, messages, json_array_get(runs, k), &active)) < 0)
			return r;
	return hydrate_body(c, messages, active, ret_json);
}

/* ---- cluster mode: runs a lost node ran, read from JetStream ---- */

typedef struct Hydrate Hydrate;
struct Hydrate {
	Hydrate *next;
	Coordinator *c;
	PeerDeferred *d;
	json_t *runs;	  /* newest first, at most CHAT_HYDRATE_MAX_RUNS */
	json_t *local;	  /* runId → true: the runs of the local log */
	json_t *messages; /* built so far */
	json_t *msg;	  /* the assistant message of the run read now */
	const char *active;
	size_t k; /* runs[k - 1] is the next (or the one read now) */
	const char *run_id;
	uint64_t last_seq;  /* the run's last event, at the stream's leader */
	int64_t seen;	    /* the last seq applied (-1: none) */
	uint64_t next_sseq; /* where the next read scans from */
	int lag_tries;
};

static void
hydrate_free(Hydrate *h)
{
	for (Hydrate **pp = &h->c->hydrates; *pp; pp = &(*pp)->next)
		if (*pp == h) {
			*pp = h->next;
			break;
		}
	peer_deferred_free(h->d);
	json_decref(h->runs);
	json_decref(h->local);
	json_decref(h->messages);
	json_decref(h->msg);
	free(h);
}

static void
hydrate_fail(Hydrate *h, int err)
{
	if (err == -EFBIG)
		(void)peer_deferred_error(TAKE_PTR(h->d), -EFBIG, NULL,
					  "the thread's messages exceed read_max_bytes");
	else if (err == -ENOMEM)
		(void)peer_deferred_error(TAKE_PTR(h->d), -ENOMEM, NULL, NULL);
	else {
		log_warning_errno(err,
				  "Cannot read run %s from the cluster for a /chat hydrate: %m",
				  h->run_id ?: "?");
		(void)peer_deferred_error(TAKE_PTR(h->d), -EAGAIN, "cluster_unavailable",
					  "a run of the thread in the cluster cannot be read now");
	}
	hydrate_free(h);
}

static void hydrate_next(Hydrate *h);

static void
on_hydrate_events(Cluster *cluster, int err, const ClusterReadEvent *ev, size_t n,
		  uint64_t next_sseq, void *userdata)
{
	Hydrate *h = userdata;
	(void)cluster;

	if (err < 0)
		return hydrate_fail(h, err);
	for (size_t i = 0; i < n; i++) {
		if ((int64_t)ev[i].seq != h->seen + 1) {
			/* the stream's order is the run's, as remote.c reads it */
			log_warning("Run %s: its log in the cluster has a gap at seq %" PRId64,
				    h->run_id, h->seen + 1);
			return hydrate_fail(h, -EIO);
		}
		apply_text(h->msg, ev[i].data, ev[i].len);
		h->seen = (int64_t)ev[i].seq;
	}
	h->next_sseq = next_sseq;
	if (h->seen < (int64_t)h->last_seq) {
		/* more to read; nothing new from this replica: it lags */
		if (n == 0 && ++h->lag_tries > REMOTE_LAG_RETRIES)
			return hydrate_fail(h, -EAGAIN);
		if (cluster_read_events(h->c->cluster, h->run_id, (uint64_t)(h->seen + 1),
					h->next_sseq, (size_t)h->c->conf.read_max,
					on_hydrate_events, h) < 0)
			hydrate_fail(h, -EAGAIN);
		return;
	}
	int r = finish_assistant_message(h->messages, h->msg, h->run_id);
	if (r < 0)
		return hydrate_fail(h, r);
	hydrate_next(h);
}

static void
on_hydrate_last(Cluster *cluster, int err, const ClusterRunLast *last, void *userdata)
{
	Hydrate *h = userdata;

	if (err == -ENOENT) /* no event in the stream: nothing to show */
		return hydrate_next(h);
	if (err < 0)
		return hydrate_fail(h, err);
	h->last_seq = last->seq;
	if (cluster_read_events(cluster, h->run_id, 0, 0, (size_t)h->c->conf.read_max,
				on_hydrate_events, h) < 0)
		hydrate_fail(h, -EAGAIN);
}

static void
on_hydrate_input(Cluster *cluster, int err, const void *data, size_t len, void *userdata)
{
	Hydrate *h = userdata;
	(void)len;

	if (err == 0) /* a NUL-terminated copy */
		err = add_user_messages(h->messages, h->run_id, data);
	if (err < 0 && err != -ENOENT) /* -ENOENT: no input (POST /runs) */
		return hydrate_fail(h, err);
	if (cluster_run_last(cluster, h->run_id, on_hydrate_last, h) < 0)
		hydrate_fail(h, -EAGAIN);
}

/* Rebuild the next run, oldest first: a run of the local log at once, a run
 * of another node's (lost) log from the cluster — its user messages from
 * rw_inputs, its assistant message from its JetStream subject; then answer. */
static void
hydrate_next(Hydrate *h)
{
	int r;

	while (h->k > 0) {
		json_t *rec = json_array_get(h->runs, --h->k);
		const char *run_id = json_string_value(json_object_get(rec, "runId"));
		if (!run_id)
			continue;
		if (json_object_get(h->local, run_id)) {
			if ((r = add_local_run(h->c, h->messages, rec, &h->active)) < 0)
				return hydrate_fail(h, r);
			continue;
		}
		const char *status = json_string_value(json_object_get(rec, "status"));
		if (status && !run_status_terminal(status))
			h->active = run_id;
		json_decref(h->msg);
		h->msg = json_pack("{s:[]}", "parts");
		if (!h->msg)
			return hydrate_fail(h, -ENOMEM);
		h->run_id = run_id;
		h->seen = -1;
		h->lag_tries = 0;
		if (cluster_get_input(h->c->cluster, run_id, on_hydrate_input, h) < 0)
			hydrate_fail(h, -EAGAIN);
		return;
	}
	_cleanup_free_ char *body = NULL;
	r = hydrate_body(h->c, h->messages, h->active, &body);
	if (r < 0)
		return hydrate_fail(h, r);
	(void)reply_deferred_CHAT_HYDRATE(TAKE_PTR(h->d), &(Reply_CHAT_HYDRATE){.body = body});
	hydrate_free(h);
}

int
chat_hydrate_merged(Coordinator *c, Peer *p, const Frame *f, json_t *runs, json_t *local)
{
	Hydrate *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->c = c;
	h->d = peer_defer(p, f);
	h->messages = json_array();
	if (!h->d || !h->messages) {
		peer_deferred_free(h->d);
		json_decref(h->messages);
		free(h);
		return -ENOMEM;
	}
	h->runs = json_incref(runs);
	h->local = json_incref(local);
	h->k = MIN(json_array_size(runs), (size_t)CHAT_HYDRATE_MAX_RUNS);
	h->next = c->hydrates;
	c->hydrates = h;
	hydrate_next(h);
	return 0;
}

void
chat_teardown(Coordinator *c)
{
	while (c->hydrates)
		hydrate_free(c->hydrates);
}
