/* SPDX-License-Identifier: MIT */
/*
 * test-harness-conf.c — daemons/coordinatord/harness-conf.c: the
 * [harness.NAME] and [tool.NAME] sections, their defaults, the spellings each
 * key accepts and the exact "FILE:LINE: KEY: reason" of every refusal.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "adapter.h"

static void
expect_error(const char *text, const char *want)
{
	HarnessSet set = {0};
	char err[1024] = "";

	if (harness_load_string("h.conf", text, &set, err, sizeof(err)) != -EINVAL)
		fail_msg("accepted: %s", text);
	if (!streq(err, want))
		fail_msg("for %s\n got: %s\nwant: %s", text, err, want);
}

static void
test_harness_conf_defaults(void **state)
{
	HarnessSet set = {0};
	char err[1024] = "";
	(void)state;

	assert_int_equal(harness_load_string("h.conf",
					     "[harness.a]\nadapter = codex\n"
					     "[tool.t]\ncommand = [\"/bin/t\"]\n",
					     &set, err, sizeof(err)),
			 0);
	const Harness *a = harness_find(&set, "a"), *sh = harness_find(&set, "shell");
	assert_non_null(a);
	assert_non_null(sh);
	assert_int_equal(a->adapter, ADAPTER_CODEX);
	assert_null(a->command);
	assert_null(a->env);
	assert_null(a->secrets);
	assert_null(a->egress);
	assert_null(a->egress_allow_private);
	assert_null(a->tools);
	assert_int_equal(a->timeout_ms, 0);
	assert_int_equal(a->max_line, 1 << 20);
	assert_false(a->keep_processes);
	assert_int_equal(sh->adapter, ADAPTER_SHELL);
	assert_int_equal(sh->max_line, 1 << 20);
	const Tool *t = tool_find(&set, "t");
	assert_non_null(t);
	assert_int_equal(t->timeout_ms, 60000);
	assert_null(t->description);
	assert_null(t->schema);
	assert_string_equal(t->command[0], "/bin/t");
	assert_null(t->command[1]);
	harness_set_done(&set);
}

static void
test_harness_conf_values(void **state)
{
	HarnessSet set = {0};
	char err[1024] = "";
	(void)state;

	assert_int_equal(
	    harness_load_string("h.conf",
				"[harness.x-1.b_c]\n"
				"adapter = ndjson\n"
				"command = [\"/w/run\", \"-v\"]\n"
				"env = {\"A\": \"1\", \"B_2\": \"x y\"}\n"
				"secrets = K1, K2\tK3\n"
				"egress = api.example.com example.org:8443\n"
				"egress_allow_private = 10.0.0.0/8,fd00::/8\n"
				"timeout_ms = 604800000\n"
				"max_line = 64M\n"
				"keep_processes = ON\n"
				"tools = t\n"
				"adapter = claude-code\n" /* a key set again overrides */
				"[tool.t]\n"
				"command = [\"/bin/t\"]\n"
				"description = Search the tracker\n"
				"schema = {\"type\": \"object\"}\n"
				"timeout_ms = 1\n",
				&set, err, sizeof(err)),
	    0);
	const Harness *h = harness_find(&set, "x-1.b_c");
	assert_non_null(h);
	assert_int_equal(h->adapter, ADAPTER_CLAUDE);
	assert_string_equal(h->command[0], "/w/run");
	assert_string_equal(h->command[1], "-v");
	assert_null(h->command[2]);
	assert_string_equal(h->env[0], "A=1");
	assert_string_equal(h->env[1], "B_2=x y");
	assert_null(h->env[2]);
	assert_string_equal(h->secrets[0], "K1");
	assert_string_equal(h->secrets[1], "K2");
	assert_string_equal(h->secrets[2], "K3");
	assert_null(h->secrets[3]);
	assert_string_equal(h->egress[1], "example.org:8443");
	assert_string_equal(h->egress_allow_private[1], "fd00::/8");
	assert_int_equal(h->timeout_ms, 604800000);
	assert_int_equal(h->max_line, 64 << 20);
	assert_true(h->keep_processes);
	assert_string_equal(h->tools[0], "t");
	const Tool *t = tool_find(&set, "t");
	assert_string_equal(t->description, "Search the tracker");
	assert_true(json_is_object(t->schema));
	assert_int_equal(t->timeout_ms, 1);
	harness_set_done(&set);

	/* the other spellings of booleans, sizes, an empty list */
	assert_int_equal(harness_load_string("h.conf",
					     "[harness.s]\nadapter = shell\nkeep_processes = 0\n"
					     "max_line = 256\nsecrets =\n",
					     &set, err, sizeof(err)),
			 0);
	h = harness_find(&set, "s");
	assert_false(h->keep_processes);
	assert_int_equal(h->max_line, 256);
	assert_null(h->secrets);
	harness_set_done(&set);
}

