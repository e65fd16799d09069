/* SPDX-License-Identifier: MIT */
/*
 * test-runlog.c — daemons/coordinatord/runlog.c on a real LMDB environment.
 *
 * Every test gets a fresh environment in a mkdtemp() directory (sync off, for
 * speed, except where durability across reopen is the point). The contract
 * under test is the one in runlog.h: gap-free seqs, one transaction per
 * append, first terminal status wins, failures leave nothing half-written.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "runlog.h"

#define RUN_A "00000000-0000-4000-8000-00000000000a"
#define RUN_B "00000000-0000-4000-8000-00000000000b"
#define RUN_C "00000000-0000-4000-8000-00000000000c"
#define RUN_X "00000000-0000-4000-8000-0000000000ff" /* never created */

typedef struct Fix {
	char dir[64];
	RunLog *l;
} Fix;

static int
open_log(Fix *f, size_t map_size, bool sync)
{
	RunLogOptions o = {.map_size = map_size, .sync = sync};
	return runlog_open(f->dir, &o, &f->l);
}

static int
setup(void **state)
{
	Fix *f = calloc(1, sizeof(*f));
	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/test-runlog-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	if (open_log(f, 16 << 20, false) < 0)
		return -1;
	*state = f;
	return 0;
}

static void
rm_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char p[PATH_MAX];

	if (!d)
		return;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		unlink(p);
	}
	closedir(d);
	rmdir(dir);
}

static int
teardown(void **state)
{
	Fix *f = *state;
	runlog_free(f->l);
	rm_dir(f->dir);
	free(f);
	return 0;
}

static int64_t
rec_int(const json_t *rec, const char *key)
{
	const json_t *v = json_object_get(rec, key);
	if (!json_is_integer(v))
		fail_msg("record field %s is not an integer", key);
	return json_integer_value(v);
}

static const char *
rec_str(const json_t *rec, const char *key)
{
	const char *s = json_string_value(json_object_get(rec, key));
	if (!s)
		fail_msg("record field %s is not a string", key);
	return s;
}

static int64_t
last_seq(RunLog *l, const char *run_id)
{
	json_t *rec = NULL;
	assert_int_equal(runlog_get(l, run_id, &rec), 0);
	int64_t v = rec_int(rec, "lastSeq");
	json_decref(rec);
	return v;
}

static void
append_ok(RunLog *l, const char *run_id, const char *chunk, int64_t now, int64_t want_seq)
{
	int64_t seq = -99;
	json_t *rec = NULL;
	assert_int_equal(runlog_append(l, run_id, chunk, strlen(chunk), now, &seq, &rec), 0);
	assert_int_equal(seq, want_seq);
	assert_non_null(rec);
	assert_int_equal(rec_int(rec, "lastSeq"), want_seq);
	assert_int_equal(rec_int(rec, "updatedAt"), now);
	json_decref(rec);
}

static void
test_runlog_create_record(void **state)
{
	Fix *f = *state;
	bool created = false;
	json_t *rec = NULL;

	assert_int_equal(runlog_create(f->l, RUN_A, "thread-1", "shell", 1000, &created), 0);
	assert_true(created);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_string_equal(rec_str(rec, "runId"), RUN_A);
	assert_string_equal(rec_str(rec, "threadId"), "thread-1");
	assert_string_equal(rec_str(rec, "status"), "running");
	assert_string_equal(rec_str(rec, "harness"), "shell");
	assert_int_equal(rec_int(rec, "lastSeq"), -1);
	assert_int_equal(rec_int(rec, "startedAt"), 1000);
	assert_int_equal(rec_int(rec, "updatedAt"), 1000);
	assert_null(json_object_get(rec, "finishedAt"));
	json_decref(rec);

	/* no harness: no key */
	assert_int_equal(runlog_create(f->l, RUN_B, "thread-1", NULL, 5, NULL), 0);
	assert_int_equal(runlog_get(f->l, RUN_B, &rec), 0);
	assert_null(json_object_get(rec, "harness"));
	json_decref(rec);

	/* bad ids */
	assert_int_equal(runlog_create(f->l, "short", "t", NULL, 1, NULL), -EINVAL);
	assert_int_equal(runlog_create(f->l, RUN_A "x", "t", NULL, 1, NULL), -EINVAL);
	assert_int_equal(runlog_create(f->l, RUN_C, NULL, NULL, 1, NULL), -EINVAL);
	char long_thread[THREAD_ID_MAX + 2];
	memset(long_thread, 't', sizeof(long_thread) - 1);
	long_thread[sizeof(long_thread) - 1] = '\0';
	assert_int_equal(runlog_create(f->l, RUN_C, long_thread, NULL, 1, NULL), -EINVAL);
	long_thread[THREAD_ID_MAX] = '\0'; /* exactly the maximum is fine */
	assert_int_equal(runlog_create(f->l, RUN_C, long_thread, NULL, 1, NULL), 0);

	assert_int_equal(runlog_get(f->l, RUN_X, &rec), -ENOENT);
	assert_int_equal(runlog_get(f->l, "nope", &rec), -ENOENT);
}

static void
test_runlog_create_is_idempotent(void **state)
{
	Fix *f = *state;
	bool created = true;
	json_t *before = NULL, *after = NULL;

	assert_int_equal(runlog_create(f->l, RUN_A, "thread-1", "shell", 1000, NULL), 0);
	append_ok(f->l, RUN_A, "{\"type\":\"RUN_STARTED\"}", 1500, 0);
	assert_int_equal(runlog_get(f->l, RUN_A, &before), 0);

	assert_int_equal(runlog_create(f->l, RUN_A, "thread-2", "other", 9999, &created), 0);
	assert_false(created);
	assert_int_equal(runlog_get(f->l, RUN_A, &after), 0);
	assert_true(json_equal(before, after));
	assert_string_equal(rec_str(after, "threadId"), "thread-1");
	assert_int_equal(rec_int(after, "lastSeq"), 0);
	json_decref(before);
	json_decref(after);
}

static void
test_runlog_append_seqs_gap_free(void **state)
{
	Fix *f = *state;

	assert_int_equal(runlog_create(f->l, RUN_A, "t", NULL, 100, NULL), 0);
	assert_int_equal(runlog_create(f->l, RUN_B, "t", NULL, 100, NULL), 0);
	append_ok(f->l, RUN_A, "{\"n\":0}", 101, 0);
	append_ok(f->l, RUN_B, "{\"b\":0}", 102, 0); /* seqs are per run */
	append_ok(f->l, RUN_A, "{\"n\":1}", 103, 1);
	append_ok(f->l, RUN_A, "{\"n\":2}", 104, 2);
	append_ok(f->l, RUN_B, "{\"b\":1}", 105, 1);

	json_t *rec = NULL;
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_int_equal(rec_int(rec, "lastSeq"), 2);
	assert_int_equal(rec_int(rec, "updatedAt"), 104);
	assert_int_equal(rec_int(rec, "startedAt"), 100);
	assert_string_equal(rec_str(rec, "status"), "running");
	json_decref(rec);

	/* optional outputs may be NULL */
	assert_int_equal(runlog_append(f->l, RUN_A, "{}", 2, 106, NULL, NULL), 0);
	assert_int_equal(last_seq(f->l, RUN_A), 3);
}

static void
assert_events(const RunLogEvents *ev, int64_t first, size_t n, const char *const *texts)
{
	assert_int_equal(ev->n, n);
	if (n > 0)
		assert_int_equal(ev->first_seq, first);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(ev->texts[i], texts[i]);
		assert_int_equal(ev->lens[i], strlen(texts[i]));
	}
}

static void
test_runlog_read_cursor(void **state)
{
	Fix *f = *state;
	static const char *const t[] = {"{\"n\":0}", "{\"n\":1}", "{\"n\":2}", "{\"n\":3}"};
	RunLogEvents ev = {0};
	json_t *rec = NULL;

	assert_int_equal(runlog_create(f->l, RUN_A, "t", NULL, 1, NULL), 0);
	/* a neighbouring run's events must not leak into A's reads */
	assert_int_equal(runlog_create(f->l, RUN_B, "t", NULL, 1, NULL), 0);
	append_ok(f->l, RUN_B, "{\"other\":0}", 2, 0);

	/* empty run */
	assert_int_equal(runlog_read(f->l, RUN_A, -1, 100, &ev, &rec), 0);
	assert_int_equal(ev.n, 0);
	assert_int_equal(rec_int(rec, "lastSeq"), -1);
	json_decref(rec);
	runlog_events_done(&ev);

	for (int i = 0; i < 4; i++)
		append_ok(f->l, RUN_A, t[i], 10 + i, i);
	append_ok(f->l, RUN_B, "{\"other\":1}", 20, 1);

	assert_int_equal(runlog_read(f->l, RUN_A, -1, 100, &ev, &rec), 0);
	assert_events(&ev, 0, 4, t);
	assert_int_equal(rec_int(rec, "lastSeq"), 3);
	json_decref(rec);
	runlog_events_done(&ev);
	assert_int_equal(ev.n, 0);
	assert_null(ev.texts);

	/* exclusive cursor: from 1 gives 2, 3 */
	assert_int_equal(runlog_read(f->l, RUN_A, 1, 100, &ev, NULL), 0);
	assert_events(&ev, 2, 2, t + 2);
	runlog_events_done(&ev);

	/* max limits */
	assert_int_equal(runlog_read(f->l, RUN_A, -1, 2, &ev, NULL), 0);
	assert_events(&ev, 0, 2, t);
	runlog_events_done(&ev);
	assert_int_equal(runlog_read(f->l, RUN_A, -1, 3, &ev, NULL), 0); /* one short of all */
	assert_events(&ev, 0, 3, t);
	runlog_events_done(&ev);
	assert_int_equal(runlog_read(f->l, RUN_A, 0, 1, &ev, NULL), 0);
	assert_events(&ev, 1, 1, t + 1);
	runlog_events_done(&ev);

	/* at or past the end: nothing, not an error */
	assert_int_equal(runlog_read(f->l, RUN_A, 3, 100, &ev, NULL), 0);
	assert_int_equal(ev.n, 0);
	runlog_events_done(&ev);
	assert_int_equal(runlog_read(f->l, RUN_A, 50, 100, &ev, NULL), 0);
	assert_int_equal(ev.n, 0);
	runlog_events_done(&ev);
	assert_int_equal(runlog_read(f->l, RUN_A, -1, 0, &ev, NULL), 0);
	assert_int_equal(ev.n, 0);
	runlog_events_done(&ev);

	/* B is untouched by A */
	static const char *const tb[] = {"{\"other\":0}", "{\"other\":1}"};
	assert_int_equal(runlog_read(f->l, RUN_B, -1, 100, &ev, NULL), 0);
	assert_events(&ev, 0, 2, tb);
	runlog_events_done(&ev);

	/* errors */
	assert_int_equal(runlog_read(f->l, RUN_A, -2, 100, &ev, NULL), -EINVAL);
	assert_int_equal(runlog_read(f->l, RUN_X, -1, 100, &ev, NULL), -ENOENT);
	assert_int_equal(runlog_read(f->l, "short", -1, 100, &ev, NULL), -ENOENT);
}

