/* SPDX-License-Identifier: MIT */
/*
 * test-chat.c — daemons/coordinatord/chat.c: a run's chunks rebuilt into the
 * TanStack AI UIMessage a client's StreamProcessor builds from them (the
 * table in chat.c's header), the user messages stored with a run, the chunks
 * passed over unparsed, and the -EFBIG bound.
 *
 * chat.c is included: its rebuild (Build, apply_text,
 * finish_assistant_message) is static, the part of the hydrate that needs
 * no log, no loop and no cluster. The cases mirror tests/reliability's
 * hydrate-diff (which compares with @tanstack/ai itself) in seconds.
 */
#include "../../../daemons/coordinatord/chat.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

/* The assistant message of a run's chunks (texts, one per element). */
static json_t *
rebuild(const char *const *chunks, size_t n, size_t max_bytes, int *ret)
{
	Build b;
	size_t bytes = 0;
	json_t *out = json_array();
	int r = build_init(&b, &bytes, max_bytes);

	for (size_t i = 0; r == 0 && i < n; i++)
		r = apply_text(&b, chunks[i], strlen(chunks[i]));
	if (r == 0)
		r = finish_assistant_message(out, &b, "run-1");
	build_done(&b);
	*ret = r;
	return out;
}

static json_t *
message_of(const char *const *chunks, size_t n)
{
	int r;
	json_t *out = rebuild(chunks, n, SIZE_MAX / 4, &r);
	assert_int_equal(r, 0);
	assert_int_equal(json_array_size(out), 1);
	json_t *m = json_incref(json_array_get(out, 0));
	json_decref(out);
	assert_string_equal(json_string_value(json_object_get(m, "role")), "assistant");
	return m;
}

static const json_t *
part(const json_t *m, size_t i)
{
	return json_array_get(json_object_get(m, "parts"), i);
}

