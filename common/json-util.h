/* SPDX-License-Identifier: MIT */
/*
 * json-util.h — jansson and UTF-8 helpers shared by the daemons.
 */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* Compact serialisation (no spaces, keys in insertion order). malloc'd; NULL on OOM. */
char *json_dump_compact(const json_t *j);

/* Length of the longest prefix of buf[0..len) that does not end inside a
 * UTF-8 sequence which more bytes could still complete. Bytes that can never
 * be valid are not held back (they are replaced on output). */
size_t utf8_complete_prefix(const char *buf, size_t len);

/* A copy of buf[0..len) as valid UTF-8: each invalid byte becomes U+FFFD.
 * NUL-terminated, malloc'd; *ret_len gets the length. NULL on OOM. */
char *utf8_sanitize(const char *buf, size_t len, size_t *ret_len);

/* true when buf[0..len) is valid UTF-8 (no overlongs, no surrogates). */
bool utf8_valid(const char *buf, size_t len);

/* true when buf[0..len) is a text json_loadb(buf, len, 0, …) accepts (the
 * same rules: UTF-8, escapes, no \u0000, surrogate pairs, numbers that fit,
 * depth ≤ 2048, nothing after it) and it is an object — checked without
 * building it. A NUL byte is refused wherever it is. With key, *ret_key_string tells whether the
 * object's member key (its last one, the one jansson keeps) is a string. */
bool json_object_check(const char *buf, size_t len, const char *key, bool *ret_key_string);

/* jansson 2.14 provides json_auto_t (json_t with a json_decref cleanup). */
