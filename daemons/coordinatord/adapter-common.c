/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "adapter.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "mp-cursor.h"

void
exec_spec_done(ExecSpec *s)
{
	mp_strv_free(s->argv);
	mp_strv_free(s->env);
	free(s->stdin_data);
	*s = (ExecSpec){0};
}

char *
run_take_line(Run *run, int s, size_t *ret_len)
{
	OutBuf *b = &run->out[s];
	char *nl = b->len ? memchr(b->data, '\n', b->len) : NULL;
	if (!nl)
		return NULL;
	size_t n = (size_t)(nl - b->data);
	char *line = malloc(n + 1);
	if (!line)
		return NULL;
	memcpy(line, b->data, n);
	line[n] = '\0';
	memmove(b->data, nl + 1, b->len - n - 1);
	b->len -= n + 1;
	b->taken += n + 1;
	if (n && line[n - 1] == '\r')
		line[--n] = '\0';
	*ret_len = n;
	return line;
}

void
run_keep_stderr(Run *run)
{
	OutBuf *b = &run->out[2];
	size_t cap = sizeof(run->stderr_tail) - 1;
	if (b->len >= cap) {
		memcpy(run->stderr_tail, b->data + b->len - cap, cap);
		run->stderr_len = cap;
	} else {
		size_t keep = MIN(run->stderr_len, cap - b->len);
		memmove(run->stderr_tail, run->stderr_tail + run->stderr_len - keep, keep);
		if (b->len) /* b->data is NULL before the first byte */
			memcpy(run->stderr_tail + keep, b->data, b->len);
		run->stderr_len = keep + b->len;
	}
	run->stderr_tail[run->stderr_len] = '\0';
	b->taken += b->len;
	b->len = 0;
}

const char *
run_stderr_tail(Run *run)
{
	while (run->stderr_len > 0 && (run->stderr_tail[run->stderr_len - 1] == '\n' ||
				       run->stderr_tail[run->stderr_len - 1] == '\r' ||
				       run->stderr_tail[run->stderr_len - 1] == ' '))
		run->stderr_tail[--run->stderr_len] = '\0';
	/* the last 5 lines at most */
	const char *p = run->stderr_tail + run->stderr_len;
	int lines = 0;
	while (p > run->stderr_tail) {
		p--;
		if (*p == '\n' && p + 1 < run->stderr_tail + run->stderr_len && ++lines == 5) {
			p++;
			break;
		}
	}
	/* The kept bytes may begin inside a line cut by the buffer's size, and
	 * so with the end of a secret that redaction cannot recognize: drop that
	 * partial line (or, one long line, as many bytes as the longest secret). */
	size_t cap = sizeof(run->stderr_tail) - 1;
	if (p == run->stderr_tail && run->stderr_len == cap) {
		const char *nl = memchr(p, '\n', run->stderr_len);
		size_t longest = 0;
		for (size_t i = 0; run->secret_values && run->secret_values[i]; i++)
			longest = MAX(longest, strlen(run->secret_values[i]));
		p = nl ? nl + 1 : p + MIN(longest, run->stderr_len);
	}
	/* Redacted here already, before a caller's snprintf may cut a secret at
	 * the end of its message (the record and the log get it redacted again). */
	size_t len = strlen(p);
	_cleanup_free_ char *t = strndup(p, len);
	if (!t || redact_text(run->secret_values, &t, &len) < 0)
		return "";
	const char *src = len > cap ? t + (len - cap) : t;
	run->stderr_len = strlen(src);
	memmove(run->stderr_tail, src, run->stderr_len + 1);
	return run->stderr_tail;
}

void
run_kill_exec(Run *run)
{
	if (!run->exec_id || !peer_is_ready(run->c->shim))
		return;
	(void)msg_call_EXEC_KILL(run->c->shim,
				 &(Msg_EXEC_KILL){.exec_id = run->exec_id, .signal = 9},
				 5 * USEC_PER_SEC, NULL, NULL);
}

void
ending_complete(RunEnding *e, json_t *chunk, json_t *usage)
{
	ending_done(e);
	e->chunk = chunk;
	e->fields = usage ? json_pack("{s:o}", "usage", usage) : NULL;
	snprintf(e->status, sizeof(e->status), "completed");
}

