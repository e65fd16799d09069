/* SPDX-License-Identifier: MIT */
/*
 * runwarden — the command-line client of the public HTTP API (and `up`, the
 * foreground development mode that starts the three daemons).
 *
 * Exit status: `run` exits with the run's own status (its exitCode; 1 when it
 * failed or was aborted without one); every command exits 125 when the CLI
 * itself fails (server down, HTTP error, bad reply) and 2 on a usage error.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ini.h>
#include <jansson.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "cluster-status.h"
#include "macro.h"

#define EXIT_CLI 125 /* the CLI failed, not the run */
#define EXIT_USAGE 2
#define DEFAULT_URL "http://127.0.0.1:8787"
#define DEFAULT_THREAD "cli"

static struct {
	bool json;
	bool color;	/* on stdout */
	bool color_err; /* on stderr */
	const char *thread;
	const char *token; /* --token-file, $RUNWARDEN_TOKEN_FILE or $RUNWARDEN_TOKEN */
	Client client;
} g;

static const char *
col(bool on, const char *code)
{
	return on ? code : "";
}
#define RED(e) col(e, "\033[31m")
#define GREEN(e) col(e, "\033[32m")
#define YELLOW(e) col(e, "\033[33m")
#define BOLD(e) col(e, "\033[1m")
#define DIM(e) col(e, "\033[2m")
#define RESET(e) col(e, "\033[0m")

_printf_(1, 2) static int error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "%srunwarden:%s ", RED(g.color_err), RESET(g.color_err));
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return EXIT_CLI;
}

_printf_(1, 2) static int usage_error(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "runwarden: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'runwarden --help'.\n");
	return EXIT_USAGE;
}

/* Percent-encode a path segment or query value. */
static char *
urlenc(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(strlen(s) * 3 + 1), *o = out;
	if (!out)
		abort();
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
		    (ch >= '0' && ch <= '9') || ch == '-' || ch == '_' || ch == '.' || ch == '~')
			*o++ = (char)ch;
		else {
			*o++ = '%';
			*o++ = hex[ch >> 4];
			*o++ = hex[ch & 15];
		}
	}
	*o = '\0';
	return out;
}

/* Report an HTTP error reply: '<message> (<status> <code>)'. */
static int
http_error(const Response *r, const char *what)
{
	json_t *j = json_loadb(r->body ? r->body : "", r->len, 0, NULL);
	const char *msg = j ? json_string_value(json_object_get(j, "error")) : NULL;
	const char *code = j ? json_string_value(json_object_get(j, "code")) : NULL;
	if (r->status == 501 && !msg)
		msg = "not implemented by this server";
	if (msg)
		error("%s: %s (HTTP %d%s%s)", what, msg, r->status, code ? " " : "",
		      code ? code : "");
	else
		error("%s: HTTP %d from %s", what, r->status, g.client.url);
	/* A run is found only through its own thread (the owner check). */
	if (r->status == 404 &&
	    (streq(what, "show") || streq(what, "cancel") || streq(what, "tail")))
		fprintf(stderr,
			"runwarden: no such run in thread '%s'; a run is looked up in the thread "
			"that started it: pass --thread THREAD (or set RUNWARDEN_THREAD)\n",
			g.thread);
	else if (code && streq(code, "thread_forbidden"))
		fprintf(stderr, "runwarden: the token may not use thread '%s'\n", g.thread);
	json_decref(j);
	return EXIT_CLI;
}

/* Send a request; on success *ret holds the parsed JSON body of a 2xx reply. */
static int
call(const char *method, const char *path, json_t *body, const char *what, json_t **ret,
     Response *raw)
{
	Response r;
	char *b = body ? json_dumps(body, JSON_COMPACT) : NULL;
	int rc = client_request(&g.client, method, path, b, &r);
	free(b);
	if (rc < 0)
		return error("%s", g.client.err);
	if (r.status < 200 || r.status > 299) {
		rc = http_error(&r, what);
		response_free(&r);
		return rc;
	}
	if (ret) {
		json_error_t je;
		*ret = json_loadb(r.body, r.len, 0, &je);
		if (!*ret) {
			rc = error("%s: bad JSON from %s: %s", what, g.client.url, je.text);
			response_free(&r);
			return rc;
		}
	}
	if (raw)
		*raw = r;
	else
		response_free(&r);
	return 0;
}

static void
print_json(json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	fputc('\n', stdout);
}

static const char *
status_color(const char *s)
{
	if (!s)
		return "";
	if (strcmp(s, "completed") == 0)
		return GREEN(g.color);
	if (strcmp(s, "running") == 0)
		return YELLOW(g.color);
	return RED(g.color);
}

static void
fmt_time(json_t *v, char *buf, size_t n)
{
	if (!json_is_integer(v)) {
		snprintf(buf, n, "-");
		return;
	}
	time_t t = (time_t)(json_integer_value(v) / 1000);
	struct tm tm;
	localtime_r(&t, &tm);
	strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm);
}

/* ---------- tail ---------- */

typedef struct Tail {
	long long last_seq;
	json_t *record; /* the status frame's record, once seen */
	bool queued;	/* the latest chunk is run.queued */
	bool spinner;	/* draw one on stderr (a TTY, not --json) */
	int spin;
	bool at_line_start_err;
} Tail;

static void
spinner_clear(Tail *t)
{
	if (t->spinner && t->queued)
		fputs("\r\033[K", stderr);
}

static void
spinner_draw(Tail *t, json_t *value)
{
	static const char frames[] = "|/-\\";
	if (!t->spinner)
		return;
	json_t *pos = json_object_get(value, "position");
	fprintf(stderr, "\r\033[K%c queued%s%lld", frames[t->spin++ % 4],
		json_is_integer(pos) ? ", position " : "",
		json_is_integer(pos) ? (long long)json_integer_value(pos) : 0LL);
	if (!json_is_integer(pos))
		fputs("\b", stderr); /* no number: hide the placeholder */
	fflush(stderr);
}

