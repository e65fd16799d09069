/* SPDX-License-Identifier: MIT */
/*
 * id-util.h — identifiers: random uuids and tokens, lowercase hex, and the
 * thread id every daemon accepts.
 *
 * Random bytes come from OpenSSL's RAND_bytes; a function that needs them
 * returns 0 or -EIO and leaves out as it was on failure.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx" */
#define UUID_STRING_LEN 36
/* A uuid, then the hex of a second one without its dashes (36 + 32). */
#define RANDOM_TOKEN_LEN 68

/* The n bytes at data as 2n lowercase hex digits and a NUL (out: 2n + 1 bytes). */
void hex_encode(const void *data, size_t n, char *out);

/* Set the version (4) and variant (10) bits in b and format it. */
void uuid_v4_from_bytes(unsigned char b[static 16], char out[static UUID_STRING_LEN + 1]);
/* A random v4 uuid. */
int uuid_v4(char out[static UUID_STRING_LEN + 1]);
/* A random bearer token: 256 bits drawn, RANDOM_TOKEN_LEN characters. */
int random_token(char out[static RANDOM_TOKEN_LEN + 1]);

/* n random bytes (n <= 64) as 2n lowercase hex digits and a NUL (out: 2n + 1
 * bytes): a capability that must fit a DNS label (a preview's host name). */
int random_hex(size_t n, char *out);

/* A thread id is 1..THREAD_ID_MAX bytes of valid UTF-8 (RFC 3629: no
 * overlong form, no surrogate) without control characters (C0, DEL, C1) or
 * bidirectional controls (U+061C, U+200E/F, U+202A-202E, U+2066-2069), and is
 * not "." or ".." (issue 30 item 9). Other characters, '/', '?', '#', '%' and
 * spaces included, are fine: clients percent-encode them in URLs. */
#define THREAD_ID_MAX 256

/* RUN_START's other identifiers (coordinatord checks them, for HTTP and
 * socket clients alike): an Idempotency-Key is 1..IDEMPOTENCY_KEY_MAX
 * printable bytes (idempotency_key_problem); a /chat client's run id
 * 1..CLIENT_RUN_ID_MAX bytes; metadata.sessionId 1..SESSION_ID_MAX bytes. */
#define IDEMPOTENCY_KEY_MAX 256
#define CLIENT_RUN_ID_MAX 128
#define SESSION_ID_MAX 128

/* No C0 control character and no DEL in s. */
bool string_printable(const char *s);
/* NULL when s (may be NULL) is a valid thread id, else why not, as routerd
 * tells its clients. */
const char *thread_id_problem(const char *s);
/* NULL when key is a valid Idempotency-Key, else why not (the message). */
const char *idempotency_key_problem(const char *key);
/* A /chat client's run id (RUN_START client_run_id): 1..CLIENT_RUN_ID_MAX
 * printable bytes. */
bool client_run_id_valid(const char *s);
static inline bool
thread_id_valid(const char *s)
{
	return !thread_id_problem(s);
}