static void
test_runlog_append_unknown_run(void **state)
{
	Fix *f = *state;
	int64_t seq = 77;

	assert_int_equal(runlog_append(f->l, RUN_X, "{}", 2, 1, &seq, NULL), -ENOENT);
	assert_int_equal(runlog_append(f->l, "not-a-uuid", "{}", 2, 1, &seq, NULL), -ENOENT);
	assert_int_equal(runlog_append_finish(f->l, RUN_X, "{}", 2, "failed", NULL, 1, &seq, NULL),
			 -ENOENT);
	assert_int_equal(seq, 77);
	/* and nothing was created on the way */
	json_t *rec = NULL;
	assert_int_equal(runlog_get(f->l, RUN_X, &rec), -ENOENT);
}

static void
test_runlog_append_finish(void **state)
{
	Fix *f = *state;
	int64_t seq = -1;
	json_t *rec = NULL;
	RunLogEvents ev = {0};
	static const char fin[] = "{\"type\":\"RUN_ERROR\",\"message\":\"boom\"}";

	assert_int_equal(runlog_create(f->l, RUN_A, "t", NULL, 10, NULL), 0);
	append_ok(f->l, RUN_A, "{\"n\":0}", 11, 0);

	/* not a terminal status */
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_A, "{}", 2, "running", NULL, 12, &seq, NULL), -EINVAL);
	assert_int_equal(runlog_append_finish(f->l, RUN_A, "{}", 2, NULL, NULL, 12, &seq, NULL),
			 -EINVAL);
	assert_int_equal(last_seq(f->l, RUN_A), 0);

	json_t *fields = json_pack("{s:s, s:i}", "error", "boom", "exitCode", 3);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_A, fin, strlen(fin), "failed", fields, 20, &seq, &rec),
	    0);
	json_decref(fields);
	assert_int_equal(seq, 1);
	assert_string_equal(rec_str(rec, "status"), "failed");
	assert_int_equal(rec_int(rec, "finishedAt"), 20);
	assert_int_equal(rec_int(rec, "updatedAt"), 20);
	assert_int_equal(rec_int(rec, "lastSeq"), 1);
	assert_string_equal(rec_str(rec, "error"), "boom");
	assert_int_equal(rec_int(rec, "exitCode"), 3);
	json_decref(rec);

	/* the final event is there, at the record's lastSeq, in the same snapshot */
	assert_int_equal(runlog_read(f->l, RUN_A, -1, 10, &ev, &rec), 0);
	assert_int_equal(ev.n, 2);
	assert_string_equal(ev.texts[1], fin);
	assert_int_equal(rec_int(rec, "lastSeq"), ev.first_seq + (int64_t)ev.n - 1);
	assert_string_equal(rec_str(rec, "status"), "failed");
	json_decref(rec);
	runlog_events_done(&ev);

	/* durable view through runlog_get too */
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_string_equal(rec_str(rec, "status"), "failed");
	json_decref(rec);

	/* the other terminal statuses are accepted, NULL fields allowed */
	assert_int_equal(runlog_create(f->l, RUN_B, "t", NULL, 10, NULL), 0);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_B, "{}", 2, "completed", NULL, 30, &seq, NULL), 0);
	assert_int_equal(seq, 0);
	assert_int_equal(runlog_create(f->l, RUN_C, "t", NULL, 10, NULL), 0);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_C, "{}", 2, "aborted", NULL, 30, NULL, NULL), 0);
	assert_int_equal(runlog_get(f->l, RUN_C, &rec), 0);
	assert_string_equal(rec_str(rec, "status"), "aborted");
	json_decref(rec);
}

static void
test_runlog_append_after_terminal_is_stale(void **state)
{
	Fix *f = *state;
	int64_t seq = 55;
	json_t *rec = NULL, *before = NULL;
	RunLogEvents ev = {0};

	assert_int_equal(runlog_create(f->l, RUN_A, "t", NULL, 10, NULL), 0);
	append_ok(f->l, RUN_A, "{\"n\":0}", 11, 0);
	json_t *fields = json_pack("{s:s}", "error", "first");
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_A, "{\"fin\":1}", 9, "failed", fields, 12, NULL, NULL),
	    0);
	json_decref(fields);
	assert_int_equal(runlog_get(f->l, RUN_A, &before), 0);

	/* a plain append */
	rec = (json_t *)0x1;
	assert_int_equal(runlog_append(f->l, RUN_A, "{\"late\":1}", 10, 13, &seq, &rec), -ESTALE);
	assert_int_equal(seq, 55);
	assert_ptr_equal(rec, (json_t *)0x1);
	assert_int_equal(last_seq(f->l, RUN_A), 1);

	/* a second finish: the first status and error stay */
	fields = json_pack("{s:s}", "error", "second");
	assert_int_equal(runlog_append_finish(f->l, RUN_A, "{\"fin\":2}", 9, "completed", fields,
					      14, &seq, NULL),
			 -ESTALE);
	json_decref(fields);
	assert_int_equal(seq, 55);

	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_true(json_equal(rec, before));
	assert_string_equal(rec_str(rec, "status"), "failed");
	assert_string_equal(rec_str(rec, "error"), "first");
	assert_int_equal(rec_int(rec, "lastSeq"), 1);
	assert_int_equal(rec_int(rec, "updatedAt"), 12);
	json_decref(rec);
	json_decref(before);

	/* nothing was written past the final event */
	assert_int_equal(runlog_read(f->l, RUN_A, -1, 100, &ev, NULL), 0);
	assert_int_equal(ev.n, 2);
	assert_string_equal(ev.texts[1], "{\"fin\":1}");
	runlog_events_done(&ev);
}

/* runlog_get_text: the stored text, the thread check, and a served-from-memory
 * copy never outliving a write (every commit moves LMDB's transaction id). */
static void
test_runlog_get_text_follows_every_write(void **state)
{
	Fix *f = *state;
	const char *t = NULL;
	json_t *fields;

	assert_int_equal(runlog_get_text(f->l, RUN_A, NULL, &t), -ENOENT);
	assert_int_equal(runlog_create(f->l, RUN_A, "t", "shell", 10, NULL), 0);
	assert_int_equal(runlog_get_text(f->l, RUN_A, "t", &t), 0);
	assert_non_null(strstr(t, "\"lastSeq\":-1"));
	/* another thread's run is not there; nor is it with a thread that
	 * merely starts like the owner */
	assert_int_equal(runlog_get_text(f->l, RUN_A, "u", &t), -ENOENT);
	assert_int_equal(runlog_get_text(f->l, RUN_A, "tt", &t), -ENOENT);
	assert_int_equal(runlog_get_text(f->l, RUN_A, NULL, &t), 0); /* any thread */
	/* served again (the same text) until a write commits */
	assert_int_equal(runlog_get_text(f->l, RUN_A, "t", &t), 0);
	assert_non_null(strstr(t, "\"lastSeq\":-1"));
	append_ok(f->l, RUN_A, "{}", 11, 0);
	assert_int_equal(runlog_get_text(f->l, RUN_A, "t", &t), 0);
	assert_non_null(strstr(t, "\"lastSeq\":0"));
	fields = json_pack("{s:s}", "sandboxId", "sb-9");
	assert_int_equal(runlog_update(f->l, RUN_A, fields, 20, NULL), 0);
	json_decref(fields);
	assert_int_equal(runlog_get_text(f->l, RUN_A, "t", &t), 0);
	assert_non_null(strstr(t, "\"sandboxId\":\"sb-9\""));
	/* a write to another run also moves the transaction id: re-read, same text */
	assert_int_equal(runlog_create(f->l, RUN_B, "t2", "shell", 30, NULL), 0);
	assert_int_equal(runlog_get_text(f->l, RUN_A, "t", &t), 0);
	assert_non_null(strstr(t, "\"sandboxId\":\"sb-9\""));
	assert_int_equal(runlog_get_text(f->l, RUN_B, "t", &t), -ENOENT);
	assert_int_equal(runlog_get_text(f->l, RUN_B, "t2", &t), 0);
	assert_non_null(strstr(t, "\"threadId\":\"t2\""));
	assert_int_equal(runlog_get_text(f->l, "not-a-run-id", NULL, &t), -ENOENT);
}

