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

/* jansson 2.14 provides json_auto_t (json_t with a json_decref cleanup). */
