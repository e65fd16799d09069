/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "harness.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "json-util.h"
#include "macro.h"

static int
append_text(char **acc, size_t *len, const char *s)
{
	size_t n = strlen(s);
	char *p = realloc(*acc, *len + n + 1);
	if (!p)
		return -ENOMEM;
	memcpy(p + *len, s, n + 1);
	*acc = p;
	*len += n;
	return 0;
}

int
shell_command_from_messages(const json_t *messages, char **ret)
{
	if (!json_is_array(messages))
		return -EINVAL;
	for (size_t i = json_array_size(messages); i-- > 0;) {
		const json_t *m = json_array_get(messages, i);
		const char *role = json_string_value(json_object_get(m, "role"));
		if (!role || !streq(role, "user"))
			continue;
		const json_t *content = json_object_get(m, "content");
		if (json_is_string(content)) {
			char *s = strdup(json_string_value(content));
			if (!s)
				return -ENOMEM;
			*ret = s;
			return 0;
		}
		if (!json_is_array(content))
			return -ENOENT;
		char *acc = NULL;
		size_t len = 0, j;
		const json_t *part;
		json_array_foreach(content, j, part)
		{
			const char *type = json_string_value(json_object_get(part, "type"));
			if (!type || !streq(type, "text"))
				continue;
			const char *t = json_string_value(json_object_get(part, "text"));
			if (!t)
				t = json_string_value(json_object_get(part, "content"));
			if (t && append_text(&acc, &len, t) < 0) {
				free(acc);
				return -ENOMEM;
			}
		}
		if (!acc)
			return -ENOENT;
		*ret = acc;
		return 0;
	}
	return -ENOENT;
}

int
outbuf_add(OutBuf *b, const void *p, size_t n)
{
	if (n == 0) /* b->data may still be NULL */
		return 0;
	if (b->len + n > b->cap) {
		size_t cap = MAX(b->cap * 2, b->len + n);
		if (cap < 4096)
			cap = 4096;
		char *d = realloc(b->data, cap);
		if (!d)
			return -ENOMEM;
		b->data = d;
		b->cap = cap;
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->added += n;
	return 0;
}

char *
outbuf_take(OutBuf *b, size_t max, bool final, size_t *ret_len)
{
	size_t take;

	*ret_len = 0;
	if (b->len == 0)
		return NULL;
	take = final ? b->len : utf8_complete_prefix(b->data, b->len);
	if (take > max) {
		/* cut at a boundary: back off over continuation bytes */
		take = max;
		while (take > 0 && ((unsigned char)b->data[take] & 0xC0) == 0x80)
			take--;
		if (take == 0)
			take = max; /* garbage with no boundary: sanitize will cope */
	}
	if (take == 0)
		return NULL;
	char *s = utf8_sanitize(b->data, take, ret_len);
	if (!s)
		return NULL;
	memmove(b->data, b->data + take, b->len - take);
	b->len -= take;
	b->taken += take;
	return s;
}

void
outbuf_done(OutBuf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->cap = 0;
}
