/* SPDX-License-Identifier: MIT */
/*
 * cmd-show.c — `runwarden show RUN [--thread T]`: a run's record.
 */
#include "config.h"

#include "cli.h"

int
cmd_show(int argc, char **argv)
{
	return record_command(argc, argv, "GET", "", "show",
			      "show: RUN is required (show RUN [--thread T])");
}
