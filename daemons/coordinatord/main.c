/* SPDX-License-Identifier: MIT */
#include "config.h"

#include <stdlib.h>

#include "coordinator.h"
#include "daemon-util.h"
#include "log.h"

int
main(int argc, char **argv)
{
	DaemonArgs args;
	int r;

	log_open("coordinatord");
	r = daemon_parse_args(argc, argv, "coordinatord", "runwarden run log owner and run driver",
			      &args);
	if (r <= 0)
		return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
	r = coordinator_run(&args);
	return r < 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