static int
tail_text(const char *text, size_t len, void *userdata)
{
	Tail *t = userdata;
	json_t *j = json_loadb(text, len, 0, NULL);
	if (!j)
		return 0; /* not ours to judge: skip it */
	if (g.json) {
		fwrite(text, 1, len, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	json_t *seq = json_object_get(j, "seq");
	const char *type = json_string_value(json_object_get(j, "type"));
	if (json_is_integer(seq)) {
		long long s = json_integer_value(seq);
		if (s <= t->last_seq) { /* a resent event: never print it twice */
			json_decref(j);
			return 0;
		}
		t->last_seq = s;
		json_t *chunk = json_object_get(j, "chunk");
		const char *ct = json_string_value(json_object_get(chunk, "type"));
		const char *name = json_string_value(json_object_get(chunk, "name"));
		json_t *value = json_object_get(chunk, "value");
		bool q = ct && strcmp(ct, "CUSTOM") == 0 && name && strcmp(name, "run.queued") == 0;
		if (!g.json) {
			if (!q)
				spinner_clear(t);
			if (ct && strcmp(ct, "CUSTOM") == 0 && name && value) {
				const char *txt = json_string_value(json_object_get(value, "text"));
				if (strcmp(name, "process.stdout") == 0 && txt) {
					fputs(txt, stdout);
					fflush(stdout);
				} else if (strcmp(name, "runwarden.output_dropped") == 0 && txt) {
					fprintf(stderr, "\n%s\n", txt);
				} else if (strcmp(name, "process.stderr") == 0 && txt) {
					fputs(txt, stderr);
					fflush(stderr);
				}
			} else if (ct && strcmp(ct, "TEXT_MESSAGE_CONTENT") == 0) {
				const char *d = json_string_value(json_object_get(chunk, "delta"));
				if (d) {
					fputs(d, stdout);
					fflush(stdout);
				}
			}
			if (q)
				spinner_draw(t, value);
		}
		t->queued = q;
	} else if (type && strcmp(type, "status") == 0) {
		json_decref(t->record);
		t->record = json_incref(json_object_get(j, "record"));
		json_decref(j);
		return 1; /* the server closes next: done */
	}
	json_decref(j);
	return 0;
}

/* Identical closes (code, reason, seq) in a row before the CLI gives up
 * (a coordinatord restart's "coordinator unavailable" is never counted). */
#define TAIL_SAME_FAILURES_MAX 5

/* Tail a run until its status frame, reconnecting with lastSeq after drops.
 * Returns 0 with t->record set, or EXIT_CLI. */
static int
tail_run(const char *run_id, Tail *t)
{
	char *rid = urlenc(run_id), *tid = urlenc(g.thread);
	unsigned delay_ms = 100;
	int failures = 0, same = 0, rc = EXIT_CLI;
	int last_code = 0;
	long long last_at = -2;
	char last_reason[128] = "";

	t->spinner = !g.json && isatty(STDERR_FILENO);
	for (;;) {
		char path[1024], reason[128];
		Response http;
		snprintf(path, sizeof(path), "/runs/%s/stream?threadId=%s&lastSeq=%lld", rid, tid,
			 t->last_seq);
		int r = client_ws_run(&g.client, path, tail_text, t, &http, reason, sizeof(reason));
		if (r == WS_STOPPED || (r == 1000 && t->record)) {
			rc = 0;
			break;
		}
		if (r < 0 && http.status > 0 && http.status != 503) { /* 404 unknown run, 400 … */
			spinner_clear(t);
			rc = http_error(&http, "tail");
			response_free(&http);
			break;
		}
		if (r < 0 && http.status == 503) /* coordinatord restarting: like a drop */
			response_free(&http);
		if (r > 1000) { /* 1011 storage error, 1008 too slow, 1001 going away */
			spinner_clear(t);
			if (r != 1001 && r != 1006)
				fprintf(
				    stderr,
				    "runwarden: tail closed with %d%s%s; resuming after seq %lld\n",
				    r, reason[0] ? ": " : "", reason, t->last_seq);
			/* the same close at the same seq again and again will not heal
			 * by retrying: give up after a few */
			bool transient = r == 1001 || r == 1006 ||
					 strstr(reason, "coordinator unavailable") ||
					 strstr(reason, "coordinator timeout");
			if (!transient && r == last_code && t->last_seq == last_at &&
			    strcmp(reason, last_reason) == 0) {
				if (++same >= TAIL_SAME_FAILURES_MAX) {
					rc = error("tail: closed %d times with %d%s%s at seq %lld; "
						   "giving up",
						   same + 1, r, reason[0] ? ": " : "", reason,
						   t->last_seq);
					break;
				}
			} else
				same = 0;
			last_code = r;
			last_at = t->last_seq;
			snprintf(last_reason, sizeof(last_reason), "%s", reason);
		}
		/* Dropped (routerd restarted, network blip): resume from last_seq.
		 * Give up only after ~a minute of failing to connect at all. */
		if (r < 0) {
			if (++failures > 40) {
				spinner_clear(t);
				rc = error("%s", g.client.err);
				break;
			}
		} else
			failures = 0;
		usleep(delay_ms * 1000);
		delay_ms = delay_ms * 2 > 2000 ? 2000 : delay_ms * 2;
	}
	free(rid);
	free(tid);
	return rc;
}

static int
exit_status_of(json_t *record)
{
	const char *st = json_string_value(json_object_get(record, "status"));
	json_t *ec = json_object_get(record, "exitCode");
	if (st && strcmp(st, "completed") == 0)
		return json_is_integer(ec) ? (int)(json_integer_value(ec) & 255) : 0;
	if (json_is_integer(ec) && json_integer_value(ec) != 0)
		return (int)(json_integer_value(ec) & 255);
	return 1;
}

static void
report_end(json_t *record)
{
	if (g.json)
		return;
	const char *st = json_string_value(json_object_get(record, "status"));
	if (st && strcmp(st, "completed") == 0)
		return;
	const char *msg =
	    json_string_value(json_object_get(json_object_get(record, "error"), "message"));
	fprintf(stderr, "%srunwarden: run %s%s%s%s\n", RED(g.color_err), st ? st : "ended",
		msg ? ": " : "", msg ? msg : "", RESET(g.color_err));
}

/* ---------- commands ---------- */

/* Tail run_id after seq from to its end, report how it ended; the run's exit
 * status as ours (or the tail's error). */
static int
tail_to_end(const char *run_id, long long from)
{
	Tail t = {.last_seq = from};
	int rc = tail_run(run_id, &t);
	if (rc)
		return rc;
	report_end(t.record);
	rc = exit_status_of(t.record);
	json_decref(t.record);
	return rc;
}

static int
cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"thread", required_argument, NULL, 't'},
	    {"harness", required_argument, NULL, 'H'},
	    {"json", no_argument, NULL, 'j'},
	    {},
	};
	const char *harness = NULL;
	int c;
	optind = 0;
	while ((c = getopt_long(argc, argv, "+t:H:j", opts, NULL)) >= 0) {
		switch (c) {
		case 't': g.thread = optarg; break;
		case 'H': harness = optarg; break;
		case 'j': g.json = true; break;
		default: return EXIT_USAGE;
		}
	}
	if (optind >= argc)
		return usage_error("%s", "run: a COMMAND is required");

	/* The command is one shell string: its words joined by spaces. */
	size_t n = 0;
	for (int i = optind; i < argc; i++)
		n += strlen(argv[i]) + 1;
	char *cmd = calloc(1, n + 1);
	for (int i = optind; i < argc; i++) {
		if (i > optind)
			strcat(cmd, " ");
		strcat(cmd, argv[i]);
	}
	json_t *body = json_pack("{s:s, s:[{s:s, s:s}]}", "threadId", g.thread, "messages", "role",
				 "user", "content", cmd);
	free(cmd);
	if (harness)
		json_object_set_new(body, "metadata", json_pack("{s:s}", "harness", harness));
	json_t *reply = NULL;
	int rc = call("POST", "/runs", body, "run", &reply, NULL);
	json_decref(body);
	if (rc)
		return rc;
	const char *run_id = json_string_value(json_object_get(reply, "runId"));
	if (!run_id) {
		json_decref(reply);
		return error("run: no runId in the reply");
	}
	if (g.json) {
		printf("{\"runId\":\"%s\",\"threadId\":", run_id);
		json_t *t = json_string(g.thread);
		json_dumpf(t, stdout, JSON_ENCODE_ANY);
		json_decref(t);
		printf("}\n");
		fflush(stdout);
	} else if (isatty(STDERR_FILENO))
		fprintf(stderr, "%srun %s (thread %s)%s\n", DIM(g.color_err), run_id, g.thread,
			RESET(g.color_err));
	rc = tail_to_end(run_id, -1);
	json_decref(reply);
	return rc;
}

