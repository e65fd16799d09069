/* SPDX-License-Identifier: MIT */
/*
 * test-sbx-exec-body.c — daemons/routerd/sbx-exec-body.c: the start body of a
 * sandbox exec (argv or command, cwd, env as K=V, stdin or stdinBase64,
 * timeoutMs, background) and signal names.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "sbx-exec-body.h"

static int
parse(const char *text, bool allow_stdin, SbxExecReq *r, const char **why)
{
	/* NUL allowed here to reach the parser's own check (routerd's JSON reader
	 * refuses \u0000 before) */
	json_t *j = json_loads(text, JSON_ALLOW_NUL, NULL);
	assert_non_null(j);
	int k = sbx_exec_req_parse(j, allow_stdin, r, why);
	json_decref(j);
	return k;
}

static void
test_argv_env_cwd(void **state)
{
	SbxExecReq r;
	const char *why = NULL;

	assert_int_equal(
	    parse("{\"argv\":[\"ls\",\"-l\",\"\"],\"cwd\":\"sub\",\"env\":{\"A\":\"1\","
		  "\"B\":\"x=y\"},\"timeoutMs\":500,\"background\":true}",
		  true, &r, &why),
	    0);
	assert_string_equal(r.argv[0], "ls");
	assert_string_equal(r.argv[2], "");
	assert_null(r.argv[3]);
	assert_null(r.command);
	assert_string_equal(r.cwd, "sub");
	assert_string_equal(r.env[0], "A=1");
	assert_string_equal(r.env[1], "B=x=y");
	assert_int_equal(r.timeout_ms, 500);
	assert_true(r.background);
	assert_false(r.has_stdin);
	sbx_exec_req_done(&r);

	assert_int_equal(parse("{\"command\":\"echo hi\",\"cwd\":\"\"}", true, &r, &why), 0);
	assert_string_equal(r.command, "echo hi");
	assert_null(r.argv);
	assert_null(r.cwd); /* empty: the default */
	assert_false(r.background);
	sbx_exec_req_done(&r);
}

static void
test_stdin(void **state)
{
	SbxExecReq r;
	const char *why = NULL;

	assert_int_equal(parse("{\"argv\":[\"cat\"],\"stdin\":\"a\\u0000b\"}", true, &r, &why), 0);
	assert_true(r.has_stdin);
	assert_int_equal(r.stdin_len, 3);
	assert_memory_equal(r.stdin_data, "a\0b", 3);
	sbx_exec_req_done(&r);
	assert_int_equal(parse("{\"argv\":[\"cat\"],\"stdinBase64\":\"/wA=\"}", true, &r, &why), 0);
	assert_int_equal(r.stdin_len, 2);
	assert_memory_equal(r.stdin_data, "\xff\0", 2);
	sbx_exec_req_done(&r);
	assert_int_equal(parse("{\"argv\":[\"cat\"],\"stdinBase64\":\"aGk=aGk=\"}", true, &r, &why),
			 -EINVAL); /* padding inside */
	assert_int_equal(parse("{\"argv\":[\"cat\"],\"stdinBase64\":\"\"}", true, &r, &why), 0);
	assert_true(r.has_stdin);
	assert_int_equal(r.stdin_len, 0);
	sbx_exec_req_done(&r);
	/* a WebSocket's start body carries none */
	assert_int_equal(parse("{\"argv\":[\"cat\"],\"stdin\":\"x\"}", false, &r, &why), -EINVAL);
	assert_non_null(why);
}

static void
test_refused(void **state)
{
	static const char *const bad[] = {
	    "[]",
	    "{}",
	    "{\"argv\":[]}",
	    "{\"argv\":[\"\"]}",
	    "{\"argv\":\"ls\"}",
	    "{\"argv\":[1]}",
	    "{\"argv\":[\"a\\u0000b\"]}",
	    "{\"argv\":[\"ls\"],\"command\":\"ls\"}",
	    "{\"command\":\"\"}",
	    "{\"command\":\"ls\",\"cwd\":3}",
	    "{\"command\":\"ls\",\"env\":[]}",
	    "{\"command\":\"ls\",\"env\":{\"\":\"v\"}}",
	    "{\"command\":\"ls\",\"env\":{\"A=B\":\"v\"}}",
	    "{\"command\":\"ls\",\"env\":{\"A\":1}}",
	    "{\"command\":\"ls\",\"timeoutMs\":0}",
	    "{\"command\":\"ls\",\"timeoutMs\":\"5\"}",
	    "{\"command\":\"ls\",\"background\":1}",
	    "{\"command\":\"ls\",\"stdin\":\"a\",\"stdinBase64\":\"YQ==\"}",
	    "{\"command\":\"ls\",\"stdinBase64\":\"abc\"}",
	    "{\"command\":\"ls\",\"stdinBase64\":\"!!!!\"}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		SbxExecReq r;
		const char *why = NULL;
		if (parse(bad[i], true, &r, &why) != -EINVAL)
			fail_msg("accepted: %s", bad[i]);
		assert_non_null(why);
		assert_null(r.argv);
		assert_null(r.env);
		assert_null(r.stdin_data);
	}
}

static void
test_signals(void **state)
{
	assert_int_equal(sbx_signal_parse(NULL), SIGKILL);
	assert_int_equal(sbx_signal_parse(""), SIGKILL);
	assert_int_equal(sbx_signal_parse("SIGTERM"), SIGTERM);
	assert_int_equal(sbx_signal_parse("term"), SIGTERM);
	assert_int_equal(sbx_signal_parse("SIGINT"), SIGINT);
	assert_int_equal(sbx_signal_parse("9"), SIGKILL);
	assert_int_equal(sbx_signal_parse("15"), SIGTERM);
	assert_int_equal(sbx_signal_parse("0"), -EINVAL);
	assert_int_equal(sbx_signal_parse("999"), -EINVAL);
	assert_int_equal(sbx_signal_parse("15x"), -EINVAL);
	assert_int_equal(sbx_signal_parse("SIGNOPE"), -EINVAL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_argv_env_cwd),
	    cmocka_unit_test(test_stdin),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_signals),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
