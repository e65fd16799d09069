/* SPDX-License-Identifier: MIT */
/*
 * fuzz-http.c — libFuzzer target: arbitrary bytes as the request stream of
 * one client connection (request line, headers, bodies, pipelining). Also
 * splits the input in two writes at a position taken from its first byte,
 * since the head is parsed line by line across reads.
 */
#include "config.h"

#include <unistd.h>

#include "fuzz-common.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int peer;

	if (size < 1 || size > 256 * 1024)
		return 0;
	size_t cut = data[0] % (size);
	fuzz_conn(&peer);
	fuzz_pump(peer, data + 1, cut > 0 ? cut - 1 : 0, false);
	fuzz_pump(peer, data + (cut > 0 ? cut : 1), size - (cut > 0 ? cut : 1), true);
	fuzz_reset();
	close(peer);
	return 0;
}