static int
cmd_tail(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"thread", required_argument, NULL, 't'},
	    {"from", required_argument, NULL, 'f'},
	    {"json", no_argument, NULL, 'j'},
	    {},
	};
	long long from = -1;
	int c;
	optind = 0;
	while ((c = getopt_long(argc, argv, "t:f:j", opts, NULL)) >= 0) {
		char *end;
		switch (c) {
		case 't': g.thread = optarg; break;
		case 'f':
			errno = 0;
			from = strtoll(optarg, &end, 10);
			if (errno || *end || from < -1)
				return usage_error("tail: --from wants a seq >= -1, not '%s'",
						   optarg);
			break;
		case 'j': g.json = true; break;
		default: return EXIT_USAGE;
		}
	}
	if (optind != argc - 1)
		return usage_error("%s", "tail: exactly one RUN is required");
	/* --from SEQ: start after SEQ, like lastSeq (the cursor is exclusive). */
	return tail_to_end(argv[optind], from);
}

static void
print_record(json_t *r)
{
	static const char *keys[] = {"runId",	  "threadId",  "status",    "lastSeq",
				     "exitCode",  "harness",   "sandboxId", "startedAt",
				     "updatedAt", "finishedAt"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		json_t *v = json_object_get(r, keys[i]);
		if (!v)
			continue;
		printf("%s%-11s%s ", BOLD(g.color), keys[i], RESET(g.color));
		if (strstr(keys[i], "At")) {
			char buf[64];
			fmt_time(v, buf, sizeof(buf));
			printf("%s\n", buf);
		} else if (strcmp(keys[i], "status") == 0)
			printf("%s%s%s\n", status_color(json_string_value(v)), json_string_value(v),
			       RESET(g.color));
		else if (json_is_string(v))
			printf("%s\n", json_string_value(v));
		else {
			json_dumpf(v, stdout, JSON_ENCODE_ANY | JSON_COMPACT);
			putchar('\n');
		}
	}
	json_t *e = json_object_get(r, "error");
	if (e) {
		const char *m = json_string_value(json_object_get(e, "message"));
		const char *code = json_string_value(json_object_get(e, "code"));
		printf("%s%-11s%s %s%s%s%s\n", BOLD(g.color), "error", RESET(g.color), m ? m : "",
		       code ? " (" : "", code ? code : "", code ? ")" : "");
	}
}

