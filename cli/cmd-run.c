/* SPDX-License-Identifier: MIT */
/*
 * cmd-run.c — `runwarden run [--thread T] [--harness H] COMMAND...`: start a
 * run (POST /runs), stream its output, exit with its status.
 */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

int
cmd_run(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"thread", required_argument, NULL, 't'},
	    {"harness", required_argument, NULL, 'H'},
	    {"json", no_argument, NULL, 'j'},
	    {},
	};
	const char *harness = NULL;
	int c;
	optind = 0;
	while ((c = getopt_long(argc, argv, "+t:H:j", opts, NULL)) >= 0) {
		switch (c) {
		case 't': cli.thread = optarg; break;
		case 'H': harness = optarg; break;
		case 'j': cli.json = true; break;
		default: return EXIT_USAGE;
		}
	}
	if (optind >= argc)
		return usage_error("%s", "run: a COMMAND is required");

	/* The command is one shell string: its words joined by spaces. */
	size_t n = 0;
	for (int i = optind; i < argc; i++)
		n += strlen(argv[i]) + 1;
	char *cmd = calloc(1, n + 1);
	for (int i = optind; i < argc; i++) {
		if (i > optind)
			strcat(cmd, " ");
		strcat(cmd, argv[i]);
	}
	json_t *body = json_pack("{s:s, s:[{s:s, s:s}]}", "threadId", cli.thread, "messages",
				 "role", "user", "content", cmd);
	free(cmd);
	if (harness)
		json_object_set_new(body, "metadata", json_pack("{s:s}", "harness", harness));
	json_t *reply = NULL;
	int rc = call("POST", "/runs", body, "run", &reply, NULL);
	json_decref(body);
	if (rc)
		return rc;
	const char *run_id = json_string_value(json_object_get(reply, "runId"));
	if (!run_id) {
		json_decref(reply);
		return error("run: no runId in the reply");
	}
	if (cli.json) {
		printf("{\"runId\":\"%s\",\"threadId\":", run_id);
		json_t *t = json_string(cli.thread);
		json_dumpf(t, stdout, JSON_ENCODE_ANY);
		json_decref(t);
		printf("}\n");
		fflush(stdout);
	} else if (isatty(STDERR_FILENO))
		fprintf(stderr, "%srun %s (thread %s)%s\n", DIM(cli.color_err), run_id, cli.thread,
			RESET(cli.color_err));
	rc = tail_to_end(run_id, -1);
	json_decref(reply);
	return rc;
}
