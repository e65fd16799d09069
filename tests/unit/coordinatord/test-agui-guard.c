/* SPDX-License-Identifier: MIT */
/*
 * test-agui-guard.c — daemons/coordinatord/agui-guard.c: every stream a
 * driven run stores is a valid AG-UI stream (the rules in its header): a
 * RUN_STARTED first and once, what is open closed before the end (an
 * interrupted result for a tool call without one), the run's ids on its
 * terminal chunk, nothing after RUN_FINISHED; and agui_chunk_check().
 *
 * The guard works on a Run's ids and its state (run->agui) alone, so a Run
 * on the stack stands in for a driven one.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "run.h"
#include "json-util.h"
#include "macro.h"

static int
setup(void **state)
{
	Run *run = calloc(1, sizeof(*run));
	if (!run)
		return -1;
	snprintf(run->run_id, sizeof(run->run_id), "run-1");
	run->thread_id = strdup("t-1");
	*state = run;
	return 0;
}

static int
teardown(void **state)
{
	Run *run = *state;
	json_decref(run->agui);
	free(run->thread_id);
	free(run);
	return 0;
}

static json_t *
chunk(const char *text)
{
	json_t *j = json_loads(text, 0, NULL);
	assert_non_null(j);
	return j;
}

static const char *
type_of(const json_t *c)
{
	return json_string_value(json_object_get(c, "type"));
}

/* The types of an array of chunks, space-separated. */
static char *
types(const json_t *arr)
{
	static char buf[512];
	size_t i;
	json_t *c;
	buf[0] = 0;
	json_array_foreach(arr, i, c)
	{
		if (buf[0])
			strcat(buf, " ");
		strcat(buf, type_of(c) ?: "?");
	}
	return buf;
}

static void
test_run_started_comes_first_and_once(void **state)
{
	Run *run = *state;
	json_t *before = NULL;
	json_auto_t *c = chunk("{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\"}");

	assert_int_equal(agui_guard_chunk(run, c, &before), AGUI_KEEP);
	assert_non_null(before);
	assert_string_equal(types(before), "RUN_STARTED");
	const json_t *rs = json_array_get(before, 0);
	assert_string_equal(json_string_value(json_object_get(rs, "threadId")), "t-1");
	assert_string_equal(json_string_value(json_object_get(rs, "runId")), "run-1");
	json_decref(before);
	/* an agent's own RUN_STARTED later is dropped */
	json_auto_t *again = chunk("{\"type\":\"RUN_STARTED\",\"threadId\":\"x\",\"runId\":\"y\"}");
	assert_int_equal(agui_guard_chunk(run, again, &before), AGUI_DROP);
	assert_null(before);
}

static void
test_end_closes_what_is_open(void **state)
{
	Run *run = *state;
	json_t *before = NULL;
	static const char *const stream[] = {
	    "{\"type\":\"RUN_STARTED\",\"threadId\":\"t-1\",\"runId\":\"run-1\"}",
	    "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\"}",
	    "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c1\",\"toolCallName\":\"ls\"}",
	    "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c2\",\"toolCallName\":\"cat\"}",
	    "{\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"c2\"}",
	    "{\"type\":\"STEP_STARTED\",\"stepName\":\"s\"}",
	};
	for (size_t i = 0; i < ELEMENTSOF(stream); i++) {
		json_auto_t *c = chunk(stream[i]);
		assert_int_not_equal(agui_guard_chunk(run, c, &before), AGUI_DROP);
		assert_null(before);
	}
	json_t *end = NULL; /* no terminal chunk: failed gets a RUN_ERROR */
	json_auto_t *cl = agui_guard_end(run, &end, "failed");
	assert_string_equal(
	    types(cl),
	    "TEXT_MESSAGE_END TOOL_CALL_END TOOL_CALL_RESULT TOOL_CALL_RESULT STEP_FINISHED");
	/* the interrupted results: one per call without a result, ids filled */
	const json_t *r = json_array_get(cl, 2);
	assert_string_equal(json_string_value(json_object_get(r, "toolCallId")), "c1");
	assert_string_equal(json_string_value(json_object_get(r, "messageId")), "c1-result");
	assert_non_null(strstr(json_string_value(json_object_get(r, "content")), "interrupted"));
	assert_string_equal(
	    json_string_value(json_object_get(
		json_object_get(json_object_get(r, "metadata"), "tanstack"), "state")),
	    "output-error");
	assert_string_equal(type_of(end), "RUN_ERROR");
	assert_string_equal(json_string_value(json_object_get(end, "runId")), "run-1");
	assert_string_equal(
	    json_string_value(json_object_get(
		json_object_get(json_object_get(end, "metadata"), "tanstack"), "threadId")),
	    "t-1");
	json_decref(end);
}