static void
test_runlog_update(void **state)
{
	Fix *f = *state;
	json_t *rec = NULL, *fields;

	assert_int_equal(runlog_create(f->l, RUN_A, "t", "shell", 10, NULL), 0);
	append_ok(f->l, RUN_A, "{}", 11, 0);

	fields = json_pack("{s:s, s:i}", "sandboxId", "sb-1", "pid", 42);
	assert_int_equal(runlog_update(f->l, RUN_A, fields, 20, &rec), 0);
	json_decref(fields);
	assert_string_equal(rec_str(rec, "sandboxId"), "sb-1");
	assert_int_equal(rec_int(rec, "pid"), 42);
	assert_int_equal(rec_int(rec, "updatedAt"), 20);
	assert_int_equal(rec_int(rec, "lastSeq"), 0);
	assert_string_equal(rec_str(rec, "harness"), "shell");
	json_decref(rec);

	/* merge, not replace: a second update keeps the first's keys */
	fields = json_pack("{s:s}", "sandboxId", "sb-2");
	assert_int_equal(runlog_update(f->l, RUN_A, fields, 21, NULL), 0);
	json_decref(fields);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_string_equal(rec_str(rec, "sandboxId"), "sb-2");
	assert_int_equal(rec_int(rec, "pid"), 42);
	assert_int_equal(rec_int(rec, "updatedAt"), 21);
	json_decref(rec);

	/* terminal: a no-op that still succeeds and returns the record */
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_A, "{}", 2, "completed", NULL, 30, NULL, NULL), 0);
	json_t *before = NULL;
	assert_int_equal(runlog_get(f->l, RUN_A, &before), 0);
	fields = json_pack("{s:s, s:s}", "sandboxId", "sb-3", "status", "running");
	rec = NULL;
	assert_int_equal(runlog_update(f->l, RUN_A, fields, 40, &rec), 0);
	json_decref(fields);
	assert_non_null(rec);
	assert_true(json_equal(rec, before));
	json_decref(rec);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_true(json_equal(rec, before));
	assert_string_equal(rec_str(rec, "status"), "completed");
	assert_int_equal(rec_int(rec, "updatedAt"), 30);
	json_decref(rec);
	json_decref(before);

	fields = json_object();
	assert_int_equal(runlog_update(f->l, RUN_X, fields, 1, NULL), -ENOENT);
	json_decref(fields);
}

static void
test_runlog_survives_reopen(void **state)
{
	Fix *f = *state;
	RunLogEvents ev = {0};
	json_t *rec = NULL;
	char id[RUN_ID_LEN + 1];

	/* this one is about durability: reopen with sync on */
	runlog_free(f->l);
	assert_int_equal(open_log(f, 16 << 20, true), 0);

	assert_int_equal(runlog_create(f->l, RUN_A, "thread-r", "shell", 10, NULL), 0);
	append_ok(f->l, RUN_A, "{\"n\":0}", 11, 0);
	append_ok(f->l, RUN_A, "{\"n\":1}", 12, 1);
	assert_int_equal(runlog_create(f->l, RUN_B, "thread-r", NULL, 10, NULL), 0);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_B, "{\"end\":1}", 9, "completed", NULL, 13, NULL, NULL),
	    0);
	assert_int_equal(runlog_idem_put(f->l, "thread-r", "key-1", RUN_A), 0);

	f->l = runlog_free(f->l);
	assert_null(f->l);
	assert_int_equal(open_log(f, 16 << 20, true), 0);

	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_int_equal(rec_int(rec, "lastSeq"), 1);
	assert_string_equal(rec_str(rec, "threadId"), "thread-r");
	json_decref(rec);
	assert_int_equal(runlog_get(f->l, RUN_B, &rec), 0);
	assert_string_equal(rec_str(rec, "status"), "completed");
	json_decref(rec);
	static const char *const t[] = {"{\"n\":0}", "{\"n\":1}"};
	assert_int_equal(runlog_read(f->l, RUN_A, -1, 10, &ev, NULL), 0);
	assert_events(&ev, 0, 2, t);
	runlog_events_done(&ev);
	assert_int_equal(runlog_idem_get(f->l, "thread-r", "key-1", id), 0);
	assert_string_equal(id, RUN_A);

	/* appends carry on from the stored lastSeq */
	append_ok(f->l, RUN_A, "{\"n\":2}", 14, 2);
	/* and the terminal state survived too */
	assert_int_equal(runlog_append(f->l, RUN_B, "{}", 2, 15, NULL, NULL), -ESTALE);
}

static void
test_runlog_idempotency(void **state)
{
	Fix *f = *state;
	char id[RUN_ID_LEN + 1] = "unchanged";

	assert_int_equal(runlog_idem_get(f->l, "thread-1", "k", id), -ENOENT);
	assert_string_equal(id, "unchanged");
	assert_int_equal(runlog_idem_put(f->l, "thread-1", "k", RUN_A), 0);
	assert_int_equal(runlog_idem_get(f->l, "thread-1", "k", id), 0);
	assert_string_equal(id, RUN_A);

	/* keys are per thread, and the thread/key split is unambiguous */
	assert_int_equal(runlog_idem_get(f->l, "thread-2", "k", id), -ENOENT);
	assert_int_equal(runlog_idem_get(f->l, "thread-1", "k2", id), -ENOENT);
	assert_int_equal(runlog_idem_get(f->l, "thread-1k", "", id), -ENOENT);
	assert_int_equal(runlog_idem_put(f->l, "thread-2", "k", RUN_B), 0);
	assert_int_equal(runlog_idem_get(f->l, "thread-2", "k", id), 0);
	assert_string_equal(id, RUN_B);
	assert_int_equal(runlog_idem_get(f->l, "thread-1", "k", id), 0);
	assert_string_equal(id, RUN_A);

	/* an oversized key is refused, not truncated */
	char big[600];
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(runlog_idem_put(f->l, "thread-1", big, RUN_C), -E2BIG);
	assert_int_equal(runlog_idem_get(f->l, "thread-1", big, id), -E2BIG);
}

/* POST /chat: the client's run id is an alias of the run in its thread
 * (issue 30 item 8) and the input sits beside the record, both committed with
 * the run and pruned with it. Another thread's use of the same id is its own
 * run: no conflict, and not seen from the first thread. */
static void
test_runlog_alias_and_input_commit_and_prune_with_the_run(void **state)
{
	Fix *f = *state;
	char id[RUN_ID_LEN + 1] = RUN_A, got[RUN_ID_LEN + 1];
	char cursor[RUN_ID_LEN + 1] = "";
	char *input = NULL;
	bool created = false;
	size_t n = 0;
	char *scope_a[] = {"a-*", NULL}, *scope_b[] = {"b-*", NULL}, *scope_c[] = {"c", NULL};

	assert_int_equal(runlog_alias_get(f->l, "run-client-1", "a-1", got), -ENOENT);
	assert_int_equal(runlog_create_aliased(f->l, id, "a-1", "shell", NULL, 100, "run-client-1",
					       "[{\"role\":\"user\",\"content\":\"hi\"}]",
					       &created),
			 0);
	assert_true(created);
	assert_int_equal(runlog_alias_get(f->l, "run-client-1", "a-1", got), 0);
	assert_string_equal(got, RUN_A);
	assert_int_equal(runlog_input_get(f->l, RUN_A, &input), 0);
	assert_string_equal(input, "[{\"role\":\"user\",\"content\":\"hi\"}]");
	free(input);
	input = NULL;
	/* the retry in the same thread: the alias names the run, nothing new */
	snprintf(id, sizeof(id), "%s", RUN_B);
	assert_int_equal(runlog_create_aliased(f->l, id, "a-1", "shell", NULL, 150, "run-client-1",
					       NULL, &created),
			 0);
	assert_false(created);
	assert_string_equal(id, RUN_A);
	/* another thread: a run of its own under the same id */
	snprintf(id, sizeof(id), "%s", RUN_B);
	assert_int_equal(runlog_create_aliased(f->l, id, "b-1", "shell", NULL, 200, "run-client-1",
					       NULL, &created),
			 0);
	assert_true(created);
	assert_string_equal(id, RUN_B);
	assert_int_equal(runlog_alias_get(f->l, "run-client-1", "b-1", got), 0);
	assert_string_equal(got, RUN_B);
	assert_int_equal(runlog_alias_get(f->l, "run-client-1", "a-1", got), 0);
	assert_string_equal(got, RUN_A);
	assert_int_equal(runlog_alias_get(f->l, "run-client-1", "a-2", got), -ENOENT);
	/* a join by the id alone: the newest in the caller's scope */
	assert_int_equal(runlog_alias_find(f->l, "run-client-1", scope_a, got), 0);
	assert_string_equal(got, RUN_A);
	assert_int_equal(runlog_alias_find(f->l, "run-client-1", scope_b, got), 0);
	assert_string_equal(got, RUN_B);
	assert_int_equal(runlog_alias_find(f->l, "run-client-1", NULL, got), 0);
	assert_string_equal(got, RUN_B);
	assert_int_equal(runlog_alias_find(f->l, "run-client-1", scope_c, got), -ENOENT);
	assert_int_equal(runlog_alias_find(f->l, "run-client-", NULL, got), -ENOENT);
	/* not an Idempotency-Key of the thread */
	assert_int_equal(runlog_idem_get(f->l, "a-1", "run-client-1", got), -ENOENT);
	assert_int_equal(runlog_create_aliased(f->l, id, "a-1", NULL, NULL, 1, "", NULL, &created),
			 -EINVAL);
	/* a key of an older log (one namespace): read for its own thread only;
	 * another thread takes the id anew */
	snprintf(id, sizeof(id), "%s", RUN_C);
	assert_int_equal(runlog_create_keyed(f->l, id, "a-2", "shell", NULL, 120, NULL, &created),
			 0);
	assert_int_equal(runlog_idem_put(f->l, "", "old-client-1", RUN_C), 0);
	assert_int_equal(runlog_alias_get(f->l, "old-client-1", "a-2", got), 0);
	assert_string_equal(got, RUN_C);
	assert_int_equal(runlog_alias_get(f->l, "old-client-1", "b-1", got), -ENOENT);
	assert_int_equal(runlog_alias_find(f->l, "old-client-1", scope_b, got), -ENOENT);
	assert_int_equal(runlog_alias_find(f->l, "old-client-1", scope_a, got), 0);
	snprintf(id, sizeof(id), "%s", RUN_C);
	assert_int_equal(runlog_create_aliased(f->l, id, "a-2", "shell", NULL, 250, "old-client-1",
					       NULL, &created),
			 0);
	assert_false(created);
	snprintf(id, sizeof(id), "%s", RUN_X);
	assert_int_equal(runlog_create_aliased(f->l, id, "b-1", "shell", NULL, 250, "old-client-1",
					       NULL, &created),
			 0);
	assert_true(created);
	assert_string_equal(id, RUN_X);
	/* pruned with the run */
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_A, "{}", 2, "completed", NULL, 300, NULL, NULL), 0);
	assert_int_equal(runlog_prune(f->l, 500, 16, 100, cursor, &n, NULL, NULL), 0);
	assert_int_equal(n, 1);
	assert_int_equal(runlog_alias_get(f->l, "run-client-1", "a-1", got), -ENOENT);
	assert_int_equal(runlog_alias_get(f->l, "run-client-1", "b-1", got), 0);
	assert_int_equal(runlog_input_get(f->l, RUN_A, &input), -ENOENT);
}

