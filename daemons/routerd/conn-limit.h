/* SPDX-License-Identifier: MIT */
/*
 * conn-limit.h — connections per client address that have not yet sent a
 * complete request head ("unserved": just accepted, or trickling a head).
 *
 * A flood of half-open connections from one address used to fill
 * max_connections and pause accepting for everyone until header_timeout_ms
 * ran out. Now, once half of max_connections is in use, one address may hold
 * at most max_unserved_per_address such connections; the next one is closed
 * at accept (http.c). Connections that have sent a
 * request (a WebSocket or SSE tail, a keep-alive connection between requests)
 * no longer count, so one reverse proxy or one client with a thousand tails
 * on 127.0.0.1 is not limited. IPv6 addresses are counted per /64 (what one
 * host is usually given).
 *
 * The table is a fixed array of hash buckets with one entry per address that
 * has an unserved connection; entries go when their count reaches zero.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct AddrSlot AddrSlot;
typedef struct AddrTable AddrTable;

AddrTable *addr_table_new(void);
AddrTable *addr_table_free(AddrTable *t);

/* Count one more unserved connection from sa: 0 and its slot, -EBUSY when the
 * address already holds max of them (max 0 = no limit: still counted, so the
 * caller can enforce a cap only under pressure), -ENOMEM. */
int addr_unserved_take(AddrTable *t, const struct sockaddr *sa, size_t max, AddrSlot **ret);
/* The connection sent its head or closed: NULL-safe, returns NULL. */
AddrSlot *addr_unserved_release(AddrTable *t, AddrSlot *s);
/* Addresses with an unserved connection (for tests and metrics). */
size_t addr_table_size(const AddrTable *t);
