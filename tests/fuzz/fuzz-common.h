/* SPDX-License-Identifier: MIT */
/*
 * fuzz-common.h — a routerd Router with the default configuration and no
 * coordinator, and a helper that feeds bytes to one client connection over
 * a socketpair and runs the loop until it goes quiet. Every request that
 * would need coordinatord gets its 503; what is fuzzed is routerd's own
 * parsing: http.c (http-parser plus the head checks), routes.c, ws.c.
 */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "router.h"

/* The process-wide router (built once). */
Router *fuzz_router(void);
/* A client connection on the router; *ret_peer is the client's end. */
HttpConn *fuzz_conn(int *ret_peer);
/* Write data to peer (closing its write side afterwards when eof), run the
 * loop until nothing is pending, read and discard what routerd answered. */
void fuzz_pump(int peer, const uint8_t *data, size_t len, bool eof);
/* Free every connection of the router. */
void fuzz_reset(void);