static const char *
str(const json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static void
test_text_deltas_join_into_one_part(void **state)
{
	static const char *const c[] = {
	    "{\"type\":\"RUN_STARTED\",\"threadId\":\"t\",\"runId\":\"run-1\"}",
	    "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-1\",\"role\":\"assistant\"}",
	    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-1\",\"delta\":\"Hel\"}",
	    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-1\",\"delta\":\"lo \\u00e9\"}",
	    "{\"type\":\"TEXT_MESSAGE_END\",\"messageId\":\"m-1\"}",
	    "{\"type\":\"TEXT_MESSAGE_START\",\"messageId\":\"m-2\",\"role\":\"assistant\"}",
	    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m-2\",\"delta\":\"!\"}",
	    "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"run-1\"}",
	};
	json_auto_t *m = message_of(c, ELEMENTSOF(c));
	/* the id is the first TEXT_MESSAGE_START's; consecutive text is one part */
	assert_string_equal(str(m, "id"), "m-1");
	assert_int_equal(json_array_size(json_object_get(m, "parts")), 1);
	assert_string_equal(str(part(m, 0), "type"), "text");
	assert_string_equal(str(part(m, 0), "content"), "Hello \xc3\xa9!");
}

static void
test_tool_call_lifecycle(void **state)
{
	static const char *const c[] = {
	    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"let me look\"}",
	    "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c1\",\"toolCallName\":\"ls\"}",
	    "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c1\",\"delta\":\"{\\\"path\\\":\"}",
	    "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"c1\",\"delta\":\"\\\"/w\\\"}\"}",
	    "{\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"c1\"}",
	    "{\"type\":\"TOOL_CALL_RESULT\",\"toolCallId\":\"c1\",\"messageId\":\"r\","
	    "\"content\":\"{\\\"files\\\":[\\\"a\\\"]}\"}",
	    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"done\"}",
	};
	json_auto_t *m = message_of(c, ELEMENTSOF(c));
	/* no TEXT_MESSAGE_START: the run's id */
	assert_string_equal(str(m, "id"), "run-1");
	assert_int_equal(json_array_size(json_object_get(m, "parts")), 4);
	assert_string_equal(str(part(m, 0), "content"), "let me look");
	const json_t *call = part(m, 1);
	assert_string_equal(str(call, "type"), "tool-call");
	assert_string_equal(str(call, "id"), "c1");
	assert_string_equal(str(call, "name"), "ls");
	assert_string_equal(str(call, "arguments"), "{\"path\":\"/w\"}");
	assert_string_equal(str(json_object_get(call, "input"), "path"), "/w");
	assert_string_equal(str(call, "state"), "complete");
	/* the output parsed as JSON */
	assert_string_equal(json_string_value(json_array_get(
				json_object_get(json_object_get(call, "output"), "files"), 0)),
			    "a");
	assert_string_equal(str(part(m, 2), "type"), "tool-result");
	assert_string_equal(str(part(m, 2), "toolCallId"), "c1");
	assert_string_equal(str(part(m, 2), "state"), "complete");
	/* text after a tool call is a new part */
	assert_string_equal(str(part(m, 3), "content"), "done");
}

static void
test_tool_error_result_and_replaced_result(void **state)
{
	static const char *const c[] = {
	    "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"c1\",\"toolCallName\":\"x\"}",
	    "{\"type\":\"TOOL_CALL_RESULT\",\"toolCallId\":\"c1\",\"content\":\"first\"}",
	    "{\"type\":\"TOOL_CALL_RESULT\",\"toolCallId\":\"c1\",\"content\":"
	    "\"{\\\"status\\\":\\\"interrupted\\\",\\\"error\\\":\\\"gone\\\"}\","
	    "\"metadata\":{\"tanstack\":{\"state\":\"output-error\"}},\"state\":\"output-error\"}",
	};
	json_auto_t *m = message_of(c, ELEMENTSOF(c));
	/* the first result part is dropped: the call and the second result remain */
	assert_int_equal(json_array_size(json_object_get(m, "parts")), 2);
	const json_t *call = part(m, 0);
	assert_string_equal(str(call, "state"), "error");
	assert_string_equal(str(json_object_get(call, "output"), "error"), "gone");
	assert_string_equal(str(part(m, 1), "state"), "error");
}

static void
test_run_finished_settles_streaming_calls(void **state)
{
	static const char *const c[] = {
	    "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"a\",\"toolCallName\":\"x\"}",
	    "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"b\",\"toolCallName\":\"y\"}",
	    "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"b\",\"delta\":\"{\"}",
	    "{\"type\":\"TOOL_CALL_START\",\"toolCallId\":\"a\",\"toolCallName\":\"again\"}",
	    "{\"type\":\"RUN_FINISHED\",\"threadId\":\"t\",\"runId\":\"run-1\"}",
	};
	json_auto_t *m = message_of(c, ELEMENTSOF(c));
	/* a call started twice counts once */
	assert_int_equal(json_array_size(json_object_get(m, "parts")), 2);
	assert_string_equal(str(part(m, 0), "name"), "x");
	assert_string_equal(str(part(m, 0), "state"), "input-complete");
	assert_string_equal(str(part(m, 1), "state"), "input-complete");
	assert_string_equal(str(part(m, 1), "arguments"), "{");
	assert_null(json_object_get(part(m, 1), "input"));
}

static void
test_unknown_and_bad_chunks_change_nothing(void **state)
{
	static const char *const c[] = {
	    "{\"type\":\"CUSTOM\",\"name\":\"process.stdout\",\"value\":{\"text\":\"x\"}}",
	    "not json",
	    "[1,2]",
	    "{\"type\":\"STEP_STARTED\",\"stepName\":\"s\"}",
	    "{\"type\":\"TOOL_CALL_ARGS\",\"toolCallId\":\"nope\",\"delta\":\"x\"}",
	    "{\"type\":\"TOOL_CALL_END\",\"toolCallId\":\"nope\"}",
	};
	int r;
	json_auto_t *out = rebuild(c, ELEMENTSOF(c), SIZE_MAX / 4, &r);
	assert_int_equal(r, 0);
	/* no part: no assistant message */
	assert_int_equal(json_array_size(out), 0);
}

static void
test_chunk_skippable(void **state)
{
#define SKIP(s) chunk_skippable(s, strlen(s))
	assert_true(SKIP("{\"type\":\"CUSTOM\",\"name\":\"process.stdout\"}"));
	assert_true(SKIP("{\"type\":\"STEP_STARTED\",\"stepName\":\"s\"}"));
	/* a type the rebuild uses, or a chunk whose parse could find one */
	assert_false(SKIP("{\"type\":\"TEXT_MESSAGE_CONTENT\",\"delta\":\"x\"}"));
	assert_false(SKIP("{\"type\":\"CUSTOM\",\"type\":\"TOOL_CALL_START\"}"));
	assert_false(SKIP("{\"type\":\"CUSTOM\",\"v\":\"\\u0074ype\"}"));
	assert_false(SKIP("{\"type\":\"CUST\\u004fM\"}"));
	assert_false(SKIP("{ \"type\":\"CUSTOM\"}"));
	assert_false(SKIP("{\"type\":\""));
#undef SKIP
}

static void
test_user_messages(void **state)
{
	json_auto_t *out = json_array();
	size_t bytes = 0;
	const char *input = "[{\"role\":\"system\",\"content\":\"sys\"},"
			    "{\"role\":\"user\",\"id\":\"u1\",\"content\":\"hi\"},"
			    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
			    "{\"type\":\"text\",\"content\":\"b\"}]}]";
	assert_int_equal(add_user_messages(out, "run-1", input, &bytes, 1 << 20), 0);
	assert_int_equal(json_array_size(out), 2);
	assert_string_equal(str(json_array_get(out, 0), "id"), "u1");
	assert_string_equal(
	    str(json_array_get(json_object_get(json_array_get(out, 0), "parts"), 0), "content"),
	    "hi");
	/* no id: the run's, with the message's index */
	assert_string_equal(str(json_array_get(out, 1), "id"), "run-1-user-2");
	assert_string_equal(
	    str(json_array_get(json_object_get(json_array_get(out, 1), "parts"), 0), "content"),
	    "ab");
	assert_true(bytes >= 2 * USER_MESSAGE_OVERHEAD + strlen("hi") + strlen("ab"));
	/* not an array: nothing */
	assert_int_equal(add_user_messages(out, "run-1", "{}", &bytes, 1 << 20), 0);
	assert_int_equal(json_array_size(out), 2);
	/* past the bound */
	bytes = 0;
	assert_int_equal(add_user_messages(out, "run-1", input, &bytes, 64), -EFBIG);
}

static void
test_bound_stops_the_rebuild(void **state)
{
	static const char *const c[] = {
	    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"0123456789\"}",
	    "{\"type\":\"TEXT_MESSAGE_CONTENT\",\"messageId\":\"m\",\"delta\":\"0123456789\"}",
	};
	int r;
	json_auto_t *a = rebuild(c, 1, 15, &r);
	assert_int_equal(r, -EFBIG); /* 10 bytes of text, then the message's overhead */
	json_auto_t *b = rebuild(c, 2, 19, &r);
	assert_int_equal(r, -EFBIG); /* the second delta is past it */
	json_auto_t *ok = rebuild(c, 2, 1000, &r);
	assert_int_equal(r, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_text_deltas_join_into_one_part),
	    cmocka_unit_test(test_tool_call_lifecycle),
	    cmocka_unit_test(test_tool_error_result_and_replaced_result),
	    cmocka_unit_test(test_run_finished_settles_streaming_calls),
	    cmocka_unit_test(test_unknown_and_bad_chunks_change_nothing),
	    cmocka_unit_test(test_chunk_skippable),
	    cmocka_unit_test(test_user_messages),
	    cmocka_unit_test(test_bound_stops_the_rebuild),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