/* Parse [--thread T] [--json] and exactly n positional arguments. */
static int
simple_args(int argc, char **argv, int n, const char *what)
{
	static const struct option opts[] = {
	    {"thread", required_argument, NULL, 't'},
	    {"json", no_argument, NULL, 'j'},
	    {},
	};
	int c;
	optind = 0;
	while ((c = getopt_long(argc, argv, "t:j", opts, NULL)) >= 0) {
		switch (c) {
		case 't': g.thread = optarg; break;
		case 'j': g.json = true; break;
		default: return -1;
		}
	}
	if (argc - optind != n) {
		usage_error("%s", what);
		return -1;
	}
	return optind;
}

/* `show` and `cancel`: one request on a run, the record it answers printed. */
static int
record_command(int argc, char **argv, const char *method, const char *suffix, const char *name,
	       const char *usage)
{
	int i = simple_args(argc, argv, 1, usage);
	if (i < 0)
		return EXIT_USAGE;
	char *rid = urlenc(argv[i]), *tid = urlenc(g.thread), path[1024];
	snprintf(path, sizeof(path), "/runs/%s%s?threadId=%s", rid, suffix, tid);
	free(rid);
	free(tid);
	json_t *rec;
	int rc = call(method, path, NULL, name, &rec, NULL);
	if (rc)
		return rc;
	if (g.json)
		print_json(rec);
	else
		print_record(rec);
	json_decref(rec);
	return 0;
}

static int
cmd_show(int argc, char **argv)
{
	return record_command(argc, argv, "GET", "", "show",
			      "show: RUN is required (show RUN [--thread T])");
}

static int
cmd_cancel(int argc, char **argv)
{
	return record_command(argc, argv, "POST", "/cancel", "cancel",
			      "cancel: RUN is required (cancel RUN [--thread T])");
}

static int
cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"thread", required_argument, NULL, 't'},
	    {"running", no_argument, NULL, 'r'},
	    {"json", no_argument, NULL, 'j'},
	    {},
	};
	bool running = false;
	int c;
	optind = 0;
	while ((c = getopt_long(argc, argv, "t:rj", opts, NULL)) >= 0) {
		switch (c) {
		case 't': g.thread = optarg; break;
		case 'r': running = true; break;
		case 'j': g.json = true; break;
		default: return EXIT_USAGE;
		}
	}
	if (optind != argc)
		return usage_error("ls: unexpected argument '%s'", argv[optind]);
	char *tid = urlenc(g.thread), path[1024];
	snprintf(path, sizeof(path), "/threads/%s/runs%s", tid, running ? "?status=running" : "");
	free(tid);
	json_t *list;
	Response raw;
	int rc = client_request(&g.client, "GET", path, NULL, &raw);
	if (rc < 0)
		return error("%s", g.client.err);
	if (raw.status == 501 || raw.status == 404) {
		/* Older servers: no such route (a thread without runs is an empty list). */
		error("ls: this server cannot list runs (GET /threads/{threadId}/runs: HTTP %d); "
		      "use 'runwarden show RUN'",
		      raw.status);
		response_free(&raw);
		return EXIT_CLI;
	}
	if (raw.status < 200 || raw.status > 299) {
		rc = http_error(&raw, "ls");
		response_free(&raw);
		return rc;
	}
	list = json_loadb(raw.body, raw.len, 0, NULL);
	response_free(&raw);
	if (!list)
		return error("ls: bad JSON from %s", g.client.url);
	if (g.json)
		print_json(list);
	else if (!json_is_array(list))
		rc = error("ls: the server did not answer a list");
	else {
		size_t k;
		json_t *r;
		if (isatty(STDOUT_FILENO))
			printf("%s%-36s  %-9s  %-19s  %s%s\n", BOLD(g.color), "RUN", "STATUS",
			       "STARTED", "EXIT", RESET(g.color));
		json_array_foreach(list, k, r)
		{
			char started[64];
			const char *st = json_string_value(json_object_get(r, "status"));
			json_t *ec = json_object_get(r, "exitCode");
			fmt_time(json_object_get(r, "startedAt"), started, sizeof(started));
			printf("%-36s  %s%-9s%s  %-19s  ",
			       json_string_value(json_object_get(r, "runId")) ?: "?",
			       status_color(st), st ? st : "?", RESET(g.color), started);
			if (json_is_integer(ec))
				printf("%lld\n", (long long)json_integer_value(ec));
			else
				printf("-\n");
		}
	}
	json_decref(list);
	return rc;
}

/* The start of a command on one thread (snapshot, restore): --json, then
 * THREAD and the rest (min..max arguments in all, else usage), and path =
 * /threads/THREAD/suffix. 0, or the exit code. */
static int
thread_cmd_begin(int argc, char **argv, int min, int max, const char *usage, const char *suffix,
		 char *path, size_t len)
{
	static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {}};
	int c;
	optind = 0;
	while ((c = getopt_long(argc, argv, "j", opts, NULL)) >= 0)
		if (c == 'j')
			g.json = true;
		else
			return EXIT_USAGE;
	if (argc - optind < min || argc - optind > max)
		return usage_error("%s", usage);
	char *tid = urlenc(argv[optind]);
	snprintf(path, len, "/threads/%s/%s", tid, suffix);
	free(tid);
	return 0;
}

static int
cmd_snapshot(int argc, char **argv)
{
	char path[1024];
	int rc = thread_cmd_begin(argc, argv, 1, 2, "snapshot: THREAD [LABEL] is required",
				  "snapshots", path, sizeof(path));
	if (rc)
		return rc;
	json_t *body = json_object(), *reply;
	if (argc - optind == 2)
		json_object_set_new(body, "label", json_string(argv[optind + 1]));
	rc = call("POST", path, body, "snapshot", &reply, NULL);
	json_decref(body);
	if (rc)
		return rc;
	if (g.json)
		print_json(reply);
	else {
		const char *id = json_string_value(json_object_get(reply, "snapshotId"));
		if (!id)
			rc = error("snapshot: no snapshotId in the reply");
		else
			printf("%s\n", id);
	}
	json_decref(reply);
	return rc;
}