typedef struct Seen {
	int n;
	char ids[8][RUN_ID_LEN + 1];
	bool bad_record;
} Seen;

static void
collect(const char *run_id, json_t *record, void *ud)
{
	Seen *s = ud;
	if (s->n < 8)
		snprintf(s->ids[s->n], sizeof(s->ids[0]), "%s", run_id);
	s->n++;
	const char *rid = json_string_value(json_object_get(record, "runId"));
	const char *st = json_string_value(json_object_get(record, "status"));
	if (!rid || strcmp(rid, run_id) != 0 || !st || run_status_terminal(st))
		s->bad_record = true;
}

static bool
seen_has(const Seen *s, const char *id)
{
	for (int i = 0; i < s->n && i < 8; i++)
		if (strcmp(s->ids[i], id) == 0)
			return true;
	return false;
}

static void
test_runlog_foreach_running(void **state)
{
	Fix *f = *state;
	Seen s = {0};

	assert_int_equal(runlog_foreach_running(f->l, collect, &s), 0);
	assert_int_equal(s.n, 0);

	assert_int_equal(runlog_create(f->l, RUN_A, "t", NULL, 1, NULL), 0);
	assert_int_equal(runlog_create(f->l, RUN_B, "t", NULL, 2, NULL), 0);
	assert_int_equal(runlog_create(f->l, RUN_C, "u", NULL, 3, NULL), 0);
	assert_int_equal(runlog_create(f->l, RUN_X, "u", NULL, 3, NULL), 0);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_B, "{}", 2, "completed", NULL, 4, NULL, NULL), 0);
	assert_int_equal(runlog_append_finish(f->l, RUN_X, "{}", 2, "aborted", NULL, 4, NULL, NULL),
			 0);

	assert_int_equal(runlog_foreach_running(f->l, collect, &s), 0);
	assert_int_equal(s.n, 2);
	assert_false(s.bad_record);
	assert_true(seen_has(&s, RUN_A));
	assert_true(seen_has(&s, RUN_C));
	assert_false(seen_has(&s, RUN_B));

	assert_true(run_status_terminal("completed"));
	assert_true(run_status_terminal("failed"));
	assert_true(run_status_terminal("aborted"));
	assert_false(run_status_terminal("running"));
	assert_false(run_status_terminal(NULL));
	assert_false(run_status_terminal("Completed"));
}

static const char *
item_thread(json_t *list, size_t i)
{
	return json_string_value(json_object_get(json_array_get(list, i), "threadId"));
}

/* THREAD_LIST: one item per thread (its newest run), newest first, ties by
 * id; prefix, scope and status filters; the cursor pages without overlap. */
static void
test_runlog_threads(void **state)
{
	Fix *f = *state;
	json_t *list = NULL;
	bool more = true;

	RunLogThreadQuery q = {.limit = 10};
	assert_int_equal(runlog_threads(f->l, &q, &list, &more), 0);
	assert_int_equal(json_array_size(list), 0);
	assert_false(more);
	json_decref(list);

	/* "a" has two runs (the newer one counts), "ab" shares its prefix, "b" is
	 * newest, "c" ties with "ab" */
	assert_int_equal(runlog_create(f->l, RUN_A, "a", "shell", 10, NULL), 0);
	assert_int_equal(runlog_create(f->l, RUN_B, "ab", "shell", 20, NULL), 0);
	assert_int_equal(runlog_create(f->l, RUN_C, "a", "shell", 30, NULL), 0);
	assert_int_equal(runlog_create(f->l, RUN_X, "b", "shell", 40, NULL), 0);
	assert_int_equal(
	    runlog_create(f->l, "00000000-0000-4000-8000-0000000000cc", "c", "shell", 20, NULL), 0);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_X, "{}", 2, "completed", NULL, 50, NULL, NULL), 0);

	assert_int_equal(runlog_threads(f->l, &q, &list, &more), 0);
	assert_int_equal(json_array_size(list), 4);
	assert_string_equal(item_thread(list, 0), "b");
	assert_string_equal(item_thread(list, 1), "a");
	assert_string_equal(item_thread(list, 2), "ab");
	assert_string_equal(item_thread(list, 3), "c");
	assert_string_equal(json_string_value(json_object_get(
				json_object_get(json_array_get(list, 1), "latestRun"), "runId")),
			    RUN_C);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(list, 1), "lastRunAt")),
			 30);
	assert_false(more);
	json_decref(list);

	/* pages of one, each starting after the last item of the previous */
	const char *want[] = {"b", "a", "ab", "c"};
	RunLogThreadQuery p = {.limit = 1};
	char after[THREAD_ID_MAX + 1];
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(runlog_threads(f->l, &p, &list, &more), 0);
		assert_int_equal(json_array_size(list), 1);
		assert_string_equal(item_thread(list, 0), want[i]);
		assert_int_equal(more, i < 3);
		snprintf(after, sizeof(after), "%s", item_thread(list, 0));
		p.after_ms =
		    json_integer_value(json_object_get(json_array_get(list, 0), "lastRunAt"));
		p.after_thread = after;
		json_decref(list);
	}

	RunLogThreadQuery pre = {.limit = 10, .prefix = "a"};
	assert_int_equal(runlog_threads(f->l, &pre, &list, &more), 0);
	assert_int_equal(json_array_size(list), 2);
	assert_string_equal(item_thread(list, 0), "a");
	assert_string_equal(item_thread(list, 1), "ab");
	json_decref(list);

	char *scope[] = {"a", "c*", NULL};
	RunLogThreadQuery sc = {.limit = 10, .scope = scope};
	assert_int_equal(runlog_threads(f->l, &sc, &list, &more), 0);
	assert_int_equal(json_array_size(list), 2);
	assert_string_equal(item_thread(list, 0), "a");
	assert_string_equal(item_thread(list, 1), "c");
	json_decref(list);

	/* a scope's entries are walked as key ranges, intersected with the
	 * prefix: overlapping entries list a thread once */
	char *over[] = {"a*", "ab*", "a", "c", "zz*", "a*", "*x", NULL};
	RunLogThreadQuery ov = {.limit = 10, .scope = over};
	assert_int_equal(runlog_threads(f->l, &ov, &list, &more), 0);
	assert_int_equal(json_array_size(list), 3);
	assert_string_equal(item_thread(list, 0), "a");
	assert_string_equal(item_thread(list, 1), "ab");
	assert_string_equal(item_thread(list, 2), "c");
	json_decref(list);
	RunLogThreadQuery ovp = {.limit = 10, .scope = over, .prefix = "ab"};
	assert_int_equal(runlog_threads(f->l, &ovp, &list, &more), 0);
	assert_int_equal(json_array_size(list), 1);
	assert_string_equal(item_thread(list, 0), "ab");
	json_decref(list);
	char *all[] = {"*", "b", NULL};
	RunLogThreadQuery al = {.limit = 10, .scope = all, .prefix = "a"};
	assert_int_equal(runlog_threads(f->l, &al, &list, &more), 0);
	assert_int_equal(json_array_size(list), 2);
	assert_string_equal(item_thread(list, 0), "a");
	assert_string_equal(item_thread(list, 1), "ab");
	json_decref(list);
	char *none[] = {"nope", "d*", "", NULL};
	RunLogThreadQuery no = {.limit = 10, .scope = none};
	assert_int_equal(runlog_threads(f->l, &no, &list, &more), 0);
	assert_int_equal(json_array_size(list), 0);
	json_decref(list);

	RunLogThreadQuery st = {.limit = 10, .status = "completed"};
	assert_int_equal(runlog_threads(f->l, &st, &list, &more), 0);
	assert_int_equal(json_array_size(list), 1);
	assert_string_equal(item_thread(list, 0), "b");
	json_decref(list);
}

/* A full map: the failing append reports -ENOSPC and leaves the record and the
 * events exactly as they were after the last successful append. */
