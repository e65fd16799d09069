/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "id-util.h"

#include <errno.h>
#include <string.h>

#include <openssl/rand.h>

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

int
uuid_v4(char out[static UUID_STRING_LEN + 1])
{
	unsigned char b[16];

	if (RAND_bytes(b, sizeof(b)) != 1)
		return -EIO;
	uuid_v4_from_bytes(b, out);
	return 0;
}

int
random_token(char out[static RANDOM_TOKEN_LEN + 1])
{
	unsigned char b[32];

	if (RAND_bytes(b, sizeof(b)) != 1)
		return -EIO;
	uuid_v4_from_bytes(b, out);
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

const char *
thread_id_problem(const char *s)
{
	if (!s || !*s)
		return "threadId must be a non-empty string";
	if (strlen(s) > THREAD_ID_MAX)
		return "threadId must be at most 256 bytes";
	if (!string_printable(s))
		return "threadId must not contain control characters";
	return NULL;
}
