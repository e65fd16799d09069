/* SPDX-License-Identifier: MIT */
/*
 * cmd-cancel.c — `runwarden cancel RUN [--thread T]`: stop a run and its
 * processes; the record it answers printed.
 */
#include "config.h"

#include "cli.h"

int
cmd_cancel(int argc, char **argv)
{
	return record_command(argc, argv, "POST", "/cancel", "cancel",
			      "cancel: RUN is required (cancel RUN [--thread T])");
}