static int
cmd_restore(int argc, char **argv)
{
	char path[1024];
	int rc = thread_cmd_begin(argc, argv, 2, 2, "restore: THREAD SNAPSHOT-ID are required",
				  "restore", path, sizeof(path));
	if (rc)
		return rc;
	json_t *body = json_pack("{s:s}", "snapshotId", argv[optind + 1]), *reply = NULL;
	Response raw;
	rc = call("POST", path, body, "restore", NULL, &raw);
	json_decref(body);
	if (rc)
		return rc;
	if (g.json)
		printf("%s\n", raw.len ? raw.body : "{}");
	else
		printf("restored thread %s\n", argv[optind]);
	response_free(&raw);
	json_decref(reply);
	return 0;
}

/* ---------- files: the workspace file API ---------- */

static int
read_all(int fd, char **ret, size_t *ret_len)
{
	size_t len = 0, cap = 65536;
	char *buf = malloc(cap);

	if (!buf)
		return -ENOMEM;
	for (;;) {
		if (len == cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb) {
				free(buf);
				return -ENOMEM;
			}
			buf = nb;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int r = -errno;
			free(buf);
			return r;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* The listing of a directory reply: TYPE MODE SIZE NAME per entry. */
static int
print_listing(const Response *r)
{
	json_t *j = json_loadb(r->body, r->len, 0, NULL), *e;
	size_t i;

	if (!json_is_array(json_object_get(j, "entries"))) {
		json_decref(j);
		return error("files: bad JSON from %s", g.client.url);
	}
	if (g.json)
		print_json(j);
	else
		json_array_foreach(json_object_get(j, "entries"), i, e)
		{
			const char *type = json_string_value(json_object_get(e, "type")) ?: "?";
			printf("%-9s %s %12lld  %s%s\n", type,
			       json_string_value(json_object_get(e, "mode")) ?: "?",
			       (long long)json_integer_value(json_object_get(e, "size")),
			       json_string_value(json_object_get(e, "name")) ?: "?",
			       streq(type, "directory") ? "/" : "");
		}
	json_decref(j);
	return 0;
}

static int
cmd_files(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"json", no_argument, NULL, 'j'}, {"mode", required_argument, NULL, 'm'}, {}};
	const char *mode = NULL, *sub, *method = "GET", *ctype = NULL;
	_cleanup_free_ char *data = NULL, *tid = NULL, *rel = NULL, *q = NULL;
	size_t dlen = 0;
	Response r;
	char path[12288];
	int c, rc;

	optind = 0;
	while ((c = getopt_long(argc, argv, "jm:", opts, NULL)) >= 0)
		switch (c) {
		case 'j': g.json = true; break;
		case 'm': mode = optarg; break;
		default: return EXIT_USAGE;
		}
	int n = argc - optind;
	sub = n >= 1 ? argv[optind] : "";
	bool ls = streq(sub, "ls");
	if (!(streq(sub, "get") || streq(sub, "put") || streq(sub, "rm") || streq(sub, "mkdir") ||
	      ls) ||
	    n < (ls ? 2 : 3) || n > (streq(sub, "put") ? 4 : 3))
		return usage_error("%s", "files: get|ls|rm|mkdir THREAD PATH, or put THREAD PATH "
					 "[FILE] (stdin when no FILE), ls THREAD [PATH]");
	tid = urlenc(argv[optind + 1]);
	rel = urlenc(n >= 3 ? argv[optind + 2] : "");
	if (mode)
		q = urlenc(mode);
	if (streq(sub, "put")) {
		int fd = n == 4 && !streq(argv[optind + 3], "-")
			     ? open(argv[optind + 3], O_RDONLY | O_CLOEXEC)
			     : STDIN_FILENO;
		if (fd < 0)
			return error("files put: cannot open '%s': %m", argv[optind + 3]);
		rc = read_all(fd, &data, &dlen);
		if (fd != STDIN_FILENO)
			close(fd);
		if (rc < 0)
			return error("files put: cannot read the content: %s", strerror(-rc));
		method = "PUT";
		ctype = "application/octet-stream";
	} else if (streq(sub, "rm"))
		method = "DELETE";
	else if (streq(sub, "mkdir"))
		method = "POST";
	snprintf(path, sizeof(path), "/threads/%s/files/%s%s%s%s", tid, rel,
		 streq(sub, "mkdir") ? "?op=mkdir" : "",
		 q ? (streq(sub, "mkdir") ? "&mode=" : "?mode=") : "", q ? q : "");
	rc = client_request_raw(&g.client, method, path, ctype, data, dlen, &r);
	if (rc < 0)
		return error("%s", g.client.err);
	if (r.status < 200 || r.status > 299) {
		rc = http_error(&r, "files");
		response_free(&r);
		return rc;
	}
	rc = 0;
	if (streq(sub, "get") || ls) {
		json_t *j = NULL;
		/* a directory answers JSON, a file its bytes (octet-stream) */
		bool dir = r.len > 0 && r.body[0] == '{' &&
			   (j = json_loadb(r.body, r.len, 0, NULL)) &&
			   json_is_array(json_object_get(j, "entries"));
		json_decref(j);
		if (ls && !dir)
			rc = error("files ls: '%s' is not a directory",
				   n >= 3 ? argv[optind + 2] : "");
		else if (dir && (ls || isatty(STDOUT_FILENO) || g.json))
			rc = print_listing(&r);
		else if (fwrite(r.body, 1, r.len, stdout) != r.len || fflush(stdout) != 0)
			rc = error("files get: cannot write the output: %m");
	} else if (g.json && r.len)
		printf("%.*s\n", (int)r.len, r.body);
	response_free(&r);
	return rc;
}

/* ---------- up: the three daemons in the foreground ---------- */

static volatile sig_atomic_t up_stop;

static void
up_signal(int sig)
{
	up_stop = sig;
}

