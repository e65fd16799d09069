/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "json-util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

char *
json_dump_compact(const json_t *j)
{
	return json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
}

/* Length of the valid sequence at s (1..4), 0 when invalid, or -n when it is
 * a valid but truncated start needing more bytes. */
static int
seq_len(const unsigned char *s, size_t avail)
{
	unsigned char c = s[0];
	int n;
	uint32_t min, cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		n = 2;
		min = 0x80;
		cp = c & 0x1F;
	} else if (c >= 0xE0 && c <= 0xEF) {
		n = 3;
		min = 0x800;
		cp = c & 0x0F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		n = 4;
		min = 0x10000;
		cp = c & 0x07;
	} else
		return 0;
	for (int i = 1; i < n; i++) {
		if ((size_t)i >= avail)
			return -n;
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (s[i] & 0x3F);
		/* reject overlongs and surrogates as early as the second byte allows */
		if (i == 1) {
			if (n == 3 && c == 0xE0 && s[1] < 0xA0)
				return 0;
			if (n == 3 && c == 0xED && s[1] > 0x9F)
				return 0;
			if (n == 4 && c == 0xF0 && s[1] < 0x90)
				return 0;
			if (n == 4 && c == 0xF4 && s[1] > 0x8F)
				return 0;
		}
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n;
}

size_t
utf8_complete_prefix(const char *buf, size_t len)
{
	const unsigned char *s = (const unsigned char *)buf;
	size_t i = 0;

	while (i < len) {
		int n = seq_len(s + i, len - i);
		if (n < 0)
			return i; /* a truncated but so far valid sequence: hold it back */
		i += n == 0 ? 1 : (size_t)n;
	}
	return len;
}

bool
utf8_valid(const char *buf, size_t len)
{
	const unsigned char *s = (const unsigned char *)buf;
	size_t i = 0;

	while (i < len) {
		int n = seq_len(s + i, len - i);
		if (n <= 0)
			return false;
		i += (size_t)n;
	}
	return true;
}

char *
utf8_sanitize(const char *buf, size_t len, size_t *ret_len)
{
	const unsigned char *s = (const unsigned char *)buf;
	char *out = malloc(len * 3 + 1);
	size_t o = 0, i = 0;

	if (!out)
		return NULL;
	while (i < len) {
		int n = seq_len(s + i, len - i);
		if (n > 0 && !(n == 1 && s[i] == 0)) {
			memcpy(out + o, s + i, (size_t)n);
			o += (size_t)n;
			i += (size_t)n;
		} else {
			/* invalid, truncated at the very end, or NUL (jansson refuses NULs) */
			memcpy(out + o, "\xEF\xBF\xBD", 3);
			o += 3;
			i++;
		}
	}
	out[o] = '\0';
	if (ret_len)
		*ret_len = o;
	return out;
}