static void
test_runlog_map_full_is_enospc(void **state)
{
	Fix *f = *state;
	static char chunk[6000];
	int64_t seq = -1, good = -1;
	int r = 0, i;

	runlog_free(f->l);
	f->l = NULL;
	rm_dir(f->dir);
	assert_non_null(mkdtemp(strcpy(f->dir, "/tmp/test-runlog-XXXXXX")));
	assert_int_equal(open_log(f, 64 * 1024, false), 0);

	memset(chunk, 'x', sizeof(chunk));
	chunk[0] = '"';
	chunk[sizeof(chunk) - 1] = '"';
	assert_int_equal(runlog_create(f->l, RUN_A, "t", NULL, 1, NULL), 0);
	for (i = 0; i < 64; i++) {
		seq = -99;
		r = runlog_append(f->l, RUN_A, chunk, sizeof(chunk), 10 + i, &seq, NULL);
		if (r < 0)
			break;
		assert_int_equal(seq, i);
		good = seq;
	}
	assert_int_equal(r, -ENOSPC);
	assert_true(good >= 0); /* at least one fit: the failure is the map, not the setup */
	assert_int_equal(seq, -99);

	json_t *rec = NULL;
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_int_equal(rec_int(rec, "lastSeq"), good);
	assert_int_equal(rec_int(rec, "updatedAt"), 10 + good);
	json_decref(rec);

	/* reading still works and shows exactly the committed events */
	RunLogEvents ev = {0};
	assert_int_equal(runlog_read(f->l, RUN_A, -1, 1000, &ev, &rec), 0);
	assert_int_equal(ev.n, (size_t)good + 1);
	assert_int_equal(ev.first_seq, 0);
	for (size_t k = 0; k < ev.n; k++) {
		assert_int_equal(ev.lens[k], sizeof(chunk));
		assert_memory_equal(ev.texts[k], chunk, sizeof(chunk));
	}
	assert_int_equal(rec_int(rec, "lastSeq"), good);
	json_decref(rec);
	runlog_events_done(&ev);
	assert_int_equal(runlog_read(f->l, RUN_A, good, 1000, &ev, NULL), 0);
	assert_int_equal(ev.n, 0);
	runlog_events_done(&ev);

	/* a finish that does not fit either is refused the same way and the run
	 * stays running */
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_A, chunk, sizeof(chunk), "failed", NULL, 99, NULL, NULL),
	    -ENOSPC);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_string_equal(rec_str(rec, "status"), "running");
	assert_int_equal(rec_int(rec, "lastSeq"), good);
	json_decref(rec);

	/* and the environment is still usable after reopen */
	f->l = runlog_free(f->l);
	assert_int_equal(open_log(f, 64 * 1024, false), 0);
	assert_int_equal(last_seq(f->l, RUN_A), good);
}

/* POST /runs with an Idempotency-Key: the run and its key commit in one
 * transaction. A retry finds the first run; a start that cannot commit leaves
 * neither the run nor the key (issue 12: a crash between two transactions let
 * a retry start a second run). */
static void
test_runlog_create_keyed_is_one_transaction(void **state)
{
	Fix *f = *state;
	char id[RUN_ID_LEN + 1], key[400];
	bool created = false;
	json_t *list = NULL;
	int r = 0, i;

	strcpy(id, RUN_A);
	assert_int_equal(runlog_create_keyed(f->l, id, "t1", "shell", NULL, 1, "k", &created), 0);
	assert_true(created);
	strcpy(id, RUN_B);
	assert_int_equal(runlog_create_keyed(f->l, id, "t1", "shell", NULL, 2, "k", &created), 0);
	assert_false(created);
	assert_string_equal(id, RUN_A);
	assert_int_equal(runlog_get(f->l, RUN_B, &list), -ENOENT);
	assert_int_equal(runlog_thread_runs(f->l, "t1", NULL, &list), 0);
	assert_int_equal(json_array_size(list), 1);
	json_decref(list);
	/* the same key in another thread is another run */
	strcpy(id, RUN_C);
	assert_int_equal(runlog_create_keyed(f->l, id, "t2", NULL, NULL, 3, "k", &created), 0);
	assert_true(created);
	assert_string_equal(id, RUN_C);

	/* a map too small for the next start: the failing start stores nothing */
	runlog_free(f->l);
	f->l = NULL;
	rm_dir(f->dir);
	assert_non_null(mkdtemp(strcpy(f->dir, "/tmp/test-runlog-XXXXXX")));
	assert_int_equal(open_log(f, 64 * 1024, false), 0);
	memset(key, 'k', sizeof(key) - 1);
	key[sizeof(key) - 1] = '\0';
	for (i = 0; i < 4096; i++) {
		snprintf(id, sizeof(id), "00000000-0000-4000-8000-%012x", i);
		snprintf(key, 16, "%08x-", i);
		key[9] = 'k';
		r = runlog_create_keyed(f->l, id, "thread-with-a-long-name", NULL, NULL, i, key,
					&created);
		if (r < 0)
			break;
		assert_true(created);
	}
	assert_int_equal(r, -ENOSPC);
	assert_true(i > 0);
	char got[RUN_ID_LEN + 1];
	assert_int_equal(runlog_idem_get(f->l, "thread-with-a-long-name", key, got), -ENOENT);
	assert_int_equal(runlog_get(f->l, id, &list), -ENOENT);
	/* the one before it has both */
	snprintf(id, sizeof(id), "00000000-0000-4000-8000-%012x", i - 1);
	snprintf(key, 16, "%08x-", i - 1);
	key[9] = 'k';
	assert_int_equal(runlog_idem_get(f->l, "thread-with-a-long-name", key, got), 0);
	assert_string_equal(got, id);
}

/* preallocate: the data file's blocks up to map_size are allocated at open
 * (so that a disk filled by workspaces cannot fail a commit), and LMDB still
 * sees the file it wrote. */
static void
test_runlog_preallocate_reserves_the_map(void **state)
{
	Fix *f = *state;
	RunLogOptions o = {.map_size = 8 << 20, .sync = false, .preallocate = true};
	char p[PATH_MAX];
	struct stat st;

	runlog_free(f->l);
	f->l = NULL;
	rm_dir(f->dir);
	assert_non_null(mkdtemp(strcpy(f->dir, "/tmp/test-runlog-XXXXXX")));
	assert_int_equal(runlog_open(f->dir, &o, &f->l), 0);
	if (!runlog_preallocated(f->l))
		skip(); /* a filesystem without fallocate (tmpfs has it) */
	snprintf(p, sizeof(p), "%s/data.mdb", f->dir);
	assert_int_equal(stat(p, &st), 0);
	assert_true((uint64_t)st.st_blocks * 512 >= (uint64_t)o.map_size);
	assert_true((uint64_t)st.st_size < (uint64_t)o.map_size); /* KEEP_SIZE */
	assert_int_equal(runlog_create(f->l, RUN_A, "t", NULL, 1, NULL), 0);
	assert_int_equal(last_seq(f->l, RUN_A), -1);
}

/* ---- group commit, watchdog transaction, threads, retention (issue 3) ---- */

static void
create(RunLog *l, const char *id, const char *thread, int64_t at)
{
	assert_int_equal(runlog_create(l, id, thread, NULL, at, NULL), 0);
}

static void
test_runlog_batch_spans_runs_and_refuses_per_op(void **state)
{
	Fix *f = *state;
	RunLogBatch *b;
	int64_t seq;

	create(f->l, RUN_A, "t", 1);
	create(f->l, RUN_B, "t", 2);
	assert_int_equal(runlog_batch_begin(f->l, &b), 0);
	assert_int_equal(runlog_batch_append(b, RUN_A, "{\"type\":\"A\"}", 12, NULL, NULL, 5, &seq),
			 0);
	assert_int_equal(seq, 0);
	assert_int_equal(runlog_batch_append(b, RUN_B, "{\"type\":\"B\"}", 12, NULL, NULL, 5, &seq),
			 0);
	assert_int_equal(seq, 0);
	assert_int_equal(runlog_batch_append(b, RUN_A, "{\"type\":\"A\"}", 12, NULL, NULL, 6, &seq),
			 0);
	assert_int_equal(seq, 1); /* the batch's own view: consecutive within one txn */
	/* an unknown run is refused for that op only */
	assert_int_equal(runlog_batch_append(b, RUN_X, "{}", 2, NULL, NULL, 6, &seq), -ENOENT);
	/* a finish in the batch makes later appends to that run stale */
	assert_int_equal(
	    runlog_batch_append(b, RUN_B, "{\"type\":\"E\"}", 12, "failed", NULL, 7, &seq), 0);
	assert_int_equal(runlog_batch_append(b, RUN_B, "{}", 2, NULL, NULL, 8, &seq), -ESTALE);
	/* nothing is visible before the commit */
	assert_int_equal(last_seq(f->l, RUN_A), -1);
	assert_int_equal(runlog_batch_commit(b), 0);
	runlog_batch_free(b);
	assert_int_equal(last_seq(f->l, RUN_A), 1);
	assert_int_equal(last_seq(f->l, RUN_B), 1);
	json_t *rec = NULL;
	assert_int_equal(runlog_get(f->l, RUN_B, &rec), 0);
	assert_string_equal(json_string_value(json_object_get(rec, "status")), "failed");
	json_decref(rec);
}

static void
test_runlog_batch_abort_writes_nothing(void **state)
{
	Fix *f = *state;
	RunLogBatch *b;
	int64_t seq;

	create(f->l, RUN_A, "t", 1);
	assert_int_equal(runlog_batch_begin(f->l, &b), 0);
	assert_int_equal(runlog_batch_append(b, RUN_A, "{}", 2, NULL, NULL, 5, &seq), 0);
	json_auto_t *st = json_pack("{s:i}", "execId", 7);
	assert_int_equal(runlog_batch_drive_put(b, RUN_A, st), 0);
	runlog_batch_free(b); /* never committed */
	assert_int_equal(last_seq(f->l, RUN_A), -1);
	json_t *d = NULL;
	assert_int_equal(runlog_drive_get(f->l, RUN_A, &d), -ENOENT);
}