static const char *const up_daemons[] = {"containerd-shim", "coordinatord", "routerd"};

/* What `up` runs: the binaries' directory, the development defaults it wrote
 * and the user's --config layered on them (empty when none). */
typedef struct Up {
	const char *dir;
	char dev_conf[4200];
	char conf_abs[4096];
	pid_t pids[3];
} Up;

/* The development defaults: runtime and state beneath the state directory,
 * the listen address. */
static int
up_write_dev_conf(Up *u, const char *state_abs, const char *listen)
{
	char runtime[4200];

	snprintf(runtime, sizeof(runtime), "%s/runtime", state_abs);
	if (strlen(runtime) > 80) /* Unix socket paths are limited to 107 bytes */
		snprintf(runtime, sizeof(runtime), "%s/runwarden-up-%ld",
			 getenv("XDG_RUNTIME_DIR") ?: "/tmp", (long)getpid());
	snprintf(u->dev_conf, sizeof(u->dev_conf), "%s/dev.conf", state_abs);
	FILE *f = fopen(u->dev_conf, "we");
	if (!f)
		return error("up: cannot write '%s': %m", u->dev_conf);
	fprintf(f,
		"# Written by runwarden up: the development defaults. --config FILE is layered on "
		"top.\n"
		"[runwarden]\nruntime_dir = %s\nstate_dir = %s/state\n\n[routerd]\nlisten = %s\n",
		runtime, state_abs, listen);
	/* ./dev up: the web UI straight from the source tree */
	if (getenv("RUNWARDEN_UI_DIR"))
		fprintf(f, "ui_dir = %s\n", getenv("RUNWARDEN_UI_DIR"));
	fclose(f);
	return 0;
}

/* Every daemon checks the layered configuration before any starts. */
static int
up_check_configs(const Up *u)
{
	for (size_t i = 0; i < 3; i++) {
		char bin[4400];
		snprintf(bin, sizeof(bin), "%s/%s", u->dir, up_daemons[i]);
		char *av[] = {bin,
			      "--config",
			      (char *)u->dev_conf,
			      u->conf_abs[0] ? "--config" : NULL,
			      (char *)u->conf_abs,
			      "--check-config",
			      NULL};
		if (!u->conf_abs[0])
			av[3] = "--check-config", av[4] = NULL;
		pid_t p = fork();
		if (p == 0) {
			int nul = open("/dev/null", O_WRONLY);
			dup2(nul, STDOUT_FILENO);
			execv(bin, av);
			fprintf(stderr, "runwarden: up: cannot run '%s': %m\n", bin);
			_exit(127);
		}
		int st;
		waitpid(p, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			return error("up: %s rejects the configuration", up_daemons[i]);
	}
	return 0;
}

static void
up_spawn(Up *u)
{
	struct sigaction sa = {.sa_handler = up_signal};
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	for (size_t i = 0; i < 3; i++) {
		char bin[4400];
		snprintf(bin, sizeof(bin), "%s/%s", u->dir, up_daemons[i]);
		char *av[] = {bin,	   "--config",
			      u->dev_conf, u->conf_abs[0] ? "--config" : NULL,
			      u->conf_abs, NULL};
		u->pids[i] = fork();
		if (u->pids[i] == 0) {
			signal(SIGINT, SIG_DFL);
			signal(SIGTERM, SIG_DFL);
			signal(SIGPIPE, SIG_DFL);
			execv(bin, av);
			fprintf(stderr, "runwarden: up: cannot run '%s': %m\n", bin);
			_exit(127);
		}
	}
}

static int read_token_file(const char *path, const char **ret);

static int
up_tokens_file_key(void *ud, const char *section, const char *key, const char *value)
{
	char *path = ud;
	if (strcmp(section, "routerd") == 0 && strcmp(key, "tokens_file") == 0)
		snprintf(path, PATH_MAX, "%s", value); /* a later line overrides */
	return 1;
}

/* The probe's token when none was given: routerd, configured with --config's
 * [routerd] tokens_file, answers /readyz only with a token, so take that
 * file's first token as `runwarden --token-file` would. 0 when there is none
 * to take, -1 when the file named cannot be read. */
static int
up_probe_token(const Up *u)
{
	char path[PATH_MAX] = "";

	if (g.token || !u->conf_abs[0])
		return 0;
	if (ini_parse(u->conf_abs, up_tokens_file_key, path) < 0 || !path[0])
		return 0; /* an unreadable or bad file: --check-config said why */
	return read_token_file(path, &g.token);
}

static int
up_cluster_key(void *ud, const char *section, const char *key, const char *value)
{
	bool *cluster = ud;
	if (strcmp(section, "cluster") == 0 && strcmp(key, "nats") == 0)
		*cluster = value[0] != '\0'; /* a later line overrides */
	return 1;
}

/* How long `up` waits for /readyz: 10 s; in cluster mode ([cluster] nats)
 * UP_CLUSTER_READY_S, since the first node ensures the stream and buckets
 * (R3 creates while the servers elect leaders) and a node waits for NATS
 * (issue 35 H: 4 of 16 node starts gave up at 10 s). */
#define UP_READY_S 10
#define UP_CLUSTER_READY_S 120
static int
up_ready_s(const Up *u)
{
	bool cluster = false;
	if (u->conf_abs[0])
		(void)ini_parse(u->conf_abs, up_cluster_key, &cluster);
	return cluster ? UP_CLUSTER_READY_S : UP_READY_S;
}

/* Poll /readyz until it answers 200 (true), a daemon dies or up_ready_s()
 * pass. */
static bool
up_wait_ready(Up *u, const char *url)
{
	Client probe;
	int secs = up_ready_s(u);
	if (client_init(&probe, url, g.token) < 0) {
		error("up: %s", probe.err);
		return false;
	}
	for (int k = 0; k < secs * 20 && !up_stop; k++) {
		Response r;
		if (client_request(&probe, "GET", "/readyz", NULL, &r) == 0) {
			bool ready = r.status == 200;
			response_free(&r);
			if (ready)
				return true;
		}
		for (size_t i = 0; i < 3; i++)
			if (waitpid(u->pids[i], NULL, WNOHANG) == u->pids[i]) {
				u->pids[i] = 0;
				error("up: %s failed to start", up_daemons[i]);
				return false;
			}
		usleep(50 * 1000);
	}
	if (!up_stop)
		error("up: not ready after %d s", secs);
	return false;
}

/* Until Ctrl-C or a daemon's exit: 0, or 1 when a daemon exited. */
static int
up_supervise(Up *u)
{
	for (;;) {
		int st, rc = 0;
		pid_t p = waitpid(-1, &st, 0);
		if (p < 0 && errno == EINTR) {
			if (up_stop)
				return 0;
			continue;
		}
		for (size_t i = 0; i < 3; i++)
			if (p == u->pids[i]) {
				u->pids[i] = 0;
				error("up: %s exited; stopping", up_daemons[i]);
				rc = 1;
			}
		if (rc || p < 0)
			return rc;
	}
}

static void
up_stop_all(Up *u)
{
	for (int i = 2; i >= 0; i--)
		if (u->pids[i] > 0)
			kill(u->pids[i], SIGTERM);
	for (size_t i = 0; i < 3; i++)
		if (u->pids[i] > 0)
			waitpid(u->pids[i], NULL, 0);
}

static int
cmd_up(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"state-dir", required_argument, NULL, 's'},
	    {"config", required_argument, NULL, 'c'},
	    {"build-dir", required_argument, NULL, 'b'},
	    {},
	};
	const char *listen = "127.0.0.1:8787", *state = ".run", *user_conf = NULL;
	char state_abs[4096], url[300];
	Up u = {.dir = getenv("RUNWARDEN_LIBEXECDIR") ?: PKGLIBEXECDIR};
	int c, rc = EXIT_CLI;

	optind = 0;
	while ((c = getopt_long(argc, argv, "l:s:c:b:", opts, NULL)) >= 0) {
		switch (c) {
		case 'l': listen = optarg; break;
		case 's': state = optarg; break;
		case 'c': user_conf = optarg; break;
		case 'b': u.dir = optarg; break;
		default: return EXIT_USAGE;
		}
	}
	if (optind != argc)
		return usage_error("up: unexpected argument '%s'", argv[optind]);
	if (mkdir(state, 0755) < 0 && errno != EEXIST)
		return error("up: cannot create '%s': %m", state);
	if (!realpath(state, state_abs))
		return error("up: '%s': %m", state);
	if (user_conf && !realpath(user_conf, u.conf_abs))
		return error("up: cannot read '%s': %m", user_conf);
	if (up_write_dev_conf(&u, state_abs, listen) != 0)
		return EXIT_CLI;
	if (geteuid() != 0)
		return error("up: containerd-shim needs root for its sandboxes (run with sudo)");
	if (up_check_configs(&u) != 0 || up_probe_token(&u) < 0)
		return EXIT_CLI;
	up_spawn(&u);
	/* a wildcard address is reached (and named in Host, which routerd
	 * checks) as loopback */
	if (strncmp(listen, "0.0.0.0:", 8) == 0)
		snprintf(url, sizeof(url), "http://127.0.0.1:%s", listen + 8);
	else if (strncmp(listen, "[::]:", 5) == 0)
		snprintf(url, sizeof(url), "http://[::1]:%s", listen + 5);
	else
		snprintf(url, sizeof(url), "http://%s", listen);
	if (up_wait_ready(&u, url)) {
		fprintf(stderr, "%s==> runwarden ready on %s (state in %s; Ctrl-C stops)%s\n",
			BOLD(g.color_err), url, state_abs, RESET(g.color_err));
		printf("ready: %s\n", url);
		fflush(stdout);
		rc = up_supervise(&u);
	}
	up_stop_all(&u);
	return up_stop && rc == 0 ? 0 : rc;
}

