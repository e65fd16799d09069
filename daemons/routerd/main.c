/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <stdlib.h>

#include "daemon-util.h"
#include "log.h"
#include "router.h"

int
main(int argc, char **argv)
{
	DaemonArgs args;
	int r;

	log_open("routerd");
	r = daemon_parse_args(argc, argv, "routerd", "runwarden HTTP/WebSocket front", &args);
	if (r <= 0)
		return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
	r = router_run(&args);
	return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
