/* SPDX-License-Identifier: MIT */
/*
 * cmd-restore.c — `runwarden restore THREAD SNAPSHOT-ID`: restore a thread's
 * workspace from a snapshot.
 */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>

#include "cli.h"

static json_t *
restore_body(char **args, int n)
{
	return json_pack("{s:s}", "snapshotId", args[1]);
}

int
cmd_restore(int argc, char **argv)
{
	static const ThreadCmd cmd = {
	    2, 2, "restore: THREAD SNAPSHOT-ID are required", "restore", "restore", restore_body};
	json_t *reply = NULL;
	Response raw;
	int rc = thread_cmd_post(argc, argv, &cmd, NULL, &raw);
	if (rc)
		return rc;
	if (cli.json)
		printf("%s\n", raw.len ? raw.body : "{}");
	else
		printf("restored thread %s\n", argv[optind]);
	response_free(&raw);
	json_decref(reply);
	return 0;
}
