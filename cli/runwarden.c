/* SPDX-License-Identifier: MIT */
/*
 * runwarden — the command-line client of the public HTTP API (and `up`, the
 * foreground development mode that starts the three daemons): the global
 * options, --help and the command table. Each command is cli/cmd-NAME.c;
 * what they share is cli.h. Exit status: see cli.h.
 */
#include "config.h"

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

static void
help(void)
{
	printf(
	    "runwarden — client of the runwarden HTTP API\n\n"
	    "Usage: runwarden [--url URL] [--json] COMMAND [ARG...]\n\n"
	    "Commands:\n"
	    "  run [--thread T] [--harness H] COMMAND...  start a run, stream its output,\n"
	    "                                exit with its status\n"
	    "  tail RUN [--thread T] [--from SEQ]   follow a run's events after SEQ\n"
	    "  ls [--thread T] [--running]          the runs of a thread, newest first\n"
	    "  show RUN [--thread T]                a run's record\n"
	    "  cancel RUN [--thread T]              stop a run and its processes\n"
	    "  snapshot THREAD [LABEL]              snapshot a thread's workspace\n"
	    "  restore THREAD SNAPSHOT-ID           restore a thread's workspace\n"
	    "  files get|ls|rm|mkdir THREAD PATH    a workspace file's bytes, a directory's\n"
	    "                                       entries, remove, make a directory\n"
	    "  files put THREAD PATH [FILE] [--mode 0644]  write FILE (or stdin) as PATH\n"
	    "  up [--listen ADDR:PORT] [--state-dir DIR] [--config FILE] [--build-dir DIR]\n"
	    "                                       run the three daemons in the foreground\n"
	    "  image [--config FILE]... import NAME SOURCE | ls | inspect NAME | rm NAME | gc\n"
	    "                                       sandbox images on this host (as root;\n"
	    "                                       docs/IMAGES.md): SOURCE an OCI layout dir,\n"
	    "                                       oci-archive, docker-archive or rootfs tar\n"
	    "  cluster status [--config FILE]... [--threads]  cluster mode: the nodes (alive or\n"
	    "                                       lost), their load, the threads they own,\n"
	    "                                       read from NATS with runwarden.conf's "
	    "[cluster]\n\n"
	    "Options:\n"
	    "  -u, --url URL     the server (default $RUNWARDEN_URL or " DEFAULT_URL ")\n"
	    "  -j, --json        print the server's JSON instead of text\n"
	    "  -t, --thread T    thread id (default $RUNWARDEN_THREAD or '" DEFAULT_THREAD "');\n"
	    "                    a run is found only in its own thread (show, tail, cancel)\n"
	    "  -T, --token-file F  read the bearer token from F (default $RUNWARDEN_TOKEN_FILE;\n"
	    "                    its first token; routerd's tokens_file works as it is)\n"
	    "  -h, --help        this help\n"
	    "  -V, --version     the version\n\n"
	    "The token (--token-file, else RUNWARDEN_TOKEN) is sent as 'Authorization: Bearer'.\n"
	    "Exit status: the run's for\n"
	    "run and tail; 125 when the CLI fails (server down, HTTP error); 2 on usage.\n");
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"url", required_argument, NULL, 'u'},
	    {"json", no_argument, NULL, 'j'},
	    {"thread", required_argument, NULL, 't'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"token-file", required_argument, NULL, 'T'},
	    {},
	};
	static const struct {
		const char *name;
		int (*fn)(int, char **);
		bool needs_client;
	} cmds[] = {
	    {"run", cmd_run, true},	    {"tail", cmd_tail, true},
	    {"ls", cmd_ls, true},	    {"show", cmd_show, true},
	    {"cancel", cmd_cancel, true},   {"snapshot", cmd_snapshot, true},
	    {"restore", cmd_restore, true}, {"files", cmd_files, true},
	    {"up", cmd_up, false},	    {"cluster", cmd_cluster, false},
	    {"image", cmd_image, false},
	};
	const char *url = getenv("RUNWARDEN_URL");
	const char *token_file = getenv("RUNWARDEN_TOKEN_FILE");
	int c;

	cli.thread = getenv("RUNWARDEN_THREAD");
	if (!cli.thread || !*cli.thread)
		cli.thread = DEFAULT_THREAD;
	bool no_color = getenv("NO_COLOR") && *getenv("NO_COLOR");
	const char *term = getenv("TERM");
	no_color = no_color || (term && strcmp(term, "dumb") == 0);
	cli.color = !no_color && isatty(STDOUT_FILENO);
	cli.color_err = !no_color && isatty(STDERR_FILENO);

	while ((c = getopt_long(argc, argv, "+u:jt:T:hV", opts, NULL)) >= 0) {
		switch (c) {
		case 'u': url = optarg; break;
		case 'j': cli.json = true; break;
		case 't': cli.thread = optarg; break;
		case 'T': token_file = optarg; break;
		case 'h': help(); return 0;
		case 'V': printf("runwarden %s\n", PACKAGE_VERSION); return 0;
		default: fprintf(stderr, "Try 'runwarden --help'.\n"); return EXIT_USAGE;
		}
	}
	if (!url || !*url)
		url = DEFAULT_URL;
	cli.token = getenv("RUNWARDEN_TOKEN");
	if (token_file && *token_file && read_token_file(token_file, &cli.token) < 0)
		return EXIT_CLI;
	if (optind >= argc) {
		help();
		return EXIT_USAGE;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(argv[optind], cmds[i].name) != 0)
			continue;
		if (cmds[i].needs_client && client_init(&cli.client, url, cli.token) < 0)
			return error("%s", cli.client.err);
		return cmds[i].fn(argc - optind, argv + optind);
	}
	return usage_error("unknown command '%s'", argv[optind]);
}
