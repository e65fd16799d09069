/* SPDX-License-Identifier: MIT */
/*
 * fuzz-adapter.c — libFuzzer target: arbitrary bytes as the output of a
 * harness process, through one adapter (built three times: -DFUZZ_ADAPTER_NDJSON,
 * _CLAUDE, _CODEX). The input is the process's stdout; the bytes after the
 * first NUL, if any, are its stderr. Byte 0 picks the size of the reads the
 * driver hands over (1..64 bytes, or all at once) and the exit status.
 *
 * The run is a real Run of driver.c with the real commit.c op queue (included
 * here so that the queued Ops can be read; nothing is committed: there is no
 * run log). After every drain, every queued Op is checked:
 *   - its chunk text is JSON, an object with a string "type";
 *   - no decoded string, key or number of the chunk, nor of the fields
 *     merged into the run's record, holds one of the run's secrets (the
 *     text itself may show a secret's bytes across an escape, "\nFUZZ…",
 *     which is not the secret) (run->secret_values, as collect_secrets() fills them).
 * A violation aborts (libFuzzer reports it as a crash).
 */
#include "commit.c"

#include <stdio.h>

#include "driver.h"

#if defined(FUZZ_ADAPTER_NDJSON)
#define KIND ADAPTER_NDJSON
#elif defined(FUZZ_ADAPTER_CLAUDE)
#define KIND ADAPTER_CLAUDE
#elif defined(FUZZ_ADAPTER_CODEX)
#define KIND ADAPTER_CODEX
#else
#error "define FUZZ_ADAPTER_NDJSON, _CLAUDE or _CODEX"
#endif

/* Two secrets as a harness's `secrets =` would hand over. The second starts
 * with a letter that is also a JSON escape ("\n…"), the third holds a '/'
 * (which a runner's JSON encoder may write as "\/"). */
static const char *const secrets[] = {"sk-ant-FUZZ0secret0A1b2C3", "nFUZZtok-9f8e7d6c",
				      "ghp/FUZZ+slash=42", NULL};

static Coordinator coord;
static Harness harness;
static json_t *messages;

static void
noop_cb(evutil_socket_t fd, short what, void *arg)
{
}

static void
setup(void)
{
	static char *argv[] = {(char *)"runner", NULL};

	if (coord.base)
		return;
	log_open("fuzz");
	log_set_max_level(LOG_CRIT);
	coord.base = event_base_new();
	coord.commit_ev = event_new(coord.base, -1, 0, noop_cb, NULL);
	coord.flush_ev = event_new(coord.base, -1, 0, noop_cb, NULL);
	coord.conf.reuse = REUSE_THREAD;
	coord.conf.output_chunk_max = 65536;
	harness.name = (char *)"fuzz";
	harness.adapter = KIND;
	harness.command = KIND == ADAPTER_NDJSON ? argv : NULL;
	harness.max_line = 4096;
	harness.timeout_ms = 60000;
	messages = json_pack("[{s:s, s:s}]", "role", "user", "content", "do the thing");
	if (!coord.base || !coord.commit_ev || !messages)
		abort();
}

static bool
fz_holds_secret(const char *s, size_t len)
{
	for (size_t i = 0; secrets[i]; i++)
		if (memmem(s, len, secrets[i], strlen(secrets[i])))
			return true;
	return false;
}

static void
fail(const char *what, const char *text)
{
	fprintf(stderr, "fuzz-adapter: %s: %s\n", what, text ? text : "(null)");
	abort();
}

/* Every string and key of j, decoded. */
static void
check_tree(const json_t *j, const char *text)
{
	const char *k;
	json_t *v;
	size_t i;

	switch (json_typeof(j)) {
	case JSON_OBJECT:
		json_object_foreach((json_t *)j, k, v)
		{
			if (fz_holds_secret(k, strlen(k)))
				fail("a secret in a key", text);
			check_tree(v, text);
		}
		break;
	case JSON_ARRAY: json_array_foreach(j, i, v) check_tree(v, text); break;
	case JSON_STRING:
		if (fz_holds_secret(json_string_value(j), json_string_length(j)))
			fail("a secret in a string", text);
		break;
	case JSON_INTEGER:
	case JSON_REAL: {
		char *t = json_dumps(j, JSON_ENCODE_ANY);
		if (t && fz_holds_secret(t, strlen(t)))
			fail("a secret in a number", text);
		free(t);
		break;
	}
	default: break;
	}
}

static void
check_ops(void)
{
	Op *op;

	while ((op = coord.ops_head)) {
		coord.ops_head = op->next;
		if (op->text) {
			json_error_t e;
			if (strlen(op->text) != op->len)
				fail("text length mismatch", op->text);
			json_t *j = json_loadb(op->text, op->len, 0, &e);
			if (!j)
				fail("a chunk that is not JSON", op->text);
			if (!json_is_object(j) || !json_is_string(json_object_get(j, "type")))
				fail("a chunk without a string type", op->text);
			check_tree(j, op->text);
			json_decref(j);
		}
		if (op->fields) {
			char *t = json_dumps(op->fields, JSON_COMPACT);
			check_tree(op->fields, t);
			free(t);
		}
		op_free(op);
	}
	coord.ops_tail = NULL;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ExecSpec spec = {0};
	Run *run;

	if (size > 256 * 1024)
		return 0;
	setup();
	run = run_new(&coord, "00000000-0000-4000-8000-000000000000", "thread-fuzz");
	if (!run)
		abort();
	run->harness = &harness;
	run->adapter = adapter_get(KIND);
	for (size_t i = 0; secrets[i]; i++)
		strv_push(&run->secret_values, secrets[i]);
	if (run->adapter->init && run->adapter->init(run) < 0)
		abort();
	run->state = RUN_STARTING;
	if (run->adapter->begin(run, messages, NULL, &spec) < 0)
		abort();
	exec_spec_done(&spec);
	run->state = RUN_EXECUTING;
	run->exec_id = 1;
	check_ops();

	uint8_t mode = size ? data[0] : 0;
	const uint8_t *in = size ? data + 1 : data;
	size_t n = size ? size - 1 : 0;
	const uint8_t *nul = memchr(in, 0, n);
	size_t out_len = nul ? (size_t)(nul - in) : n;
	size_t step = (mode & 0x3f) ? (mode & 0x3f) : out_len + 1;
	if (nul)
		(void)outbuf_add(&run->out[2], (const char *)nul + 1, n - out_len - 1);
	for (size_t off = 0; off < out_len && run->state != RUN_DONE; off += step) {
		size_t k = MIN(step, out_len - off);
		if (outbuf_add(&run->out[1], (const char *)in + off, k) < 0)
			abort();
		run->adapter->drain(run, false);
		check_ops();
	}
	if (run->state != RUN_DONE) {
		run->adapter->drain(run, true);
		check_ops();
	}
	if (run->state != RUN_DONE) {
		run->adapter->exit(run, (mode & 0x40) ? 1 : 0, 0,
				   (mode & 0x80) ? "signal" : "exit");
		check_ops();
	}
	run_free(run);
	check_ops();
	return 0;
}