static void
test_runlog_drive_state_commits_with_the_event(void **state)
{
	Fix *f = *state;
	RunLogBatch *b;
	int64_t seq;
	json_t *d = NULL;

	create(f->l, RUN_A, "t", 1);
	assert_int_equal(runlog_batch_begin(f->l, &b), 0);
	assert_int_equal(runlog_batch_append(b, RUN_A, "{}", 2, NULL, NULL, 5, &seq), 0);
	json_auto_t *st = json_pack("{s:i, s:[i,i]}", "execId", 7, "consumed", 10, 3);
	assert_int_equal(runlog_batch_drive_put(b, RUN_A, st), 0);
	assert_int_equal(runlog_batch_commit(b), 0);
	runlog_batch_free(b);
	assert_int_equal(runlog_drive_get(f->l, RUN_A, &d), 0);
	assert_int_equal(json_integer_value(json_object_get(d, "execId")), 7);
	json_decref(d);
	/* NULL deletes */
	assert_int_equal(runlog_batch_begin(f->l, &b), 0);
	assert_int_equal(runlog_batch_drive_put(b, RUN_A, NULL), 0);
	assert_int_equal(runlog_batch_commit(b), 0);
	runlog_batch_free(b);
	assert_int_equal(runlog_drive_get(f->l, RUN_A, &d), -ENOENT);
}

static void
test_runlog_finish_if_stale_is_strict_and_atomic(void **state)
{
	Fix *f = *state;
	json_t *rec = NULL;
	int64_t seq;
	const char *err = "{\"type\":\"RUN_ERROR\",\"message\":\"stale\"}";

	create(f->l, RUN_A, "t", 1000); /* updatedAt = 1000 */
	/* updatedAt == cutoff is not stale: strictly older only */
	assert_int_equal(
	    runlog_finish_if_stale(f->l, RUN_A, 1000, err, strlen(err), NULL, 2000, NULL, NULL), 1);
	assert_int_equal(last_seq(f->l, RUN_A), -1);
	/* a racing append that committed first moves updatedAt: it wins */
	assert_int_equal(runlog_append(f->l, RUN_A, "{}", 2, 1500, NULL, NULL), 0);
	assert_int_equal(
	    runlog_finish_if_stale(f->l, RUN_A, 1200, err, strlen(err), NULL, 2000, NULL, NULL), 1);
	/* stale: event and terminal status in one transaction */
	json_auto_t *fields = json_pack("{s:{s:s}}", "error", "message", "stale");
	assert_int_equal(
	    runlog_finish_if_stale(f->l, RUN_A, 1501, err, strlen(err), fields, 2000, &rec, &seq),
	    0);
	assert_int_equal(seq, 1);
	assert_string_equal(json_string_value(json_object_get(rec, "status")), "failed");
	assert_int_equal(json_integer_value(json_object_get(rec, "finishedAt")), 2000);
	json_decref(rec);
	/* a terminal run is never finished twice */
	assert_int_equal(
	    runlog_finish_if_stale(f->l, RUN_A, 99999, err, strlen(err), NULL, 3000, NULL, NULL),
	    1);
	assert_int_equal(last_seq(f->l, RUN_A), 1);
	assert_int_equal(
	    runlog_finish_if_stale(f->l, RUN_X, 99999, err, strlen(err), NULL, 3000, NULL, NULL),
	    -ENOENT);
}

static void
test_runlog_touch_moves_updated_at_only_while_running(void **state)
{
	Fix *f = *state;
	json_t *rec = NULL;

	create(f->l, RUN_A, "t", 1000);
	assert_int_equal(runlog_touch(f->l, RUN_A, 1700), 0);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_int_equal(json_integer_value(json_object_get(rec, "updatedAt")), 1700);
	assert_int_equal(json_integer_value(json_object_get(rec, "lastSeq")), -1);
	json_decref(rec);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_A, "{}", 2, "completed", NULL, 1800, NULL, NULL), 0);
	assert_int_equal(runlog_touch(f->l, RUN_A, 9999), 0);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_int_equal(json_integer_value(json_object_get(rec, "updatedAt")), 1800);
	json_decref(rec);
}

static void
test_runlog_thread_runs_newest_first(void **state)
{
	Fix *f = *state;
	json_t *list = NULL;

	create(f->l, RUN_A, "t1", 100);
	create(f->l, RUN_B, "t1", 300);
	create(f->l, RUN_C, "t2", 200);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_A, "{}", 2, "completed", NULL, 400, NULL, NULL), 0);
	assert_int_equal(runlog_thread_runs(f->l, "t1", NULL, &list), 0);
	assert_int_equal(json_array_size(list), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "runId")),
			    RUN_B);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 1), "runId")),
			    RUN_A);
	json_decref(list);
	assert_int_equal(runlog_thread_runs(f->l, "t1", "running", &list), 0);
	assert_int_equal(json_array_size(list), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "runId")),
			    RUN_B);
	json_decref(list);
	/* a thread that is a prefix of another must not see its runs */
	assert_int_equal(runlog_thread_runs(f->l, "t", NULL, &list), 0);
	assert_int_equal(json_array_size(list), 0);
	json_decref(list);
	/* the newest only, walked from the end (t1 is not the last thread) */
	assert_int_equal(runlog_thread_runs_newest(f->l, "t1", 1, &list), 0);
	assert_int_equal(json_array_size(list), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "runId")),
			    RUN_B);
	json_decref(list);
	assert_int_equal(runlog_thread_runs_newest(f->l, "t1", 5, &list), 0);
	assert_int_equal(json_array_size(list), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 1), "runId")),
			    RUN_A);
	json_decref(list);
	/* the last thread of the index, and one with nothing after it */
	assert_int_equal(runlog_thread_runs_newest(f->l, "t2", 5, &list), 0);
	assert_int_equal(json_array_size(list), 1);
	json_decref(list);
	assert_int_equal(runlog_thread_runs_newest(f->l, "t3", 5, &list), 0);
	assert_int_equal(json_array_size(list), 0);
	json_decref(list);
	assert_int_equal(runlog_thread_runs_newest(f->l, "t", 5, &list), 0);
	assert_int_equal(json_array_size(list), 0);
	json_decref(list);
}

/* RunLogPrunedFn: the ids reported, concatenated */
static void
note_pruned(const char *run_id, const json_t *record, void *ud)
{
	assert_string_equal(json_string_value(json_object_get(record, "runId")), run_id);
	strcat((char *)ud, run_id);
}

static void
test_runlog_prune_old_terminal_runs_only(void **state)
{
	Fix *f = *state;
	char cursor[RUN_ID_LEN + 1] = "";
	size_t n = 0;
	json_t *rec = NULL, *list = NULL;
	char got[RUN_ID_LEN + 1];
	RunLogEvents ev;

	create(f->l, RUN_A, "t1", 100);
	create(f->l, RUN_B, "t1", 100);
	create(f->l, RUN_C, "t1", 100);
	assert_int_equal(runlog_append(f->l, RUN_A, "{}", 2, 150, NULL, NULL), 0);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_A, "{}", 2, "completed", NULL, 200, NULL, NULL), 0);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_B, "{}", 2, "failed", NULL, 900, NULL, NULL), 0);
	assert_int_equal(runlog_idem_put(f->l, "t1", "key", RUN_A), 0);
	/* A finished before the cutoff; B after; C is still running */
	char pruned[4 * RUN_ID_LEN + 1] = "";
	assert_int_equal(runlog_prune(f->l, 500, 16, 100, cursor, &n, note_pruned, pruned), 0);
	assert_int_equal(n, 1);
	assert_string_equal(pruned, RUN_A); /* reported, once */
	assert_string_equal(cursor, "");    /* a full pass */
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), -ENOENT);
	assert_int_equal(runlog_read(f->l, RUN_A, -1, 10, &ev, NULL), -ENOENT);
	assert_int_equal(runlog_idem_get(f->l, "t1", "key", got), -ENOENT);
	assert_int_equal(runlog_thread_runs(f->l, "t1", NULL, &list), 0);
	assert_int_equal(json_array_size(list), 2);
	json_decref(list);
	assert_int_equal(runlog_get(f->l, RUN_B, &rec), 0);
	json_decref(rec);
	assert_int_equal(runlog_get(f->l, RUN_C, &rec), 0);
	json_decref(rec);
	/* the events of the other runs are intact */
	assert_int_equal(runlog_read(f->l, RUN_B, -1, 10, &ev, NULL), 0);
	assert_int_equal(ev.n, 1);
	runlog_events_done(&ev);
}

static void
test_runlog_prune_in_small_batches(void **state)
{
	Fix *f = *state;
	char cursor[RUN_ID_LEN + 1] = "";
	size_t n = 0, total = 0;
	int rounds = 0;

	for (int i = 0; i < 10; i++) {
		char id[RUN_ID_LEN + 1];
		snprintf(id, sizeof(id), "00000000-0000-4000-8000-0000000001%02d", i);
		create(f->l, id, "t", 1);
		assert_int_equal(
		    runlog_append_finish(f->l, id, "{}", 2, "completed", NULL, 2, NULL, NULL), 0);
	}
	do {
		assert_int_equal(runlog_prune(f->l, 100, 3, 100, cursor, &n, NULL, NULL), 0);
		assert_true(n <= 3);
		total += n;
		rounds++;
	} while (cursor[0] && rounds < 20);
	if (total < 10) { /* the last batch may end a pass with some left: one more pass */
		assert_int_equal(runlog_prune(f->l, 100, 16, 100, cursor, &n, NULL, NULL), 0);
		total += n;
	}
	assert_int_equal(total, 10);
	assert_true(rounds >= 4);
}

