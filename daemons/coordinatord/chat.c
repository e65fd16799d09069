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
 * The rebuild runs on the loop that serves every client, so its cost is
 * linear in the events read (Build: strings grow in Bufs (buf.h), an append to a jansson string
 * would copy and validate the whole string each time, tool calls are
 * found by hash, a replaced tool result is nulled and dropped at the end),
 * and it stops as soon as what the answer holds at least — every message's
 * overhead and id, the text taken in — is past read_max_bytes, instead of
 * building an answer only to refuse it; chunks of types it has no use for,
 * stored as the daemons write them, are passed over unparsed
 * (chunk_skippable). What it reads is bounded too: every stored input and
 * event, passed over or not, counts toward hydrate_read_max_bytes. And it
 * never holds the loop: the answer is deferred, and the rebuild goes on in
 * slices of HYDRATE_SLICE_BYTES read, each from a zero timer at the loop's
 * lowest priority (hydrate_step). Figures: bench/chat-hydrate-bench.py,
 * bench/loop-lag-attack.py; same answers: tests/reliability/hydrate-diff.
 *
 * Cluster mode, a thread taken over from a lost node (chat_hydrate with
 * local): the runs that ran there are in no local log. Each such run is
 * read from the cluster in turn — its input from rw_inputs (put by its
 * owner: replicate_input), its last event at the stream's leader, its
 * events by direct gets — with the same rebuild.
 */
#include "config.h"

#include "coordinator.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include <event2/event.h>

#include "cluster/cluster.h"
#include "buf.h"
#include "json-util.h"
#include "macro.h"

typedef struct Hydrate Hydrate;
static void hydrate_step(Hydrate *h);
static void on_hydrate_input(Cluster *cluster, int err, const void *data, size_t len,
			     void *userdata);

/* The text of a wire message's content: a string, or the text parts of an
 * array joined. */
static char *
content_text(const json_t *content)
{
	Buf g = {0};
	size_t i;
	json_t *part;

	if (json_is_string(content))
		return strdup(json_string_value(content));
	if (buf_append(&g, "", 0) < 0)
		return NULL;
	json_array_foreach(content, i, part)
	{
		const char *t = json_string_value(json_object_get(part, "text"));
		if (!t)
			t = json_string_value(json_object_get(part, "content"));
		if (t && buf_append(&g, t, strlen(t)) < 0) {
			buf_done(&g);
			return NULL;
		}
	}
	return g.data;
}

/* What a user message adds to the answer at least, beside its id and text:
 * `{"id":"","role":"user","parts":[{"type":"text","content":""}]},` (JSON
 * escapes only lengthen a string). */
#define USER_MESSAGE_OVERHEAD 63
/* And an assistant message, beside its id and parts:
 * `{"parts":[],"id":"","role":"assistant"},`; each part at least
 * `{"type":"text"},`. */
#define ASSISTANT_MESSAGE_OVERHEAD 40
#define PART_OVERHEAD 16

/* The user messages stored with a run. Each adds to *bytes what it adds to
 * the answer at least (its overhead, id and text), before it is built:
 * -EFBIG as soon as *bytes is past max_bytes. */