static void
test_completed_gets_run_finished_and_nothing_follows(void **state)
{
	Run *run = *state;
	json_t *before = NULL;
	json_t *end = NULL;

	/* nothing stored yet: RUN_STARTED is put before the end */
	json_auto_t *cl = agui_guard_end(run, &end, "completed");
	assert_string_equal(types(cl), "RUN_STARTED");
	assert_string_equal(type_of(end), "RUN_FINISHED");
	assert_string_equal(json_string_value(json_object_get(end, "runId")), "run-1");
	json_decref(end);
	json_auto_t *late = chunk("{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\"}");
	assert_int_equal(agui_guard_chunk(run, late, &before), AGUI_DROP);
}

static void
test_agent_run_finished_gets_the_run_ids(void **state)
{
	Run *run = *state;
	json_t *before = NULL;
	json_auto_t *s =
	    chunk("{\"type\":\"RUN_STARTED\",\"threadId\":\"t-1\",\"runId\":\"run-1\"}");
	assert_int_equal(agui_guard_chunk(run, s, &before), AGUI_KEEP);
	json_auto_t *t =
	    chunk("{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c\",\"toolCallName\":\"x\"}");
	assert_int_equal(agui_guard_chunk(run, t, &before), AGUI_KEEP);
	json_auto_t *res =
	    chunk("{\"type\":\"TOOL_CALL_RESULT\",\"toolCallId\":\"c\",\"content\":\"1\"}");
	assert_int_equal(agui_guard_chunk(run, res, &before), AGUI_CHANGED);
	assert_string_equal(json_string_value(json_object_get(res, "messageId")), "c-result");
	json_auto_t *f =
	    chunk("{\"type\":\"RUN_FINISHED\",\"threadId\":\"own\",\"runId\":\"own\"}");
	assert_int_equal(agui_guard_chunk(run, f, &before), AGUI_CHANGED);
	assert_string_equal(json_string_value(json_object_get(f, "runId")), "run-1");
	assert_string_equal(json_string_value(json_object_get(f, "threadId")), "t-1");
	/* the call had its result: nothing is left to close */
	assert_int_equal(json_array_size(before), 0);
	json_decref(before);
	/* the daemon's terminal RUN_FINISHED after the agent's is dropped */
	json_t *end = chunk("{\"type\":\"RUN_FINISHED\"}");
	json_auto_t *cl = agui_guard_end(run, &end, "completed");
	assert_int_equal(json_array_size(cl), 0);
	assert_null(end);
}

static void
test_state_of_a_run_driven_elsewhere(void **state)
{
	json_t *st = NULL;
	json_auto_t *a = chunk("{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m\"}");
	json_auto_t *b = chunk("{\"type\":\"REASONING_START\",\"messageId\":\"r\"}");
	agui_state_track(&st, a);
	agui_state_track(&st, b);
	json_auto_t *cl = agui_state_closers(&st, "node lost");
	assert_string_equal(types(cl), "TEXT_MESSAGE_END REASONING_END");
	json_decref(st);
}

static void
test_chunk_check(void **state)
{
	Reason why = {""};
#define CHECK(s) agui_chunk_check(json_auto_t_tmp = chunk(s), &why)
	json_t *json_auto_t_tmp;
	static const struct {
		const char *text;
		const char *why; /* NULL: valid */
	} cases[] = {
	    {"{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"x\"}", NULL},
	    {"{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\"}",
	     "TEXT_MESSAGE_CONTENT: \"delta\" is missing or of the wrong type"},
	    {"{\"type\":\"NOPE\"}", "unknown event type \"NOPE\""},
	    {"{\"kind\":\"x\"}", "not an AG-UI event (no string \"type\")"},
	    {"{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"r\",\"timestamp\":\"x\"}",
	     "RUN_STARTED: \"timestamp\" is not an integer"},
	    {"{\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":7}",
	     "RUN_FINISHED: \"runId\" is not a string"},
	};
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		why.msg[0] = 0;
		int r = CHECK(cases[i].text);
		json_decref(json_auto_t_tmp);
		if (!cases[i].why) {
			if (r != 0)
				fail_msg("%s: %s", cases[i].text, why.msg);
		} else {
			assert_int_equal(r, -EBADMSG);
			assert_string_equal(why.msg, cases[i].why);
		}
	}
#undef CHECK
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_run_started_comes_first_and_once, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_end_closes_what_is_open, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_completed_gets_run_finished_and_nothing_follows,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_agent_run_finished_gets_the_run_ids, setup,
					    teardown),
	    cmocka_unit_test(test_state_of_a_run_driven_elsewhere),
	    cmocka_unit_test(test_chunk_check),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
