/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "id-util.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include <openssl/rand.h>

#include "macro.h"

void
hex_encode(const void *data, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	const unsigned char *b = data;

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = digits[b[i] >> 4];
		out[2 * i + 1] = digits[b[i] & 0x0f];
	}
	out[2 * n] = '\0';
}

static void
set_v4_bits(unsigned char b[static 16])
{
	b[6] = (b[6] & 0x0F) | 0x40;
	b[8] = (b[8] & 0x3F) | 0x80;
}

void
uuid_v4_from_bytes(unsigned char b[static 16], char out[static UUID_STRING_LEN + 1])
{
	set_v4_bits(b);
	/* 8-4-4-4-12 */
	hex_encode(b, 4, out);
	out[8] = '-';
	hex_encode(b + 4, 2, out + 9);
	out[13] = '-';
	hex_encode(b + 6, 2, out + 14);
	out[18] = '-';
	hex_encode(b + 8, 2, out + 19);
	out[23] = '-';
	hex_encode(b + 10, 6, out + 24);
}

/* Fills b (n >= 16 bytes) with random bytes and writes the UUID of its first 16. */
static int
random_uuid(unsigned char *b, size_t n, char out[static UUID_STRING_LEN + 1])
{
	if (RAND_bytes(b, (int)n) != 1)
		return -EIO;
	uuid_v4_from_bytes(b, out);
	return 0;
}

int
uuid_v4(char out[static UUID_STRING_LEN + 1])
{
	unsigned char b[16];

	return random_uuid(b, sizeof(b), out);
}

int
random_token(char out[static RANDOM_TOKEN_LEN + 1])
{
	unsigned char b[32];
	int r = random_uuid(b, sizeof(b), out);

	if (r < 0)
		return r;
	set_v4_bits(b + 16);
	hex_encode(b + 16, 16, out + UUID_STRING_LEN);
	return 0;
}

int
random_hex(size_t n, char *out)
{
	unsigned char b[64];

	if (n > sizeof(b))
		return -EINVAL;
	if (RAND_bytes(b, (int)n) != 1)
		return -EIO;
	hex_encode(b, n, out);
	return 0;
}

bool
string_printable(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* The code point of the UTF-8 sequence at *s (advanced past it), or -1 for
 * an invalid one: a stray continuation byte, a truncated sequence, an
 * overlong form, a surrogate, past U+10FFFF (RFC 3629). */
static int32_t
utf8_next(const unsigned char **s)
{
	const unsigned char *p = *s;
	int32_t cp, min;
	int n;

	if (p[0] < 0x80) {
		*s = p + 1;
		return p[0];
	}
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 1, cp = p[0] & 0x1f, min = 0x80;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 2, cp = p[0] & 0x0f, min = 0x800;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 3, cp = p[0] & 0x07, min = 0x10000;
	else
		return -1;
	for (int i = 1; i <= n; i++) {
		if ((p[i] & 0xc0) != 0x80) /* also the terminating NUL */
			return -1;
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return -1;
	*s = p + 1 + n;
	return cp;
}

/* Bidirectional formatting characters: they reorder what a viewer shows
 * (an id could pass for another in a listing). */
static bool
bidi_control(int32_t cp)
{
	return cp == 0x061c || cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
	       (cp >= 0x2066 && cp <= 0x2069);
}

const char *
thread_id_problem(const char *s)
{
	if (!s || !*s)
		return "threadId must be a non-empty string";
	if (strlen(s) > THREAD_ID_MAX)
		return "threadId must be at most 256 bytes";
	/* a URL path segment every client removes (RFC 3986 5.2.4) */
	if (streq(s, ".") || streq(s, ".."))
		return "threadId must not be '.' or '..'";
	for (const unsigned char *p = (const unsigned char *)s; *p;) {
		int32_t cp = utf8_next(&p);
		if (cp < 0)
			return "threadId must be valid UTF-8";
		if (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f))
			return "threadId must not contain control characters";
		if (bidi_control(cp))
			return "threadId must not contain bidirectional control characters";
	}
	return NULL;
}

const char *
idempotency_key_problem(const char *key)
{
	if (!key || !*key || strlen(key) > IDEMPOTENCY_KEY_MAX || !string_printable(key))
		return "Idempotency-Key must be 1 to 256 printable bytes";
	return NULL;
}

bool
client_run_id_valid(const char *s)
{
	return s && *s && strlen(s) <= CLIENT_RUN_ID_MAX && string_printable(s);
}