static void
test_harness_conf_errors(void **state)
{
	(void)state;

	expect_error("[harness.a]\nadapter = bash\n",
		     "h.conf:2: adapter: 'bash': expected shell, ndjson, claude-code or codex");
	expect_error("[harness.a b]\nadapter = shell\n",
		     "h.conf:2: adapter: harness name 'a b': use 1..64 of [A-Za-z0-9._-]");
	expect_error("[harness.a]\nnope = 1\n", "h.conf:2: nope: unknown key in [harness.a]");
	expect_error("[harness.a]\ncommand = claude\n",
		     "h.conf:2: command: 'claude': expected a JSON array of strings, e.g. "
		     "[\"claude\"]");
	expect_error("[harness.a]\ncommand = []\n",
		     "h.conf:2: command: '[]': expected a JSON array of strings, e.g. "
		     "[\"claude\"]");
	expect_error("[harness.a]\ncommand = [\"a\", \"\"]\n",
		     "h.conf:2: command: argument 1 is not a non-empty string");
	expect_error("[harness.a]\ncommand = [\"a\", 1]\n",
		     "h.conf:2: command: argument 1 is not a non-empty string");
	expect_error("[harness.a]\nenv = [1]\n",
		     "h.conf:2: env: '[1]': expected a JSON object of strings");
	expect_error("[harness.a]\nenv = {\"1A\": \"x\"}\n",
		     "h.conf:2: env: '1A' is not NAME: \"string\"");
	expect_error("[harness.a]\nenv = {\"A\": 1}\n",
		     "h.conf:2: env: 'A' is not NAME: \"string\"");
	expect_error("[harness.a]\nsecrets = A B-C\n",
		     "h.conf:2: secrets: 'A B-C': expected environment variable names");
	expect_error("[harness.a]\ntools = a/b\n", "h.conf:2: tools: 'a/b': expected tool names");
	expect_error("[harness.a]\negress = 10.0.0.1\n",
		     "h.conf:2: egress: '10.0.0.1': expected host names (host or host:port, no IP "
		     "literals)");
	expect_error("[harness.a]\negress = a.com:0\n",
		     "h.conf:2: egress: 'a.com:0': expected host names (host or host:port, no IP "
		     "literals)");
	expect_error("[harness.a]\negress_allow_private = 10.0.0.1/8\n",
		     "h.conf:2: egress_allow_private: '10.0.0.1/8': expected IPv4/IPv6 networks "
		     "(address/prefix with the host bits zero, e.g. 10.0.0.0/8 127.0.0.1/32 "
		     "fd00::/8)");
	expect_error("[harness.a]\ntimeout_ms = -1\n",
		     "h.conf:2: timeout_ms: '-1': expected milliseconds (0 = none)");
	expect_error("[harness.a]\ntimeout_ms = 604800001\n",
		     "h.conf:2: timeout_ms: '604800001': expected milliseconds (0 = none)");
	expect_error("[harness.a]\ntimeout_ms = 5s\n",
		     "h.conf:2: timeout_ms: '5s': expected milliseconds (0 = none)");
	expect_error("[harness.a]\nmax_line = 255\n",
		     "h.conf:2: max_line: '255': expected a size from 256 to 64M");
	expect_error("[harness.a]\nmax_line = 65M\n",
		     "h.conf:2: max_line: '65M': expected a size from 256 to 64M");
	expect_error("[harness.a]\nmax_line = lots\n",
		     "h.conf:2: max_line: 'lots': expected a size from 256 to 64M");
	expect_error("[harness.a]\nkeep_processes = maybe\n",
		     "h.conf:2: keep_processes: 'maybe': expected true or false");

	expect_error("[tool.a b]\ncommand = [\"x\"]\n",
		     "h.conf:2: command: tool name 'a b': use 1..64 of [A-Za-z0-9._-]");
	expect_error("[tool.t]\nnope = 1\n", "h.conf:2: nope: unknown key in [tool.t]");
	expect_error("[tool.t]\ncommand = x\n",
		     "h.conf:2: command: 'x': expected a JSON array of strings, e.g. [\"claude\"]");
	expect_error("[tool.t]\nschema = []\n",
		     "h.conf:2: schema: '[]': expected a JSON Schema object");
	expect_error("[tool.t]\ntimeout_ms = 0\n",
		     "h.conf:2: timeout_ms: '0': expected milliseconds (1..86400000)");
	expect_error("[tool.t]\ntimeout_ms = 86400001\n",
		     "h.conf:2: timeout_ms: '86400001': expected milliseconds (1..86400000)");

	/* across sections, after the scan */
	expect_error("[tool.t]\ndescription = x\n", "[tool.t]: command: missing");
	expect_error("[harness.a]\nadapter = shell\ntools = u\n",
		     "[harness.a]: tools: no [tool.u] section");
	expect_error("[harness.a]\ncommand = [\"x\"]\n",
		     "[harness.a]: adapter: missing (shell, ndjson, claude-code or codex)");
	expect_error("[harness.a]\nadapter = ndjson\n",
		     "[harness.a]: command: an ndjson harness needs its command");
	/* the first error of the file is the one reported */
	expect_error("[harness.a]\nadapter = x\n[tool.t]\nnope = 1\n",
		     "h.conf:2: adapter: 'x': expected shell, ndjson, claude-code or codex");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_harness_conf_defaults),
	    cmocka_unit_test(test_harness_conf_values),
	    cmocka_unit_test(test_harness_conf_errors),
	};
	return cmocka_run_group_tests_name("harness-conf", tests, NULL, NULL);
}
