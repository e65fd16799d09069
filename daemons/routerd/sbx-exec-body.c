/* SPDX-License-Identifier: MIT */
/*
 * sbx-exec-body.c — the start body of a sandbox exec, checked (see the
 * header). routerd checks the shape; coordinatord checks the limits
 * (exec_stdin_max, exec_timeout_max_ms) and the shim the paths.
 */
#include "config.h"

#include "sbx-exec-body.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "macro.h"
#include "strv.h"

/* Most argv items and env entries taken (the shim has its own bound too). */
#define SBX_ARGV_MAX 4096

void
sbx_exec_req_done(SbxExecReq *r)
{
	strv_free(r->argv);
	free(r->command);
	free(r->cwd);
	strv_free(r->env);
	free(r->stdin_data);
	*r = (SbxExecReq){0};
}

/* A JSON string as a C string: no NUL inside. */
static const char *
plain_string(const json_t *v)
{
	if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
		return NULL;
	return json_string_value(v);
}

static int
parse_argv(const json_t *v, SbxExecReq *r, const char **why)
{
	size_t i;
	json_t *item;

	if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > SBX_ARGV_MAX)
		return *why = "argv must be a non-empty array of strings", -EINVAL;
	json_array_foreach(v, i, item)
	{
		const char *s = plain_string(item);
		if (!s || (i == 0 && !*s))
			return *why = "argv must be strings without NUL, the first not empty",
			       -EINVAL;
		if (strv_push(&r->argv, s) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int
parse_env(const json_t *v, SbxExecReq *r, const char **why)
{
	const char *k;
	json_t *val;

	if (!json_is_object(v) || json_object_size(v) > SBX_ARGV_MAX)
		return *why = "env must be an object of strings", -EINVAL;
	json_object_foreach((json_t *)v, k, val)
	{
		const char *s = plain_string(val);
		if (!*k || strchr(k, '='))
			return *why = "env names must be non-empty and without '='", -EINVAL;
		if (!s)
			return *why = "env values must be strings without NUL", -EINVAL;
		if (strv_pushf(&r->env, "%s=%s", k, s) < 0)
			return -ENOMEM;
	}
	return 0;
}

static int
parse_stdin(const json_t *body, SbxExecReq *r, const char **why)
{
	const json_t *t = json_object_get(body, "stdin");
	const json_t *b = json_object_get(body, "stdinBase64");

	if (t && b)
		return *why = "give stdin or stdinBase64, not both", -EINVAL;
	if (t) {
		if (!json_is_string(t))
			return *why = "stdin must be a string", -EINVAL;
		r->stdin_len = json_string_length(t);
		r->stdin_data = malloc(r->stdin_len + 1);
		if (!r->stdin_data)
			return -ENOMEM;
		memcpy(r->stdin_data, json_string_value(t), r->stdin_len);
		r->has_stdin = true;
	} else if (b) {
		const char *s = json_is_string(b) ? json_string_value(b) : NULL;
		size_t n = s ? json_string_length(b) : 0;
		size_t pad = s ? strcspn(s, "=") : 0;
		/* '=' only as the last one or two (EVP_DecodeBlock takes it anywhere) */
		if (!s || n % 4 != 0 || n > INT32_MAX || pad + 2 < n ||
		    strspn(s + pad, "=") != n - pad)
			return *why = "stdinBase64 must be base64 (padded)", -EINVAL;
		r->stdin_data = malloc(n / 4 * 3 + 1);
		if (!r->stdin_data)
			return -ENOMEM;
		int k = n ? EVP_DecodeBlock((unsigned char *)r->stdin_data,
					    (const unsigned char *)s, (int)n)
			  : 0;
		if (k < 0)
			return *why = "stdinBase64 must be base64 (padded)", -EINVAL;
		/* EVP_DecodeBlock counts the padding as bytes */
		if (n >= 1 && s[n - 1] == '=')
			k--;
		if (n >= 2 && s[n - 2] == '=')
			k--;
		r->stdin_len = (size_t)k;
		r->has_stdin = true;
	}
	return 0;
}

static int
parse_body(const json_t *body, bool allow_stdin, SbxExecReq *r, const char **why)
{
	const json_t *argv = json_object_get(body, "argv"), *cmd = json_object_get(body, "command");
	const json_t *cwd = json_object_get(body, "cwd"), *env = json_object_get(body, "env");
	const json_t *to = json_object_get(body, "timeoutMs");
	const json_t *bg = json_object_get(body, "background");
	int k;

	if (!json_is_object(body))
		return *why = "body must be a JSON object", -EINVAL;
	if ((argv && cmd) || (!argv && !cmd))
		return *why = "give argv (an array) or command (a string)", -EINVAL;
	if (argv && (k = parse_argv(argv, r, why)) < 0)
		return k;
	if (cmd) {
		const char *s = plain_string(cmd);
		if (!s || !*s)
			return *why = "command must be a non-empty string without NUL", -EINVAL;
		if (!(r->command = strdup(s)))
			return -ENOMEM;
	}
	if (cwd) {
		const char *s = plain_string(cwd);
		if (!s)
			return *why = "cwd must be a string without NUL", -EINVAL;
		if (*s && !(r->cwd = strdup(s)))
			return -ENOMEM;
	}
	if (env && !json_is_null(env) && (k = parse_env(env, r, why)) < 0)
		return k;
	if (to && !json_is_null(to)) {
		if (!json_is_integer(to) || json_integer_value(to) <= 0)
			return *why = "timeoutMs must be a positive integer", -EINVAL;
		r->timeout_ms = json_integer_value(to);
	}
	if (bg && !json_is_boolean(bg))
		return *why = "background must be a boolean", -EINVAL;
	r->background = json_is_true(bg);
	if (!allow_stdin &&
	    (json_object_get(body, "stdin") || json_object_get(body, "stdinBase64")))
		return *why = "stdin comes as messages on a WebSocket, not in the start body",
		       -EINVAL;
	return parse_stdin(body, r, why);
}

int
sbx_exec_req_parse(const json_t *body, bool allow_stdin, SbxExecReq *ret, const char **ret_why)
{
	const char *why = NULL;
	int k;

	*ret = (SbxExecReq){0};
	k = parse_body(body, allow_stdin, ret, &why);
	if (k < 0) {
		sbx_exec_req_done(ret);
		if (ret_why)
			*ret_why = k == -ENOMEM ? "out of memory" : why;
	}
	return k;
}

static const struct {
	const char *name;
	int sig;
} signals[] = {
    {"HUP", SIGHUP},   {"INT", SIGINT},	  {"QUIT", SIGQUIT},   {"KILL", SIGKILL}, {"USR1", SIGUSR1},
    {"USR2", SIGUSR2}, {"PIPE", SIGPIPE}, {"ALRM", SIGALRM},   {"TERM", SIGTERM}, {"CONT", SIGCONT},
    {"STOP", SIGSTOP}, {"TSTP", SIGTSTP}, {"WINCH", SIGWINCH},
};

int
sbx_signal_parse(const char *s)
{
	char *end;

	if (!s || !*s)
		return SIGKILL;
	if (*s >= '0' && *s <= '9') {
		long v = strtol(s, &end, 10);
		return *end || v <= 0 || v >= NSIG ? -EINVAL : (int)v;
	}
	if (strncasecmp(s, "SIG", 3) == 0)
		s += 3;
	for (size_t i = 0; i < ELEMENTSOF(signals); i++)
		if (strcasecmp(s, signals[i].name) == 0)
			return signals[i].sig;
	return -EINVAL;
}
