/* SPDX-License-Identifier: MIT */
/*
 * cmd-tail.c — `runwarden tail RUN [--thread T] [--from SEQ]`: follow a run's
 * events after SEQ to its end.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdlib.h>

#include "cli.h"

int
cmd_tail(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"thread", required_argument, NULL, 't'},
	    {"from", required_argument, NULL, 'f'},
	    {"json", no_argument, NULL, 'j'},
	    {},
	};
	long long from = -1;
	int c;
	optind = 0;
	while ((c = getopt_long(argc, argv, "t:f:j", opts, NULL)) >= 0) {
		char *end;
		switch (c) {
		case 't': cli.thread = optarg; break;
		case 'f':
			errno = 0;
			from = strtoll(optarg, &end, 10);
			if (errno || *end || from < -1)
				return usage_error("tail: --from wants a seq >= -1, not '%s'",
						   optarg);
			break;
		case 'j': cli.json = true; break;
		default: return EXIT_USAGE;
		}
	}
	if (optind != argc - 1)
		return usage_error("%s", "tail: exactly one RUN is required");
	/* --from SEQ: start after SEQ, like lastSeq (the cursor is exclusive). */
	return tail_to_end(argv[optind], from);
}
