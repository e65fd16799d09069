/* SPDX-License-Identifier: MIT */
/*
 * strcache.h — a bounded map of strings to strings, for what a daemon
 * remembers of others (another node's thread → its owner, a run → its
 * thread): found by hashing, and when full the oldest entry goes.
 * Keys and values are copied. Not thread-safe.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef struct StrCache StrCache;

/* An empty cache holding at most max entries (max ≥ 1), or NULL (ENOMEM). */
StrCache *strcache_new(size_t max);
/* Free it and its entries (NULL-safe). */
void strcache_free(StrCache *sc);
/* The value of key, or NULL. Valid until the entry is replaced or dropped. */
const char *strcache_get(const StrCache *sc, const char *key);
/* Set key to value: the entry becomes the newest; the oldest goes when that
 * makes one too many. 0, or -ENOMEM (then key is not in the cache). */
int strcache_put(StrCache *sc, const char *key, const char *value);
/* Drop key's entry; true if there was one. */
bool strcache_drop(StrCache *sc, const char *key);
/* Drop every entry whose value is value; how many went. */
size_t strcache_drop_value(StrCache *sc, const char *value);
/* How many entries it holds. */
size_t strcache_size(const StrCache *sc);
