/* SPDX-License-Identifier: MIT */
/*
 * harness.h — the built-in `shell` harness adapter.
 *
 * The shell harness runs the text of the last user message with the
 * configured shell (`sh -c`) in /workspace and reports it as AG-UI chunks:
 *   RUN_STARTED, CUSTOM sandbox.created|resumed,
 *   TOOL_CALL_START / TOOL_CALL_ARGS {"command":…} / TOOL_CALL_END,
 *   CUSTOM process.stdout|process.stderr {text} as output arrives,
 *   TOOL_CALL_RESULT {exitCode}, then RUN_FINISHED (exit 0) or
 *   RUN_ERROR {message, code:"exit_status"}.
 *
 * Output is coalesced (everything that arrived in one event-loop turn becomes
 * one chunk per stream) and never split inside a UTF-8 sequence: an incomplete
 * trailing sequence waits for its next bytes; bytes that can never be valid
 * UTF-8 become U+FFFD.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The command of the last user message: content as a string, or the
 * concatenated text parts ({type:"text", text|content}). -ENOENT when there
 * is none, -EINVAL when messages is not an array. *ret is malloc'd. */
int shell_command_from_messages(const json_t *messages, char **ret);

/* A growing byte buffer for one output stream of one exec. `taken` counts
 * the raw bytes handed out by outbuf_take() since the stream began (the
 * stream offset coordinatord persists as "consumed"); `added` the bytes
 * received (the offset the next EXEC_OUTPUT must start at). */
typedef struct OutBuf {
	char *data;
	size_t len, cap;
	uint64_t taken, added;
} OutBuf;

int outbuf_add(OutBuf *b, const void *p, size_t n);
/* Take up to max bytes of publishable text: on a UTF-8 boundary, and only the
 * complete prefix unless final. Returns a malloc'd valid UTF-8 string and its
 * length, or NULL when nothing is ready (or on OOM, with *ret_len = 0). */
char *outbuf_take(OutBuf *b, size_t max, bool final, size_t *ret_len);
void outbuf_done(OutBuf *b);
