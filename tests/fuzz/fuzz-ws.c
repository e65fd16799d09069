/* SPDX-License-Identifier: MIT */
/*
 * fuzz-ws.c — libFuzzer target: arbitrary bytes as the client's side of an
 * established WebSocket session (ws.c over wslay: framing, masking, control
 * frames, fragmentation, UTF-8, close handshake, our 1002 path).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz-common.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int peer;
	HttpConn *c;

	if (size > 256 * 1024)
		return 0;
	c = fuzz_conn(&peer);
	/* The handshake request ws_accept() reads its key from. */
	c->req.n_headers = 1;
	c->req.headers = calloc(1, sizeof(HttpHeader));
	c->req.headers_cap = 1;
	c->req.headers[0].name = strdup("Sec-WebSocket-Key");
	c->req.headers[0].value = strdup("dGhlIHNhbXBsZSBub25jZQ==");
	c->req.complete = true;
	c->req.keep_alive = true;
	c->busy = true;
	if (!c->req.headers[0].name || !c->req.headers[0].value || ws_accept(c) < 0)
		abort();
	fuzz_pump(peer, data, size, true);
	fuzz_reset();
	close(peer);
	return 0;
}
