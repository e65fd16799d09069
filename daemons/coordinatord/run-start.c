/* SPDX-License-Identifier: MIT */
/*
 * run-start.c — the rules of a RUN_START's body, one place for every client.
 *
 * routerd checks only what belongs to HTTP (the token, the content type, the
 * JSON syntax, that the body is an object with a thread id the token may
 * use) and hands the rest over as it came; a socket client's RUN_START
 * meets the same rules here: messages a non-empty array of objects with a
 * string role, metadata an object, a known harness the token may use, a
 * safe sessionId, the Idempotency-Key and the /chat client's run id and
 * input within their limits (id-util.h, coord-conf.h). A refusal is an
 * ERROR -EINVAL with the message routerd shows in its 400 bad_request,
 * -EPERM for a harness the token may not use (403 harness_forbidden),
 * -EFBIG too_large for an input past its bounds (413).
 */
#include "config.h"

#include "coordinator.h"

#include "adapter.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "id-util.h"
#include "macro.h"

/* An ERROR with the message fmt makes (at most 199 bytes); returns false. */
static bool _printf_(5, 6)
    refuse(Peer *p, const Frame *f, int err, const char *reason, const char *fmt, ...)
{
	char m[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(m, sizeof(m), fmt, ap);
	va_end(ap);
	if (reason)
		peer_reply_error_reason(p, f->req_id, err, reason, m);
	else
		peer_reply_error(p, f->req_id, err, m);
	return false;
}

/* metadata.sessionId goes into the agent CLI's argv (claude --resume=ID,
 * codex exec resume ID): only an identifier is taken — 1..SESSION_ID_MAX
 * bytes of [A-Za-z0-9._:-], not starting with '-' — so that it can never be
 * read as an option. NULL when acceptable (or absent), else why not. */
static const char *
session_id_problem(const json_t *v)
{
	if (!v || json_is_null(v))
		return NULL;
	const char *s = json_string_value(v);
	if (!s)
		return "metadata.sessionId must be a string";
	size_t n = strlen(s);
	if (n == 0 || n > SESSION_ID_MAX || n != json_string_length(v))
		return "metadata.sessionId must be 1..128 bytes";
	if (s[0] == '-')
		return "metadata.sessionId must not start with '-'";
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._:-", s[i]))
			return "metadata.sessionId may contain only letters, digits and . _ : -";
	return NULL;
}

/* messages: a non-empty array of objects, each with a string role. */
static bool
messages_ok(Peer *p, const Frame *f, const char *text, json_t **ret)
{
	json_t *m;
	size_t i;

	*ret = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
	if (!json_is_array(*ret) || json_array_size(*ret) == 0)
		return refuse(p, f, -EINVAL, NULL, "messages must be a non-empty array");
	json_array_foreach(*ret, i, m)
	{
		if (!json_is_object(m))
			return refuse(p, f, -EINVAL, NULL, "messages[%zu] must be an object", i);
		if (!json_is_string(json_object_get(m, "role")))
			return refuse(p, f, -EINVAL, NULL, "messages[%zu].role must be a string",
				      i);
	}
	return true;
}

/* A /chat run's input (the user messages it stores for the hydrate): a JSON
 * array within chat_input_max_bytes and chat_input_max_messages. */
static bool
input_ok(Coordinator *c, Peer *p, const Frame *f, const char *input)
{
	if ((int64_t)strlen(input) > c->conf.chat_input_max_bytes)
		return refuse(p, f, -EFBIG, "too_large",
			      "the run's new user messages exceed "
			      "coordinatord.chat_input_max_bytes (%" PRId64 " bytes)",
			      c->conf.chat_input_max_bytes);
	json_auto_t *in = json_loads(input, 0, NULL);
	if (!json_is_array(in))
		return refuse(p, f, -EINVAL, NULL, "input must be a JSON array");
	if ((int64_t)json_array_size(in) > c->conf.chat_input_max_messages)
		return refuse(p, f, -EFBIG, "too_large",
			      "the run's new user messages are more than "
			      "coordinatord.chat_input_max_messages (%" PRId64 ")",
			      c->conf.chat_input_max_messages);
	return true;
}

static bool
listed(char *const *names, const char *name)
{
	for (; *names; names++)
		if (streq(*names, name))
			return true;
	return false;
}

/* The harness: metadata.harness or default_harness, known, and one the
 * request's token may use (m->harnesses: the token's scope; NULL: any). */
static bool
harness_ok(Coordinator *c, Peer *p, const Frame *f, const Msg_RUN_START *m, const json_t *meta,
	   const Harness **ret)
{
	const json_t *h = json_object_get(meta, "harness");
	const char *name = h ? json_string_value(h) : c->conf.default_harness;

	*ret = name ? harness_find(c->harnesses, name) : NULL;
	if (!*ret)
		return refuse(p, f, -EINVAL, NULL, "unknown harness '%.64s'",
			      name ? name : "(not a string)");
	if (m->harnesses && !listed(m->harnesses, (*ret)->name))
		return refuse(p, f, -EPERM, NULL, "this token may not use harness '%.64s'",
			      (*ret)->name);
	return true;
}

bool
run_start_body(Coordinator *c, Peer *p, const Frame *f, const Msg_RUN_START *m, RunStartBody *ret)
{
	const char *why;

	*ret = (RunStartBody){0};
	if (!messages_ok(p, f, m->messages, &ret->messages))
		return false;
	ret->metadata = m->metadata ? json_loads(m->metadata, JSON_DECODE_ANY, NULL) : NULL;
	if (m->metadata && !json_is_object(ret->metadata))
		return refuse(p, f, -EINVAL, NULL, "metadata must be an object");
	if (!harness_ok(c, p, f, m, ret->metadata, &ret->harness))
		return false;
	why = session_id_problem(json_object_get(ret->metadata, "sessionId"));
	if (why)
		return refuse(p, f, -EINVAL, NULL, "%s", why);
	why = m->idempotency_key ? idempotency_key_problem(m->idempotency_key) : NULL;
	if (why)
		return refuse(p, f, -EINVAL, NULL, "%s", why);
	const char *alias = m->client_run_id;
	if (alias && (!client_run_id_valid(alias) || m->idempotency_key))
		return refuse(p, f, -EINVAL, NULL,
			      "client_run_id must be 1 to 128 printable bytes, without an "
			      "idempotency key");
	return !m->input || input_ok(c, p, f, m->input);
}

void
run_start_body_done(RunStartBody *b)
{
	json_decref(b->messages);
	json_decref(b->metadata);
	*b = (RunStartBody){0};
}