static void
test_runlog_read_bounded_by_bytes_never_empty(void **state)
{
	Fix *f = *state;
	RunLogEvents ev;
	char big[1000];

	memset(big, 'x', sizeof(big));
	big[0] = '"';
	big[sizeof(big) - 1] = '"';
	create(f->l, RUN_A, "t1", 100);
	for (int i = 0; i < 10; i++)
		assert_int_equal(runlog_append(f->l, RUN_A, big, sizeof(big), 100, NULL, NULL), 0);
	/* 2500 bytes: two events, the third would pass the cap */
	assert_int_equal(runlog_read_bytes(f->l, RUN_A, -1, 100, 2500, &ev, NULL), 0);
	assert_int_equal(ev.n, 2);
	assert_int_equal(ev.first_seq, 0);
	runlog_events_done(&ev);
	/* a cap below one event still returns one: a reader always moves on */
	assert_int_equal(runlog_read_bytes(f->l, RUN_A, 4, 100, 10, &ev, NULL), 0);
	assert_int_equal(ev.n, 1);
	assert_int_equal(ev.first_seq, 5);
	runlog_events_done(&ev);
	/* the count still applies */
	assert_int_equal(runlog_read_bytes(f->l, RUN_A, -1, 3, 1 << 20, &ev, NULL), 0);
	assert_int_equal(ev.n, 3);
	runlog_events_done(&ev);
	/* at the head: nothing, no error */
	assert_int_equal(runlog_read_bytes(f->l, RUN_A, 9, 100, 10, &ev, NULL), 0);
	assert_int_equal(ev.n, 0);
	runlog_events_done(&ev);
}

static void
test_runlog_prune_oldest_takes_first_finished_terminal_runs(void **state)
{
	Fix *f = *state;
	json_t *rec = NULL;
	size_t n = 0;
	uint64_t used0 = 0, used1 = 0, map = 0;

	create(f->l, RUN_A, "t1", 100);
	create(f->l, RUN_B, "t1", 100);
	create(f->l, RUN_C, "t1", 100);
	char *blob = malloc(200000);
	assert_non_null(blob);
	memset(blob, 'y', 200000);
	blob[0] = blob[199999] = '"';
	assert_int_equal(runlog_append(f->l, RUN_B, blob, 200000, 150, NULL, NULL), 0);
	free(blob);
	/* B finished first (at 300), A later (at 900); C still runs */
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_A, "{}", 2, "completed", NULL, 900, NULL, NULL), 0);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_B, "{}", 2, "failed", NULL, 300, NULL, NULL), 0);
	assert_int_equal(runlog_usage(f->l, &used0, &map), 0);
	assert_true(used0 > 200000 && used0 < map);
	char pruned[4 * RUN_ID_LEN + 1] = "";
	assert_int_equal(runlog_prune_oldest(f->l, 1, &n, note_pruned, pruned), 0);
	assert_int_equal(n, 1);
	assert_string_equal(pruned, RUN_B);
	assert_int_equal(runlog_get(f->l, RUN_B, &rec), -ENOENT);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	json_decref(rec);
	assert_int_equal(runlog_usage(f->l, &used1, NULL), 0);
	assert_true(used1 + 190000 < used0); /* freed pages are not counted */
	assert_int_equal(runlog_prune_oldest(f->l, 16, &n, NULL, NULL), 0);
	assert_int_equal(n, 1); /* A; never the running C */
	assert_int_equal(runlog_get(f->l, RUN_C, &rec), 0);
	json_decref(rec);
	assert_int_equal(runlog_prune_oldest(f->l, 16, &n, NULL, NULL), 0);
	assert_int_equal(n, 0);
}

/* Tenants: the log counted by tenant (records and events, a record without
 * one is "default's"), a tenant's oldest pruned first and no one else's, the
 * threads' owners. */
static void
test_runlog_tenants(void **state)
{
	Fix *f = *state;
	char id[RUN_ID_LEN + 1], owner[TENANT_NAME_MAX + 1];
	RunLogTenantUsage *u = NULL;
	json_t *rec = NULL;
	size_t n = 0;
	bool fresh = false;

	memcpy(id, RUN_A, sizeof(id));
	assert_int_equal(runlog_create_keyed(f->l, id, "b1", NULL, "bravo", 10, NULL, NULL), 0);
	memcpy(id, RUN_B, sizeof(id));
	assert_int_equal(runlog_create_keyed(f->l, id, "a1", NULL, "alpha", 20, NULL, NULL), 0);
	memcpy(id, RUN_C, sizeof(id));
	assert_int_equal(runlog_create_keyed(f->l, id, "a2", NULL, "alpha", 30, NULL, NULL), 0);
	create(f->l, RUN_X, "d1", 40);
	assert_int_equal(runlog_get(f->l, RUN_B, &rec), 0);
	assert_string_equal(json_string_value(json_object_get(rec, "tenant")), "alpha");
	json_decref(rec);
	char *blob = malloc(100000);
	assert_non_null(blob);
	memset(blob, 'y', 100000);
	blob[0] = blob[99999] = '"';
	assert_int_equal(runlog_append(f->l, RUN_B, blob, 100000, 40, NULL, NULL), 0);
	assert_int_equal(runlog_append(f->l, RUN_C, blob, 100000, 40, NULL, NULL), 0);
	free(blob);
	/* bravo's run finished first, then alpha's B; alpha's C still runs */
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_A, "{}", 2, "completed", NULL, 50, NULL, NULL), 0);
	assert_int_equal(
	    runlog_append_finish(f->l, RUN_B, "{}", 2, "completed", NULL, 60, NULL, NULL), 0);
	assert_int_equal(runlog_tenant_usage(f->l, &u, &n), 0);
	assert_int_equal(n, 3);
	assert_string_equal(u[0].tenant, "alpha"); /* largest first */
	assert_true(u[0].bytes > 200000 && u[0].bytes < 210000);
	assert_int_equal(u[0].runs, 2);
	assert_int_equal(u[0].prunable, 1);
	for (size_t i = 1; i < n; i++) {
		assert_true(!strcmp(u[i].tenant, "bravo") || !strcmp(u[i].tenant, TENANT_DEFAULT));
		assert_true(u[i].bytes < 1000);
		assert_int_equal(u[i].prunable, !strcmp(u[i].tenant, "bravo"));
	}
	free(u);
	/* alpha's oldest, never bravo's older one nor alpha's running one; no
	 * more than the bytes asked for */
	assert_int_equal(runlog_prune_oldest_of(f->l, TENANT_DEFAULT, 16, 1, &n, NULL, NULL), 0);
	assert_int_equal(n, 0); /* its run is still running */
	assert_int_equal(runlog_prune_oldest_of(f->l, "alpha", 16, UINT64_MAX, &n, NULL, NULL), 0);
	assert_int_equal(n, 1);
	assert_int_equal(runlog_get(f->l, RUN_B, &rec), -ENOENT);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	json_decref(rec);
	assert_int_equal(runlog_prune_oldest_of(f->l, "alpha", 16, UINT64_MAX, &n, NULL, NULL), 0);
	assert_int_equal(n, 0);

	/* owners: the first tenant's, another is refused, named */
	assert_int_equal(runlog_thread_owner(f->l, "a1", owner), -ENOENT);
	assert_int_equal(runlog_thread_claim(f->l, "a1", "alpha", &fresh, owner), 0);
	assert_true(fresh);
	assert_int_equal(runlog_thread_claim(f->l, "a1", "alpha", &fresh, owner), 0);
	assert_false(fresh);
	owner[0] = '\0';
	assert_int_equal(runlog_thread_claim(f->l, "a1", "bravo", &fresh, owner), -EPERM);
	assert_string_equal(owner, "alpha");
	assert_int_equal(runlog_thread_claim(f->l, "a2", "bad/name", &fresh, owner), -EINVAL);
	assert_int_equal(runlog_thread_owner(f->l, "a1", owner), 0);
	assert_string_equal(owner, "alpha");
}

static void
test_runlog_soft_append_refuses_one_op_not_the_batch(void **state)
{
	Fix *f = *state;
	static char chunk[100000];
	RunLogBatch *b;
	int64_t seq = -1, last_ok = -1;
	json_t *rec = NULL;
	int r = 0;

	runlog_free(f->l);
	f->l = NULL;
	rm_dir(f->dir);
	assert_non_null(mkdtemp(strcpy(f->dir, "/tmp/test-runlog-XXXXXX")));
	/* 256 KiB: two 100 KB values fit, a third finds no 25 free pages in a
	 * row, and the small terminal write still fits in what is left */
	assert_int_equal(open_log(f, 256 * 1024, false), 0);
	memset(chunk, 'x', sizeof(chunk));
	chunk[0] = chunk[sizeof(chunk) - 1] = '"';
	assert_int_equal(runlog_create(f->l, RUN_A, "t", NULL, 1, NULL), 0);
	/* one batch: soft appends until the map has no room for another */
	assert_int_equal(runlog_batch_begin(f->l, &b), 0);
	for (int i = 0; i < 64; i++) {
		r = runlog_batch_append_soft(b, RUN_A, chunk, sizeof(chunk), NULL, 10, &seq);
		if (r < 0)
			break;
		last_ok = seq;
	}
	assert_int_equal(r, -ENOSPC);
	assert_true(last_ok >= 1);
	/* the batch is not poisoned: a small terminal write and the commit work */
	assert_int_equal(runlog_batch_finish(b, RUN_A, "failed", NULL, 20), 0);
	assert_int_equal(runlog_batch_commit(b), 0);
	runlog_batch_free(b);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_string_equal(rec_str(rec, "status"), "failed");
	assert_int_equal(rec_int(rec, "lastSeq"), last_ok);
	json_decref(rec);
}