void
ending_fail(RunEnding *e, const char *message, const char *code, int64_t exit_code)
{
	ending_done(e);
	e->chunk = run_error_chunk(message, code, NULL, NULL, 0);
	e->fields = run_error_fields(message, code);
	if (exit_code >= 0 && e->fields)
		json_object_set_new(e->fields, "exitCode", json_integer(exit_code));
	snprintf(e->status, sizeof(e->status), "failed");
}

void
ending_fail_exit(Run *run, RunEnding *e, const char *what, int64_t code, const char *why)
{
	char m[1024];
	const char *tail = run_stderr_tail(run);
	snprintf(m, sizeof(m), "%s (%s %" PRId64 ")%s%s", what, why, code, *tail ? ": " : "", tail);
	ending_fail(e, m, streq(why, "exit") ? RUN_ERR_EXIT_STATUS : why, code);
}

void
ending_apply(Run *run, RunEnding *e)
{
	json_t *chunk = TAKE_PTR(e->chunk), *fields = TAKE_PTR(e->fields);
	run_end(run, chunk, e->status[0] ? e->status : "failed", fields);
}

void
ending_done(RunEnding *e)
{
	json_decref(e->chunk);
	json_decref(e->fields);
	*e = (RunEnding){0};
}

json_t *
ending_save(const RunEnding *e)
{
	if (!e->chunk && !e->status[0])
		return json_null();
	return json_pack("{s:O?, s:O?, s:s}", "chunk", e->chunk, "fields", e->fields, "status",
			 e->status);
}

int
ending_load(RunEnding *e, const json_t *j)
{
	ending_done(e);
	if (!j || json_is_null(j))
		return 0;
	const json_t *chunk = json_object_get(j, "chunk");
	const json_t *fields = json_object_get(j, "fields");
	const char *status = json_string_value(json_object_get(j, "status"));
	if (!json_is_object(j) || !status || strlen(status) >= sizeof(e->status) ||
	    (chunk && !json_is_object(chunk) && !json_is_null(chunk)) ||
	    (fields && !json_is_object(fields) && !json_is_null(fields)))
		return -EBADMSG;
	e->chunk = json_is_object(chunk) ? json_deep_copy(chunk) : NULL;
	e->fields = json_is_object(fields) ? json_deep_copy(fields) : NULL;
	snprintf(e->status, sizeof(e->status), "%s", status);
	return 0;
}

int
agent_cli_begin(Run *run, const char *what, const json_t *messages, const json_t *metadata,
		const char *dflt, const char *const *fixed, ExecSpec *spec, char **ret_prompt,
		const char **ret_session)
{
	char m[128];

	if (shell_command_from_messages(messages, ret_prompt) < 0) {
		snprintf(m, sizeof(m), "%s harness: the last user message has no text", what);
		run_fail(run, m, RUN_ERR_HARNESS_ERROR);
		return -EINVAL;
	}
	if (run->harness->command)
		for (size_t i = 0; run->harness->command[i]; i++)
			strv_push(&spec->argv, run->harness->command[i]);
	else
		strv_push(&spec->argv, dflt);
	for (size_t i = 0; fixed[i]; i++)
		strv_push(&spec->argv, fixed[i]);
	const char *session = json_string_value(json_object_get(metadata, "sessionId"));
	*ret_session = NULL;
	if (session && *session) {
		/* coordinator.c admitted only an identifier; never one that an
		 * agent could read as an option */
		if (session[0] == '-') {
			run_fail(run, "metadata.sessionId must not start with '-'",
				 RUN_ERR_HARNESS_ERROR);
			return -EINVAL;
		}
		*ret_session = session;
	}
	strv_push(&spec->env, "PATH=/usr/local/bin:/usr/bin:/bin");
	strv_push(&spec->env, "HOME=/workspace");
	strv_push(&spec->env, "LANG=C.UTF-8");
	return 0;
}

void
run_gen_id(Run *run, char *buf, size_t len)
{
	snprintf(buf, len, "%.8s-%u", run->run_id, run->id_counter++);
}

extern const Adapter adapter_shell, adapter_ndjson, adapter_claude, adapter_codex;

const Adapter *
adapter_get(AdapterKind k)
{
	switch (k) {
	case ADAPTER_SHELL: return &adapter_shell;
	case ADAPTER_NDJSON: return &adapter_ndjson;
	case ADAPTER_CLAUDE: return &adapter_claude;
	case ADAPTER_CODEX: return &adapter_codex;
	default: return NULL;
	}
}