/* ---------- main ---------- */

/* The token of a token file: the first word of its first line that is not
 * blank or a '#' comment, so routerd's tokens_file works as it is (its first
 * line's token, the scope words after it ignored). Never printed. */
static int
read_token_file(const char *path, const char **ret)
{
	static char tok[1024];
	char line[1024];
	FILE *f = fopen(path, "re");

	if (!f)
		return error("cannot read the token file '%s': %m", path), -1;
	while (fgets(line, sizeof(line), f)) {
		char *t = line + strspn(line, " \t\r\n");
		size_t n = strcspn(t, " \t\r\n");
		if (n == 0 || *t == '#')
			continue;
		memcpy(tok, t, n);
		tok[n] = '\0';
		explicit_bzero(line, sizeof(line));
		fclose(f);
		*ret = tok;
		return 0;
	}
	fclose(f);
	return error("the token file '%s' holds no token", path), -1;
}

static void
help(void)
{
	printf(
	    "runwarden — client of the runwarden HTTP API\n\n"
	    "Usage: runwarden [--url URL] [--json] COMMAND [ARG...]\n\n"
	    "Commands:\n"
	    "  run [--thread T] [--harness H] COMMAND...  start a run, stream its output,\n"
	    "                                exit with its status\n"
	    "  tail RUN [--thread T] [--from SEQ]   follow a run's events after SEQ\n"
	    "  ls [--thread T] [--running]          the runs of a thread, newest first\n"
	    "  show RUN [--thread T]                a run's record\n"
	    "  cancel RUN [--thread T]              stop a run and its processes\n"
	    "  snapshot THREAD [LABEL]              snapshot a thread's workspace\n"
	    "  restore THREAD SNAPSHOT-ID           restore a thread's workspace\n"
	    "  files get|ls|rm|mkdir THREAD PATH    a workspace file's bytes, a directory's\n"
	    "                                       entries, remove, make a directory\n"
	    "  files put THREAD PATH [FILE] [--mode 0644]  write FILE (or stdin) as PATH\n"
	    "  up [--listen ADDR:PORT] [--state-dir DIR] [--config FILE] [--build-dir DIR]\n"
	    "                                       run the three daemons in the foreground\n"
	    "  image [--config FILE]... import NAME SOURCE | ls | inspect NAME | rm NAME | gc\n"
	    "                                       sandbox images on this host (as root;\n"
	    "                                       docs/IMAGES.md): SOURCE an OCI layout dir,\n"
	    "                                       oci-archive, docker-archive or rootfs tar\n"
	    "  cluster status [--config FILE]... [--threads]  cluster mode: the nodes (alive or\n"
	    "                                       lost), their load, the threads they own,\n"
	    "                                       read from NATS with runwarden.conf's "
	    "[cluster]\n\n"
	    "Options:\n"
	    "  -u, --url URL     the server (default $RUNWARDEN_URL or " DEFAULT_URL ")\n"
	    "  -j, --json        print the server's JSON instead of text\n"
	    "  -t, --thread T    thread id (default $RUNWARDEN_THREAD or '" DEFAULT_THREAD "');\n"
	    "                    a run is found only in its own thread (show, tail, cancel)\n"
	    "  -T, --token-file F  read the bearer token from F (default $RUNWARDEN_TOKEN_FILE;\n"
	    "                    its first token; routerd's tokens_file works as it is)\n"
	    "  -h, --help        this help\n"
	    "  -V, --version     the version\n\n"
	    "The token (--token-file, else RUNWARDEN_TOKEN) is sent as 'Authorization: Bearer'.\n"
	    "Exit status: the run's for\n"
	    "run and tail; 125 when the CLI fails (server down, HTTP error); 2 on usage.\n");
}

