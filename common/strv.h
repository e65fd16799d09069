/* SPDX-License-Identifier: MIT */
/*
 * strv.h — NULL-terminated vectors of strings (char **), malloc'd, each
 * string malloc'd and owned by the vector. An empty vector may be NULL.
 */
#pragma once

#include <stddef.h>

/* Append a copy of s to the NULL-terminated malloc'd vector *v (NULL = empty).
 * 0 or -ENOMEM (then *v may have grown by a NULL slot, still valid). */
int strv_push(char ***v, const char *s);
/* The same with a printf format, e.g. "K=V". */
int strv_pushf(char ***v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Free v and its strings (NULL-safe). */
void strv_free(char **v);
/* Free the n strings of the counted array v and v itself (NULL-safe when n is 0);
 * for arrays that are not NULL-terminated. */
void strv_free_n(char **v, size_t n);
