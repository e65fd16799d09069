/* SPDX-License-Identifier: MIT */
/*
 * redact.c — secret values out of what the run log stores and returns.
 *
 * Every text an op stores — a harness's chunk, a client's event, the record
 * fields merged with them — loses each secret value of the run (or of every
 * configured harness) before it is written (commit.c, redact_decoded), in
 * the decoded JSON: a search of the serialized text would miss escaped
 * spellings ("\u0073k-…") and could break an escape. Here: the searches and
 * replacements themselves, on strings, JSON trees and texts.
 */
#include "config.h"

#include "commit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"

bool
redact_holds(char *const *values, const char *s, size_t len)
{
	for (size_t i = 0; values[i]; i++)
		if (values[i][0] && memmem(s, len, values[i], strlen(values[i])))
			return true;
	return false;
}

char *
redact_string(char *const *values, const char *s, size_t len, size_t *ret_len)
{
	static const char mark[] = "[REDACTED]";
	char *t = strndup(s, len);

	for (size_t i = 0; t && values[i]; i++) {
		const char *sv = values[i];
		size_t sl = strlen(sv);
		char *hit;
		size_t from = 0; /* past the last mark: a secret inside "[REDACTED]" ends */
		if (sl == 0)
			continue; /* an empty secret is found everywhere: it hides nothing */
		while (t && (hit = memmem(t + from, len - from, sv, sl))) {
			size_t pre = (size_t)(hit - t), rest = len - pre - sl;
			char *n = malloc(pre + sizeof(mark) - 1 + rest + 1);
			if (n) {
				memcpy(n, t, pre);
				memcpy(n + pre, mark, sizeof(mark) - 1);
				memcpy(n + pre + sizeof(mark) - 1, hit + sl, rest + 1);
				len = pre + sizeof(mark) - 1 + rest;
				from = pre + sizeof(mark) - 1;
			}
			free(t);
			t = n;
		}
	}
	if (t && ret_len)
		*ret_len = len;
	return t;
}

/* A redacted copy of a string or number holding a secret; NULL to keep j. */
static json_t *
redact_scalar(char *const *values, const json_t *j)
{
	if (json_is_string(j)) {
		if (!redact_holds(values, json_string_value(j), json_string_length(j)))
			return NULL;
		size_t n;
		_cleanup_free_ char *t =
		    redact_string(values, json_string_value(j), json_string_length(j), &n);
		return t ? json_stringn(t, n) : json_string("[REDACTED]");
	}
	if (json_is_number(j)) {
		_cleanup_free_ char *t = json_dumps(j, JSON_ENCODE_ANY);
		return t && redact_holds(values, t, strlen(t)) ? json_string("[REDACTED]") : NULL;
	}
	return NULL;
}

bool
redact_tree(char *const *values, json_t *j)
{
	bool changed = false;
	const char *k;
	json_t *v, *n;
	void *tmp;
	size_t i;

	if (json_is_array(j)) {
		json_array_foreach(j, i, v)
		{
			if ((n = redact_scalar(values, v))) {
				json_array_set_new(j, i, n);
				changed = true;
			} else
				changed |= redact_tree(values, v);
		}
	} else if (json_is_object(j)) {
		json_auto_t *renamed = NULL;
		json_object_foreach_safe(j, tmp, k, v)
		{
			if ((n = redact_scalar(values, v))) {
				json_object_set_new(j, k, n);
				v = n;
				changed = true;
			} else
				changed |= redact_tree(values, v);
			if (redact_holds(values, k, strlen(k))) {
				_cleanup_free_ char *nk = redact_string(values, k, strlen(k), NULL);
				if (!renamed)
					renamed = json_object();
				if (renamed)
					json_object_set(renamed, nk ? nk : "[REDACTED]", v);
				json_object_del(j, k);
				changed = true;
			}
		}
		if (renamed)
			json_object_update(j, renamed);
	}
	return changed;
}

int
redact_text(char *const *values, char **text, size_t *len)
{
	for (size_t i = 0; *text && values && values[i]; i++) {
		const char *sv = values[i];
		size_t sl = strlen(sv);
		char *hit;
		if (sl == 0)
			continue;
		while ((hit = strstr(*text, sv))) {
			static const char mark[] = "[REDACTED]";
			size_t pre = (size_t)(hit - *text), rest = *len - pre - sl;
			char *n = malloc(pre + sizeof(mark) - 1 + rest + 1);
			if (!n)
				return -ENOMEM;
			memcpy(n, *text, pre);
			memcpy(n + pre, mark, sizeof(mark) - 1);
			memcpy(n + pre + sizeof(mark) - 1, hit + sl, rest + 1);
			free(*text);
			*text = n;
			*len = pre + sizeof(mark) - 1 + rest;
		}
	}
	return 0;
}

int
redact_json(char *const *values, json_t *j)
{
	int r = 0;
	if (!values || !values[0] || !j)
		return 0;
	if (json_is_string(j)) {
		size_t len = json_string_length(j);
		char *t = strndup(json_string_value(j), len);
		if (!t)
			return -ENOMEM;
		if (memchr(json_string_value(j), '\0', len)) {
			/* an embedded NUL hides what follows from strstr: drop it all */
			free(t);
			return json_string_set(j, "[REDACTED]") < 0 ? -ENOMEM : 0;
		}
		len = strlen(t);
		r = redact_text(values, &t, &len);
		if (r == 0 && !streq(t, json_string_value(j)) && json_string_set(j, t) < 0)
			r = -ENOMEM;
		free(t);
		return r;
	}
	if (json_is_array(j)) {
		for (size_t i = 0; r == 0 && i < json_array_size(j); i++)
			r = redact_json(values, json_array_get(j, i));
		return r;
	}
	if (json_is_object(j)) {
		const char *k;
		json_t *v;
		void *tmp;
		json_object_foreach_safe(j, tmp, k, v)
		{
			size_t kl = strlen(k);
			char *nk = strdup(k);
			if (!nk)
				return -ENOMEM;
			r = redact_text(values, &nk, &kl);
			if (r == 0)
				r = redact_json(values, v);
			if (r == 0 && !streq(nk, k)) {
				json_incref(v);
				json_object_del(j, k);
				if (json_object_set_new(j, nk, v) < 0)
					r = -ENOMEM;
			}
			free(nk);
			if (r < 0)
				return r;
		}
	}
	return r;
}