static int
add_user_messages(json_t *out, const char *run_id, const char *input, size_t *bytes,
		  size_t max_bytes)
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
		*bytes += USER_MESSAGE_OVERHEAD + strlen(id) + strlen(text);
		if (*bytes > max_bytes)
			return -EFBIG;
		json_t *um = json_pack("{s:s, s:s, s:[{s:s, s:s}]}", "id", id, "role", "user",
				       "parts", "type", "text", "content", text);
		if (!um || json_array_append_new(out, um) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* A tool call of the assistant message being built. */
typedef struct Call {
	size_t part;	 /* its tool-call part's index */
	Buf args;	 /* its arguments while they grow (buf NULL: in the part) */
	bool parsed;	 /* input parsed from the arguments as they are */
	size_t result;	 /* its tool-result part's index + 1, 0 none */
	size_t out_size; /* the result's bytes counted in *Build.bytes */
} Call;

/* The assistant message of one run, built chunk by chunk. Every lookup is
 * by index or hash, every string grows in a Buf, and *Build.bytes (the
 * text taken in for the whole answer: deltas, results, user messages — each
 * one in the answer at least once — a counter of the caller's, across runs)
 * stops the rebuild once it is past read_max_bytes: the answer would be
 * refused anyway. A tool-result part replaced by a later result is
 * nulled, and dropped at the end. */
typedef struct Build {
	json_t *parts;
	char *id;	/* the first TEXT_MESSAGE_START's messageId */
	bool text_open; /* the last part is text, its content in text */
	Buf text;
	json_t *call_ix; /* toolCallId → index in calls */
	Call *calls;
	size_t n_calls, cap_calls;
	size_t settled; /* calls[0..settled) were seen by a RUN_FINISHED: none of
			 * them can be streaming its input again */
	size_t *bytes, max_bytes;
} Build;

static int
build_init(Build *b, size_t *bytes, size_t max_bytes)
{
	*b = (Build){.parts = json_array(),
		     .call_ix = json_object(),
		     .bytes = bytes,
		     .max_bytes = max_bytes};
	return b->parts && b->call_ix ? 0 : -ENOMEM;
}

static void
build_done(Build *b)
{
	json_decref(b->parts);
	json_decref(b->call_ix);
	free(b->id);
	buf_done(&b->text);
	for (size_t i = 0; i < b->n_calls; i++)
		buf_done(&b->calls[i].args);
	free(b->calls);
	*b = (Build){0};
}

static int
build_count(Build *b, size_t n)
{
	*b->bytes += n;
	return *b->bytes > b->max_bytes ? -EFBIG : 0;
}

/* Set part.key to the string collected in g (valid UTF-8: joined deltas of
 * valid strings), and empty g. */
static int
buf_into(json_t *part, const char *key, Buf *g)
{
	int r = json_object_set_new(part, key, json_stringn_nocheck(g->data ?: "", g->len)) < 0
		    ? -ENOMEM
		    : 0;
	buf_done(g);
	return r;
}

/* The last part's text, into the part. */
static int
text_close(Build *b)
{
	if (!b->text_open)
		return 0;
	b->text_open = false;
	return buf_into(json_array_get(b->parts, json_array_size(b->parts) - 1), "content",
			&b->text);
}

/* A call's arguments, into its part (deltas of valid UTF-8 strings joined:
 * valid UTF-8). */
static int
args_close(Build *b, Call *cl)
{
	if (!cl->args.data)
		return 0;
	return buf_into(json_array_get(b->parts, cl->part), "arguments", &cl->args);
}

/* Append part (a reference taken, even on failure). */
static int
part_append(Build *b, json_t *part)
{
	if (!part || text_close(b) < 0) {
		json_decref(part);
		return -ENOMEM;
	}
	return json_array_append_new(b->parts, part) < 0 ? -ENOMEM : 0;
}

static Call *
call_find(Build *b, const char *id)
{
	json_t *ix = id ? json_object_get(b->call_ix, id) : NULL;
	return ix ? &b->calls[json_integer_value(ix)] : NULL;
}

static json_t *
call_part(Build *b, const Call *cl)
{
	return json_array_get(b->parts, cl->part);
}

/* The handlers of the chunk types the message is built from (chunk_fns). */
static int
on_text_start(Build *b, const json_t *ch, const char *call, Call *cl)
{
	const char *mid = json_string_value(json_object_get(ch, "messageId"));
	if (mid && !b->id && !(b->id = strdup(mid)))
		return -ENOMEM;
	return 0;
}

/* A chunk's delta and its length (0 when it has none), counted into the
 * hydrate's bytes; -EFBIG past them. */
static int
delta_count(Build *b, const json_t *ch, const char **ret_delta, size_t *ret_n)
{
	const char *delta = json_string_value(json_object_get(ch, "delta"));
	size_t n = delta ? strlen(delta) : 0;

	*ret_delta = delta;
	*ret_n = n;
	return n > 0 ? build_count(b, n) : 0;
}

static int
on_text_content(Build *b, const json_t *ch, const char *call, Call *cl)
{
	const char *delta;
	size_t n;
	int r;

	if ((r = delta_count(b, ch, &delta, &n)) < 0 || n == 0)
		return r;
	if (!b->text_open) {
		r = part_append(b, json_pack("{s:s, s:s}", "type", "text", "content", ""));
		if (r < 0)
			return r;
		b->text_open = true;
	}
	return buf_append(&b->text, delta, n);
}

static int
on_tool_call_start(Build *b, const json_t *ch, const char *call, Call *cl)
{
	const char *name = json_string_value(json_object_get(ch, "toolCallName")) ?: "";
	int r;

	if (!call || cl) /* a call started twice: the first counts */
		return 0;
	if (ARRAY_GROW(b->calls, b->n_calls, b->cap_calls, 8) < 0)
		return -ENOMEM;
	r = part_append(b, json_pack("{s:s, s:s, s:s, s:s, s:s}", "type", "tool-call", "id", call,
				     "name", name, "arguments", "", "state", "awaiting-input"));
	if (r < 0)
		return r;
	if (json_object_set_new(b->call_ix, call, json_integer((json_int_t)b->n_calls)) < 0)
		return -ENOMEM;
	b->calls[b->n_calls++] = (Call){.part = json_array_size(b->parts) - 1};
	return 0;
}

static int
on_tool_call_args(Build *b, const json_t *ch, const char *call, Call *cl)
{
	const char *delta;
	size_t n;
	int r;

	if (!cl)
		return 0;
	if ((r = delta_count(b, ch, &delta, &n)) < 0 || n == 0)
		return r;
	json_t *p = call_part(b, cl);
	if (!cl->args.data) { /* from what the part holds (an END came before) */
		const char *old = json_string_value(json_object_get(p, "arguments")) ?: "";
		if ((r = buf_append(&cl->args, old, strlen(old))) < 0)
			return r;
	}
	if ((r = buf_append(&cl->args, delta, n)) < 0)
		return r;
	cl->parsed = false;
	if (streq(json_string_value(json_object_get(p, "state")) ?: "", "awaiting-input"))
		json_object_set_new(p, "state", json_string("input-streaming"));
	return 0;
}

static int
on_tool_call_end(Build *b, const json_t *ch, const char *call, Call *cl)
{
	if (!cl)
		return 0;
	json_t *p = call_part(b, cl);
	int r = args_close(b, cl);

	if (r < 0)
		return r;
	if (!cl->parsed) { /* the same arguments parse the same: once */
		json_t *in = json_loads(json_string_value(json_object_get(p, "arguments")) ?: "",
					JSON_DECODE_ANY, NULL);
		if (in)
			json_object_set_new(p, "input", in);
		cl->parsed = true;
	}
	json_object_set_new(p, "state", json_string("input-complete"));
	return 0;
}

static int
on_tool_call_result(Build *b, const json_t *ch, const char *call, Call *cl)
{
	const char *content = json_string_value(json_object_get(ch, "content")) ?: "";
	const char *st = json_string_value(json_object_get(ch, "state"));
	bool err = st && streq(st, "output-error");
	size_t n = strlen(content);
	int r;

	if (!cl)
		return 0;
	json_t *p = call_part(b, cl);

	/* in the answer twice (the call's output, the tool-result part), once
	 * the result it replaces is gone */
	*b->bytes -= cl->out_size;
	cl->out_size = 2 * n;
	if ((r = build_count(b, 2 * n)) < 0)
		return r;
	json_t *out = json_loads(content, JSON_DECODE_ANY, NULL);
	if (!out)
		out = json_string(content);
	if (err) {
		const char *e = json_string_value(json_object_get(out, "error"));
		if (!e && json_is_string(out))
			e = json_string_value(out);
		json_object_set_new(p, "output",
				    json_pack("{s:s}", "error", e ?: "Tool execution failed"));
		json_decref(out);
	} else
		json_object_set_new(p, "output", out);
	json_object_set_new(p, "state", json_string(err ? "error" : "complete"));
	if (cl->result && json_array_set_new(b->parts, cl->result - 1, json_null()) < 0)
		return -ENOMEM;
	r = part_append(b,
			json_pack("{s:s, s:s, s:s, s:s}", "type", "tool-result", "toolCallId", call,
				  "content", content, "state", err ? "error" : "complete"));
	if (r < 0)
		return r;
	cl->result = json_array_size(b->parts);
	return 0;
}

/* Calls streaming their input become input-complete. */
static int
on_run_finished(Build *b, const json_t *ch, const char *call, Call *cl)
{
	for (size_t i = b->settled; i < b->n_calls; i++) {
		json_t *p = call_part(b, &b->calls[i]);
		const char *ps = json_string_value(json_object_get(p, "state")) ?: "";
		if (streq(ps, "awaiting-input") || streq(ps, "input-streaming"))
			json_object_set_new(p, "state", json_string("input-complete"));
	}
	b->settled = b->n_calls;
	return 0;
}

typedef int (*ChunkFn)(Build *b, const json_t *ch, const char *call, Call *cl);

/* The chunk types that change the message, and how: every other type is
 * ignored (and, stored as the daemons write it, not even parsed). */
static const struct {
	const char *type;
	ChunkFn fn;
} chunk_fns[] = {
    {"TEXT_MESSAGE_START", on_text_start},   {"TEXT_MESSAGE_CONTENT", on_text_content},
    {"TOOL_CALL_START", on_tool_call_start}, {"TOOL_CALL_ARGS", on_tool_call_args},
    {"TOOL_CALL_END", on_tool_call_end},     {"TOOL_CALL_RESULT", on_tool_call_result},
    {"RUN_FINISHED", on_run_finished},
};

static ChunkFn
chunk_fn(const char *t, size_t n)
{
	for (size_t i = 0; i < ELEMENTSOF(chunk_fns); i++)
		if (strlen(chunk_fns[i].type) == n && memcmp(chunk_fns[i].type, t, n) == 0)
			return chunk_fns[i].fn;
	return NULL;
}

/* One chunk into the message being built. 0, -EFBIG past max_bytes, -ENOMEM. */
static int
apply_chunk(Build *b, const json_t *ch)
{
	const char *type = json_string_value(json_object_get(ch, "type"));
	ChunkFn fn = type ? chunk_fn(type, strlen(type)) : NULL;
	const char *call = json_string_value(json_object_get(ch, "toolCallId"));

	return fn ? fn(b, ch, call, call_find(b, call)) : 0;
}

/* A chunk the rebuild can pass over unparsed: one the daemons stored as they
 * write their own — {"type":"X", first, X unescaped — holding no other
 * "type" key and no \u escape (which could spell one), so that its parse
 * would find that type; and X has no handler in chunk_fns. A shell
 * run's megabytes of CUSTOM process.stdout chunks are skipped by two
 * memmem() instead of parsed. Anything else is parsed. */
static bool
chunk_skippable(const char *text, size_t len)
{
	static const char head[] = "{\"type\":\"";
	const size_t hl = sizeof(head) - 1;

	if (len <= hl || memcmp(text, head, hl) != 0)
		return false;
	const char *t = text + hl, *end = text + len;
	const char *q = memchr(t, '"', (size_t)(end - t));
	if (!q || memchr(t, '\\', (size_t)(q - t)) || chunk_fn(t, (size_t)(q - t)))
		return false;
	return !memmem(q, (size_t)(end - q), "\"type\"", 6) && !memmem(text, len, "\\u", 2);
}

static int
apply_text(Build *b, const void *text, size_t len)
{
	if (chunk_skippable(text, len))
		return 0;
	json_auto_t *ch = json_loadb(text, len, 0, NULL);
	return json_is_object(ch) ? apply_chunk(b, ch) : 0;
}

/* Append the assistant message built (run_id's id when it has none), unless
 * it has no part. */
static int
finish_assistant_message(json_t *out, Build *b, const char *run_id)
{
	json_t *p;
	size_t i;

	if (text_close(b) < 0)
		return -ENOMEM;
	for (i = 0; i < b->n_calls; i++)
		if (args_close(b, &b->calls[i]) < 0)
			return -ENOMEM;
	json_auto_t *parts = json_array();
	if (!parts)
		return -ENOMEM;
	json_array_foreach(b->parts, i, p)
	{
		if (!json_is_null(p) && json_array_append(parts, p) < 0)
			return -ENOMEM;
	}
	if (json_array_size(parts) == 0)
		return 0;
	const char *id = b->id ?: run_id;
	int r = build_count(b, ASSISTANT_MESSAGE_OVERHEAD + strlen(id) +
				   PART_OVERHEAD * json_array_size(parts));
	if (r < 0)
		return r;
	json_t *msg = json_pack("{s:O, s:s, s:s}", "parts", parts, "id", id, "role", "assistant");
	return !msg || json_array_append_new(out, msg) < 0 ? -ENOMEM : 0;
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

/* ---- the rebuild, in slices ---- */

/* Bytes read from the log per loop turn: past them the hydrate yields, and
 * goes on after the loop's other events (~1 ms of work). */
#define HYDRATE_SLICE_BYTES (256 * 1024)

struct Hydrate {
	Hydrate *next;
	Coordinator *c;
	PeerDeferred *d;
	json_t *runs;	      /* newest first, at most CHAT_HYDRATE_MAX_RUNS */
	json_t *local;	      /* runId → true: the runs of the local log; NULL: all */
	json_t *messages;     /* built so far */
	Build b;	      /* the assistant message of the run read now */
	size_t bytes;	      /* the answer's size so far, at least (*Build.bytes) */
	size_t read;	      /* bytes read: inputs and events, skipped chunks too */
	size_t slice;	      /* of which in this loop turn */
	struct event *resume; /* the next slice */
	const char *active;
	size_t k;	    /* runs[k - 1] is the next */
	const char *run_id; /* the run read now, NULL between runs */
	bool local_run;	    /* its events from the local log, after seq from */
	int64_t from;
	/* a run a lost node ran, from the cluster */
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
	if (h->resume)
		event_free(h->resume);
	peer_deferred_free(h->d);
	json_decref(h->runs);
	json_decref(h->local);
	json_decref(h->messages);
	build_done(&h->b);
	free(h);
}

static void
hydrate_fail(Hydrate *h, int err)
{
	if (err == -EFBIG)
		(void)peer_deferred_error(TAKE_PTR(h->d), -EFBIG, NULL,
					  "the thread's messages exceed read_max_bytes");
	else if (err == -E2BIG)
		(void)peer_deferred_error(
		    TAKE_PTR(h->d), -EFBIG, REASON_TOO_LARGE,
		    "the thread's stored messages and events exceed what one hydrate reads "
		    "(coordinatord.hydrate_read_max_bytes)");
	else if (err == -ENOMEM)
		(void)peer_deferred_error(TAKE_PTR(h->d), -ENOMEM, NULL, NULL);
	else if (h->local_run) {
		log_error_errno(err, "Failed to rebuild a thread: run %s: %m", h->run_id ?: "?");
		(void)peer_deferred_error(TAKE_PTR(h->d), err, NULL, NULL);
	} else {
		log_warning_errno(err,
				  "Cannot read run %s from the cluster for a /chat hydrate: %m",
				  h->run_id ?: "?");
		(void)peer_deferred_error(TAKE_PTR(h->d), -EAGAIN, REASON_CLUSTER_UNAVAILABLE,
					  "a run of the thread in the cluster cannot be read now");
	}
	hydrate_free(h);
}

/* Count n bytes read: -E2BIG past hydrate_read_max_bytes. */
static int
hydrate_read(Hydrate *h, size_t n)
{
	h->read += n;
	h->slice += n;
	return h->read > (size_t)h->c->conf.hydrate_read_max_bytes ? -E2BIG : 0;
}

static int
hydrate_user_messages(Hydrate *h, const char *input, size_t len)
{
	int r = hydrate_read(h, len);
	if (r < 0)
		return r;
	return add_user_messages(h->messages, h->run_id, input, &h->bytes, h->b.max_bytes);
}

/* The local run's stored user messages. */
static int
local_input(Hydrate *h)
{
	_cleanup_free_ char *input = NULL;
	int r = runlog_input_get(h->c->runlog, h->run_id, &input);

	if (r == -ENOENT) /* none (POST /runs) */
		return 0;
	return r < 0 ? r : hydrate_user_messages(h, input, strlen(input));
}

/* The next events of the local run into its message: 1 when it has no more
 * (its message appended, if it has any part), 0 when it may. */
static int
local_events(Hydrate *h)
{
	Coordinator *c = h->c;
	RunLogEvents ev = {0};
	int r = runlog_read_bytes(c->runlog, h->run_id, h->from, (size_t)c->conf.read_max,
				  HYDRATE_SLICE_BYTES, &ev, NULL);
	size_t n = ev.n;

	for (size_t i = 0; r == 0 && i < n; i++)
		if ((r = hydrate_read(h, ev.lens[i])) == 0)
			r = apply_text(&h->b, ev.texts[i], ev.lens[i]);
	h->from = ev.first_seq + (int64_t)n - 1;
	runlog_events_done(&ev);
	if (r == -ENOENT) /* no record (deleted meanwhile): no message */
		return 1;
	if (r < 0)
		return r;
	if (n > 0)
		return 0;
	r = finish_assistant_message(h->messages, &h->b, h->run_id);
	return r < 0 ? r : 1;
}

static void
on_resume(evutil_socket_t fd, short what, void *userdata)
{
	Hydrate *h = userdata;
	(void)fd;
	(void)what;

	if (!peer_deferred_peer(h->d)) /* the requester left */
		return hydrate_free(h);
	h->slice = 0;
	hydrate_step(h);
}

/* Go on: the run read now, then the next, oldest first — a run of the local
 * log here, a run of another node's (lost) log from the cluster (its user
 * messages from rw_inputs, its assistant message from its JetStream
 * subject; the callbacks call back here) — until HYDRATE_SLICE_BYTES were
 * read in this loop turn (then again from a zero timer, after the loop's
 * other events); then answer. */
static void
hydrate_step(Hydrate *h)
{
	int r;

	for (;;) {
		if (h->slice >= HYDRATE_SLICE_BYTES) {
			static const struct timeval now = {0, 0};
			if (evtimer_add(h->resume, &now) < 0)
				hydrate_fail(h, -ENOMEM);
			return;
		}
		if (h->run_id && h->local_run) {
			if ((r = local_events(h)) < 0)
				return hydrate_fail(h, r);
			if (r > 0)
				h->run_id = NULL;
			continue;
		}
		if (h->k == 0)
			break;
		json_t *rec = json_array_get(h->runs, --h->k);
		const char *run_id = json_string_value(json_object_get(rec, "runId"));
		if (!run_id)
			continue;
		const char *status = json_string_value(json_object_get(rec, "status"));
		if (status && !run_status_terminal(status))
			h->active = run_id;
		build_done(&h->b);
		if (build_init(&h->b, &h->bytes, (size_t)h->c->conf.read_max_bytes) < 0)
			return hydrate_fail(h, -ENOMEM);
		h->run_id = run_id;
		h->local_run = !h->local || json_object_get(h->local, run_id);
		if (h->local_run) {
			h->from = -1;
			if ((r = local_input(h)) < 0)
				return hydrate_fail(h, r);
			continue;
		}
		h->seen = -1;
		h->lag_tries = 0;
		if (cluster_get(h->c->cluster, CLUSTER_INPUTS, run_id, on_hydrate_input, h) < 0)
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

/* ---- cluster mode: runs a lost node ran, read from JetStream ---- */

static void
on_hydrate_events(Cluster *cluster, int err, const ClusterReadEvent *ev, size_t n,
		  uint64_t next_sseq, void *userdata)
{
	Hydrate *h = userdata;
	int r;
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
		if ((r = hydrate_read(h, ev[i].len)) < 0 ||
		    (r = apply_text(&h->b, ev[i].data, ev[i].len)) < 0)
			return hydrate_fail(h, r);
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
	if ((r = finish_assistant_message(h->messages, &h->b, h->run_id)) < 0)
		return hydrate_fail(h, r);
	h->run_id = NULL;
	hydrate_step(h);
}

static void
on_hydrate_last(Cluster *cluster, int err, const ClusterRunLast *last, void *userdata)
{
	Hydrate *h = userdata;

	if (err == -ENOENT) { /* no event in the stream: nothing to show */
		h->run_id = NULL;
		return hydrate_step(h);
	}
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

	if (err == 0) /* a NUL-terminated copy */
		err = hydrate_user_messages(h, data, len);
	if (err < 0 && err != -ENOENT) /* -ENOENT: no input (POST /runs) */
		return hydrate_fail(h, err);
	if (cluster_run_last(cluster, h->run_id, on_hydrate_last, h) < 0)
		hydrate_fail(h, -EAGAIN);
}

int
chat_hydrate(Coordinator *c, Peer *p, const Frame *f, json_t *runs, json_t *local)
{
	Hydrate *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->c = c;
	h->d = peer_defer(p, f);
	h->messages = json_array();
	h->resume = evtimer_new(c->base, on_resume, h);
	/* the lowest priority, the group commit's: a slice runs once the loop
	 * turn's requests were served, and never delays a commit */
	if (!h->d || !h->messages || !h->resume || event_priority_set(h->resume, 2) < 0) {
		peer_deferred_free(h->d);
		json_decref(h->messages);
		if (h->resume)
			event_free(h->resume);
		free(h);
		return -ENOMEM;
	}
	h->runs = json_incref(runs);
	h->local = json_incref(local);
	h->k = MIN(json_array_size(runs), (size_t)CHAT_HYDRATE_MAX_RUNS);
	h->next = c->hydrates;
	c->hydrates = h;
	hydrate_step(h);
	return 0;
}

void
chat_teardown(Coordinator *c)
{
	while (c->hydrates)
		hydrate_free(c->hydrates);
}