/* `runwarden image [--config FILE]... COMMAND …`: the image store is the
 * shim's, on this host (docs/IMAGES.md): run `containerd-shim [--config
 * FILE]... image COMMAND …` from the daemons' directory, as root. */
static int
cmd_image(int argc, char **argv)
{
	const char *dir = getenv("RUNWARDEN_LIBEXECDIR") ?: PKGLIBEXECDIR;
	char bin[4200];
	char **av = calloc((size_t)argc + 3, sizeof(char *));
	int n = 0, i = 1;

	if (!av)
		return error("out of memory");
	snprintf(bin, sizeof(bin), "%s/containerd-shim", dir);
	av[n++] = bin;
	for (; i + 1 < argc && (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "-c") == 0);
	     i += 2) {
		av[n++] = "--config";
		av[n++] = argv[i + 1];
	}
	if (i >= argc) {
		free(av);
		return usage_error("image: import NAME SOURCE | ls | inspect NAME | rm NAME | gc");
	}
	av[n++] = "image";
	for (; i < argc; i++)
		av[n++] = argv[i];
	av[n] = NULL;
	execv(bin, av);
	error("image: cannot run '%s': %m", bin);
	free(av);
	return EXIT_CLI;
}

static int
cmd_cluster_status(int argc, char **argv)
{
	return cmd_cluster(argc, argv, g.json);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"url", required_argument, NULL, 'u'},
	    {"json", no_argument, NULL, 'j'},
	    {"thread", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"token-file", required_argument, NULL, 'T'},
	    {},
	};
	static const struct {
		const char *name;
		int (*fn)(int, char **);
		bool needs_client;
	} cmds[] = {
	    {"run", cmd_run, true},	    {"tail", cmd_tail, true},
	    {"ls", cmd_ls, true},	    {"show", cmd_show, true},
	    {"cancel", cmd_cancel, true},   {"snapshot", cmd_snapshot, true},
	    {"restore", cmd_restore, true}, {"files", cmd_files, true},
	    {"up", cmd_up, false},	    {"cluster", cmd_cluster_status, false},
	    {"image", cmd_image, false},
	};
	const char *url = getenv("RUNWARDEN_URL");
	const char *token_file = getenv("RUNWARDEN_TOKEN_FILE");
	int c;

	g.thread = getenv("RUNWARDEN_THREAD");
	if (!g.thread || !*g.thread)
		g.thread = DEFAULT_THREAD;
	bool no_color = getenv("NO_COLOR") && *getenv("NO_COLOR");
	const char *term = getenv("TERM");
	no_color = no_color || (term && strcmp(term, "dumb") == 0);
	g.color = !no_color && isatty(STDOUT_FILENO);
	g.color_err = !no_color && isatty(STDERR_FILENO);

	while ((c = getopt_long(argc, argv, "+u:jt:T:hV", opts, NULL)) >= 0) {
		switch (c) {
		case 'u': url = optarg; break;
		case 'j': g.json = true; break;
		case 't': g.thread = optarg; break;
		case 'T': token_file = optarg; break;
		case 'h': help(); return 0;
		case 'V': printf("runwarden %s\n", PACKAGE_VERSION); return 0;
		default: fprintf(stderr, "Try 'runwarden --help'.\n"); return EXIT_USAGE;
		}
	}
	if (!url || !*url)
		url = DEFAULT_URL;
	g.token = getenv("RUNWARDEN_TOKEN");
	if (token_file && *token_file && read_token_file(token_file, &g.token) < 0)
		return EXIT_CLI;
	if (optind >= argc) {
		help();
		return EXIT_USAGE;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(argv[optind], cmds[i].name) != 0)
			continue;
		if (cmds[i].needs_client && client_init(&g.client, url, g.token) < 0)
			return error("%s", g.client.err);
		return cmds[i].fn(argc - optind, argv + optind);
	}
	return usage_error("unknown command '%s'", argv[optind]);
}
