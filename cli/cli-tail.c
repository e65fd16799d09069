/* SPDX-License-Identifier: MIT */
/*
 * cli-tail.c — following a run over its WebSocket stream to its end:
 * printing its output, a spinner while it is queued, reconnecting after drops
 * with lastSeq, and the run's exit status as the CLI's (run, tail).
 */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

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
	if (cli.json) {
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
		if (!cli.json) {
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
	char *rid = urlenc(run_id), *tid = urlenc(cli.thread);
	unsigned delay_ms = 100;
	int failures = 0, same = 0, rc = EXIT_CLI;
	int last_code = 0;
	long long last_at = -2;
	char last_reason[128] = "";

	t->spinner = !cli.json && isatty(STDERR_FILENO);
	for (;;) {
		char path[1024], reason[128];
		Response http;
		snprintf(path, sizeof(path), "/runs/%s/stream?threadId=%s&lastSeq=%lld", rid, tid,
			 t->last_seq);
		int r =
		    client_ws_run(&cli.client, path, tail_text, t, &http, reason, sizeof(reason));
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
				rc = error("%s", cli.client.err);
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
	if (cli.json)
		return;
	const char *st = json_string_value(json_object_get(record, "status"));
	if (st && strcmp(st, "completed") == 0)
		return;
	const char *msg =
	    json_string_value(json_object_get(json_object_get(record, "error"), "message"));
	fprintf(stderr, "%srunwarden: run %s%s%s%s\n", RED(cli.color_err), st ? st : "ended",
		msg ? ": " : "", msg ? msg : "", RESET(cli.color_err));
}

/* Tail run_id after seq from to its end, report how it ended; the run's exit
 * status as ours (or the tail's error). */
int
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