/* A map with room for a part of a batch: the first events are put straight
 * into the batch (the map's end certainly has room for them), the later ones
 * nested, and the one that finds no room is refused alone; the batch still
 * commits everything before it. */
static void
test_runlog_soft_append_direct_then_nested(void **state)
{
	Fix *f = *state;
	static char chunk[100000];
	RunLogBatch *b;
	int64_t seq = -1, last_ok = -1;
	json_t *rec = NULL;
	int r = 0, n_ok = 0;

	runlog_free(f->l);
	f->l = NULL;
	rm_dir(f->dir);
	assert_non_null(mkdtemp(strcpy(f->dir, "/tmp/test-runlog-XXXXXX")));
	/* 4 MiB: ≈ 1000 pages, about 40 values of 100 KB (25 pages each); the
	 * bound of a put (its overflow pages and a path's worth) lets the first
	 * ≈ 20 in directly */
	assert_int_equal(open_log(f, 4 << 20, false), 0);
	memset(chunk, 'y', sizeof(chunk));
	chunk[0] = chunk[sizeof(chunk) - 1] = '"';
	assert_int_equal(runlog_create(f->l, RUN_A, "t", NULL, 1, NULL), 0);
	assert_int_equal(runlog_batch_begin(f->l, &b), 0);
	for (int i = 0; i < 64; i++) {
		r = runlog_batch_append_soft(b, RUN_A, chunk, sizeof(chunk), NULL, 10, &seq);
		if (r < 0)
			break;
		last_ok = seq;
		n_ok++;
	}
	assert_int_equal(r, -ENOSPC);
	assert_true(n_ok >= 30);
	assert_int_equal(runlog_batch_finish(b, RUN_A, "failed", NULL, 20), 0);
	assert_int_equal(runlog_batch_commit(b), 0);
	runlog_batch_free(b);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_string_equal(rec_str(rec, "status"), "failed");
	assert_int_equal(rec_int(rec, "lastSeq"), last_ok);
	json_decref(rec);
	/* every event is there, in order */
	RunLogEvents ev = {0};
	assert_int_equal(runlog_read(f->l, RUN_A, -1, (size_t)n_ok + 1, &ev, NULL), 0);
	assert_int_equal(ev.n, (size_t)n_ok);
	for (size_t i = 0; i < ev.n; i++) {
		assert_int_equal(ev.lens[i], sizeof(chunk));
		assert_memory_equal(ev.texts[i], chunk, sizeof(chunk));
	}
	runlog_events_done(&ev);
}

/* One append to run_id in a batch of its own; the record it left (caller's). */
static json_t *
batch_one(RunLog *l, const char *run_id, int64_t now)
{
	RunLogBatch *b;
	int64_t seq;
	assert_int_equal(runlog_batch_begin(l, &b), 0);
	assert_int_equal(
	    runlog_batch_append(b, run_id, "{\"type\":\"A\"}", 12, NULL, NULL, now, &seq), 0);
	assert_int_equal(runlog_batch_commit(b), 0);
	json_t *rec = runlog_batch_get_record(b, run_id);
	runlog_batch_free(b);
	return rec;
}

/* Batches start from the records the previous batch left (a cache): a write
 * of any other kind in between is seen, a record a caller still holds is
 * not changed under it, an aborted batch leaves nothing behind. */
static void
test_runlog_batches_see_every_other_write(void **state)
{
	Fix *f = *state;
	json_t *rec = NULL;

	create(f->l, RUN_A, "t", 1);
	json_t *held = batch_one(f->l, RUN_A, 5); /* lastSeq 0 */
	json_decref(batch_one(f->l, RUN_A, 6));	  /* lastSeq 1 */
	assert_int_equal(json_integer_value(json_object_get(held, "lastSeq")), 0);
	json_decref(held);
	/* another kind of write between two batches */
	json_auto_t *fields = json_pack("{s:s}", "sandboxId", "sb1");
	assert_int_equal(runlog_update(f->l, RUN_A, fields, 7, NULL), 0);
	rec = batch_one(f->l, RUN_A, 8);
	assert_string_equal(json_string_value(json_object_get(rec, "sandboxId")), "sb1");
	assert_int_equal(json_integer_value(json_object_get(rec, "lastSeq")), 2);
	json_decref(rec);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_string_equal(json_string_value(json_object_get(rec, "sandboxId")), "sb1");
	assert_int_equal(json_integer_value(json_object_get(rec, "updatedAt")), 8);
	json_decref(rec);
	/* an aborted batch's changes are not carried into the next */
	RunLogBatch *b;
	int64_t seq;
	assert_int_equal(runlog_batch_begin(f->l, &b), 0);
	assert_int_equal(runlog_batch_append(b, RUN_A, "{}", 2, "failed", NULL, 9, &seq), 0);
	runlog_batch_free(b);
	rec = batch_one(f->l, RUN_A, 10);
	assert_string_equal(json_string_value(json_object_get(rec, "status")), "running");
	assert_int_equal(json_integer_value(json_object_get(rec, "lastSeq")), 3);
	json_decref(rec);
	/* the watchdog's finish, in a batch of its own */
	const char *err = "{\"type\":\"RUN_ERROR\"}";
	assert_int_equal(
	    runlog_finish_if_stale(f->l, RUN_A, 1000, err, strlen(err), NULL, 11, NULL, &seq), 0);
	assert_int_equal(runlog_batch_begin(f->l, &b), 0);
	assert_int_equal(runlog_batch_append(b, RUN_A, "{}", 2, NULL, NULL, 12, &seq), -ESTALE);
	runlog_batch_free(b);
	/* a reopen starts from the disk */
	runlog_free(f->l);
	assert_int_equal(open_log(f, 16 << 20, false), 0);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_string_equal(json_string_value(json_object_get(rec, "status")), "failed");
	assert_int_equal(json_integer_value(json_object_get(rec, "lastSeq")), 4);
	json_decref(rec);
}

/* A run created in a batch: later ops of the batch see it, the commit makes
 * it whole (record, thread index), a taken id is refused for that op only, an
 * aborted batch leaves no run. */
static void
test_runlog_batch_create(void **state)
{
	Fix *f = *state;
	RunLogBatch *b;
	int64_t seq;
	json_t *rec = NULL;

	create(f->l, RUN_B, "t", 1);
	assert_int_equal(runlog_batch_begin(f->l, &b), 0);
	assert_int_equal(runlog_batch_create(b, RUN_A, "t", "shell", NULL, 5), 0);
	assert_int_equal(
	    runlog_batch_append(b, RUN_A, "{\"type\":\"RUN_STARTED\"}", 22, NULL, NULL, 5, &seq),
	    0);
	assert_int_equal(seq, 0);
	assert_int_equal(runlog_batch_create(b, RUN_A, "t", NULL, NULL, 5), -EEXIST);
	assert_int_equal(runlog_batch_create(b, RUN_B, "t", NULL, NULL, 5), -EEXIST);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), -ENOENT); /* not before the commit */
	assert_int_equal(runlog_batch_commit(b), 0);
	runlog_batch_free(b);
	assert_int_equal(runlog_get(f->l, RUN_A, &rec), 0);
	assert_string_equal(json_string_value(json_object_get(rec, "status")), "running");
	assert_string_equal(json_string_value(json_object_get(rec, "threadId")), "t");
	assert_string_equal(json_string_value(json_object_get(rec, "harness")), "shell");
	assert_int_equal(json_integer_value(json_object_get(rec, "lastSeq")), 0);
	assert_int_equal(json_integer_value(json_object_get(rec, "startedAt")), 5);
	json_decref(rec);
	json_t *list = NULL;
	assert_int_equal(runlog_thread_runs(f->l, "t", NULL, &list), 0);
	assert_int_equal(json_array_size(list), 2); /* the thread index has it */
	json_decref(list);
	/* aborted: nothing */
	assert_int_equal(runlog_batch_begin(f->l, &b), 0);
	assert_int_equal(runlog_batch_create(b, RUN_C, "t", NULL, NULL, 6), 0);
	runlog_batch_free(b);
	assert_int_equal(runlog_get(f->l, RUN_C, &rec), -ENOENT);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_runlog_create_record, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_create_is_idempotent, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_append_seqs_gap_free, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_read_cursor, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_append_unknown_run, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_append_finish, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_append_after_terminal_is_stale, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_update, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_get_text_follows_every_write, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_survives_reopen, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_idempotency, setup, teardown),
	    cmocka_unit_test_setup_teardown(
		test_runlog_alias_and_input_commit_and_prune_with_the_run, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_preallocate_reserves_the_map, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_create_keyed_is_one_transaction, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_foreach_running, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_threads, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_map_full_is_enospc, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_batch_spans_runs_and_refuses_per_op, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_batch_abort_writes_nothing, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_drive_state_commits_with_the_event, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_finish_if_stale_is_strict_and_atomic, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_touch_moves_updated_at_only_while_running,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_thread_runs_newest_first, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_prune_old_terminal_runs_only, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_prune_in_small_batches, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_read_bounded_by_bytes_never_empty, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_batch_create, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_batches_see_every_other_write, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_soft_append_refuses_one_op_not_the_batch,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_soft_append_direct_then_nested, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(
		test_runlog_prune_oldest_takes_first_finished_terminal_runs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_runlog_tenants, setup, teardown),
	};
	return cmocka_run_group_tests_name("runlog", tests, NULL, NULL);
}
