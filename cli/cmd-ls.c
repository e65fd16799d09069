/* SPDX-License-Identifier: MIT */
/*
 * cmd-ls.c — `runwarden ls [--thread T] [--running]`: the runs of a thread,
 * newest first.
 */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

int
cmd_ls(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"thread", required_argument, NULL, 't'},
	    {"running", no_argument, NULL, 'r'},
	    {"json", no_argument, NULL, 'j'},
	    {},
	};
	bool running = false;
	int c;
	optind = 0;
	while ((c = getopt_long(argc, argv, "t:rj", opts, NULL)) >= 0) {
		switch (c) {
		case 't': cli.thread = optarg; break;
		case 'r': running = true; break;
		case 'j': cli.json = true; break;
		default: return EXIT_USAGE;
		}
	}
	if (optind != argc)
		return usage_error("ls: unexpected argument '%s'", argv[optind]);
	char *tid = urlenc(cli.thread), path[1024];
	snprintf(path, sizeof(path), "/threads/%s/runs%s", tid, running ? "?status=running" : "");
	free(tid);
	json_t *list;
	Response raw;
	int rc = client_request(&cli.client, "GET", path, NULL, &raw);
	if (rc < 0)
		return error("%s", cli.client.err);
	if (raw.status == 501 || raw.status == 404) {
		/* Older servers: no such route (a thread without runs is an empty list). */
		error("ls: this server cannot list runs (GET /threads/{threadId}/runs: HTTP %d); "
		      "use 'runwarden show RUN'",
		      raw.status);
		response_free(&raw);
		return EXIT_CLI;
	}
	if (raw.status < 200 || raw.status > 299) {
		rc = http_error(&raw, "ls");
		response_free(&raw);
		return rc;
	}
	list = json_loadb(raw.body, raw.len, 0, NULL);
	response_free(&raw);
	if (!list)
		return error("ls: bad JSON from %s", cli.client.url);
	if (cli.json)
		print_json(list);
	else if (!json_is_array(list))
		rc = error("ls: the server did not answer a list");
	else {
		size_t k;
		json_t *r;
		if (isatty(STDOUT_FILENO))
			printf("%s%-36s  %-9s  %-19s  %s%s\n", BOLD(cli.color), "RUN", "STATUS",
			       "STARTED", "EXIT", RESET(cli.color));
		json_array_foreach(list, k, r)
		{
			char started[64];
			const char *st = json_string_value(json_object_get(r, "status"));
			json_t *ec = json_object_get(r, "exitCode");
			fmt_time(json_object_get(r, "startedAt"), started, sizeof(started));
			printf("%-36s  %s%-9s%s  %-19s  ",
			       json_string_value(json_object_get(r, "runId")) ?: "?",
			       status_color(st), st ? st : "?", RESET(cli.color), started);
			if (json_is_integer(ec))
				printf("%lld\n", (long long)json_integer_value(ec));
			else
				printf("-\n");
		}
	}
	json_decref(list);
	return rc;
}
