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

int
cmd_restore(int argc, char **argv)
{
	char path[1024];
	int rc = thread_cmd_begin(argc, argv, 2, 2, "restore: THREAD SNAPSHOT-ID are required",
				  "restore", path, sizeof(path));
	if (rc)
		return rc;
	json_t *body = json_pack("{s:s}", "snapshotId", argv[optind + 1]), *reply = NULL;
	Response raw;
	rc = call("POST", path, body, "restore", NULL, &raw);
	json_decref(body);
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
