/* SPDX-License-Identifier: MIT */
/*
 * sbx-exec-body.h — the start body of a sandbox exec (docs/SANDBOX-API.md
 * "Exec"), checked and turned into what SBX_EXEC carries; and signal names.
 * Pure: no I/O, no Router (tests/unit/routerd/test-sbx-exec-body.c).
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct SbxExecReq {
	char **argv;	  /* NULL-terminated, or NULL when command is given */
	char *command;	  /* or NULL */
	char *cwd;	  /* or NULL (the default, /workspace) */
	char **env;	  /* "K=V" items, NULL when none */
	char *stdin_data; /* the stdin bytes (stdin or stdinBase64), or NULL */
	size_t stdin_len;
	bool has_stdin;
	int64_t timeout_ms; /* 0: none given */
	bool background;
} SbxExecReq;

/* Check body (a JSON object) and fill *ret (zeroed first). allow_stdin:
 * stdin/stdinBase64 may be given (not in a WebSocket's first message). 0, or
 * -EINVAL with the reason in *ret_why (static text), or -ENOMEM. On error
 * *ret holds nothing. */
int sbx_exec_req_parse(const json_t *body, bool allow_stdin, SbxExecReq *ret, const char **ret_why);
void sbx_exec_req_done(SbxExecReq *r);

/* A signal as "SIGTERM", "TERM", "15" (a JSON number is given as its decimal
 * text): its number, or -EINVAL. NULL: SIGKILL. */
int sbx_signal_parse(const char *s);
