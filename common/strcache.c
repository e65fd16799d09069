/* SPDX-License-Identifier: MIT */
/*
 * strcache.c — see strcache.h. Entries are chained in hash buckets (a power
 * of two, about one per entry at the bound) and in a list by age, so a
 * look-up, a put and the eviction of the oldest are O(1); dropping by value
 * walks the entries.
 */
#include "config.h"

#include "strcache.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"

typedef struct Entry {
	struct Entry *chain;	     /* the next in its bucket */
	struct Entry *newer, *older; /* the list by age */
	char *value;		     /* in the same allocation, after key */
	char key[];
} Entry;

struct StrCache {
	Entry **buckets;
	size_t mask, n, max;
	Entry *newest, *oldest;
};

static uint64_t
hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

StrCache *
strcache_new(size_t max)
{
	StrCache *sc = calloc(1, sizeof(*sc));
	size_t nb = 16;

	if (!sc)
		return NULL;
	while (nb < max && nb < (SIZE_MAX >> 2))
		nb <<= 1;
	sc->buckets = calloc(nb, sizeof(Entry *));
	if (!sc->buckets) {
		free(sc);
		return NULL;
	}
	sc->mask = nb - 1;
	sc->max = max ? max : 1;
	return sc;
}

static Entry **
slot(const StrCache *sc, const char *key)
{
	Entry **pp = &sc->buckets[hash(key) & sc->mask];
	while (*pp && !streq((*pp)->key, key))
		pp = &(*pp)->chain;
	return pp;
}

/* Unlink *pp (a bucket's link to e) from both lists and free it. */
static void
entry_drop(StrCache *sc, Entry **pp)
{
	Entry *e = *pp;

	*pp = e->chain;
	if (e->newer)
		e->newer->older = e->older;
	else
		sc->newest = e->older;
	if (e->older)
		e->older->newer = e->newer;
	else
		sc->oldest = e->newer;
	sc->n--;
	free(e);
}

void
strcache_free(StrCache *sc)
{
	if (!sc)
		return;
	while (sc->newest) {
		Entry *e = sc->newest;
		sc->newest = e->older;
		free(e);
	}
	free(sc->buckets);
	free(sc);
}

const char *
strcache_get(const StrCache *sc, const char *key)
{
	Entry *e = *slot(sc, key);
	return e ? e->value : NULL;
}

int
strcache_put(StrCache *sc, const char *key, const char *value)
{
	size_t kl = strlen(key) + 1, vl = strlen(value) + 1;
	Entry **pp = slot(sc, key);

	if (*pp)
		entry_drop(sc, pp); /* pp now links what followed it: still key's slot */
	Entry *e = malloc(sizeof(*e) + kl + vl);
	if (!e)
		return -ENOMEM;
	memcpy(e->key, key, kl);
	e->value = e->key + kl;
	memcpy(e->value, value, vl);
	e->chain = *pp;
	*pp = e;
	e->newer = NULL;
	e->older = sc->newest;
	if (sc->newest)
		sc->newest->newer = e;
	else
		sc->oldest = e;
	sc->newest = e;
	if (++sc->n > sc->max)
		entry_drop(sc, slot(sc, sc->oldest->key));
	return 0;
}

bool
strcache_drop(StrCache *sc, const char *key)
{
	Entry **pp = slot(sc, key);
	if (!*pp)
		return false;
	entry_drop(sc, pp);
	return true;
}

size_t
strcache_drop_value(StrCache *sc, const char *value)
{
	size_t n = 0;
	for (Entry *e = sc->newest, *next; e; e = next) {
		next = e->older;
		if (streq(e->value, value)) {
			entry_drop(sc, slot(sc, e->key));
			n++;
		}
	}
	return n;
}

size_t
strcache_size(const StrCache *sc)
{
	return sc->n;
}
