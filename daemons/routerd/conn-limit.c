/* SPDX-License-Identifier: MIT */
/*
 * conn-limit.c — per-address count of unserved connections (conn-limit.h).
 */
#include "config.h"

#include "conn-limit.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>

#define ADDR_BUCKETS 1024

struct AddrSlot {
	AddrSlot *next;
	uint8_t key[17]; /* family tag + 4 (IPv4) or 8 (IPv6 /64) bytes, zero-padded */
	size_t n;
	unsigned bucket;
};

struct AddrTable {
	AddrSlot *buckets[ADDR_BUCKETS];
	size_t n_slots;
};

AddrTable *
addr_table_new(void)
{
	return calloc(1, sizeof(AddrTable));
}

AddrTable *
addr_table_free(AddrTable *t)
{
	if (!t)
		return NULL;
	for (size_t i = 0; i < ADDR_BUCKETS; i++)
		while (t->buckets[i]) {
			AddrSlot *s = t->buckets[i];
			t->buckets[i] = s->next;
			free(s);
		}
	free(t);
	return NULL;
}

static bool
addr_key(const struct sockaddr *sa, uint8_t key[17])
{
	memset(key, 0, 17);
	if (sa->sa_family == AF_INET) {
		key[0] = 4;
		memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return true;
	}
	if (sa->sa_family == AF_INET6) {
		const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
		static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
		if (memcmp(a, v4mapped, 12) == 0) { /* ::ffff:a.b.c.d is that IPv4 host */
			key[0] = 4;
			memcpy(key + 1, a + 12, 4);
		} else {
			key[0] = 6;
			memcpy(key + 1, a, 8);
		}
		return true;
	}
	return false; /* AF_UNIX & co: one bucket for all */
}

static unsigned
addr_hash(const uint8_t key[17])
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (int i = 0; i < 17; i++)
		h = (h ^ key[i]) * 16777619u;
	return h % ADDR_BUCKETS;
}

int
addr_unserved_take(AddrTable *t, const struct sockaddr *sa, size_t max, AddrSlot **ret)
{
	uint8_t key[17];
	unsigned b;
	AddrSlot *s;

	(void)addr_key(sa, key);
	b = addr_hash(key);
	for (s = t->buckets[b]; s; s = s->next)
		if (memcmp(s->key, key, sizeof(key)) == 0)
			break;
	if (s && max > 0 && s->n >= max)
		return -EBUSY;
	if (!s) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return -ENOMEM;
		memcpy(s->key, key, sizeof(key));
		s->bucket = b;
		s->next = t->buckets[b];
		t->buckets[b] = s;
		t->n_slots++;
	}
	s->n++;
	*ret = s;
	return 0;
}

AddrSlot *
addr_unserved_release(AddrTable *t, AddrSlot *s)
{
	if (!s || --s->n > 0)
		return NULL;
	for (AddrSlot **p = &t->buckets[s->bucket]; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	t->n_slots--;
	free(s);
	return NULL;
}

size_t
addr_table_size(const AddrTable *t)
{
	return t->n_slots;
}
