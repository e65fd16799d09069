/* SPDX-License-Identifier: MIT */
/*
 * cmd-snapshot.c — `runwarden snapshot THREAD [LABEL]`: snapshot a thread's
 * workspace; prints the snapshot id.
 */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>

#include "cli.h"

static json_t *
snapshot_body(char **args, int n)
{
	json_t *body = json_object();

	if (n == 2)
		json_object_set_new(body, "label", json_string(args[1]));
	return body;
}

int
cmd_snapshot(int argc, char **argv)
{
	static const ThreadCmd cmd = {
	    1, 2, "snapshot: THREAD [LABEL] is required", "snapshots", "snapshot", snapshot_body};
	json_t *reply;
	int rc = thread_cmd_post(argc, argv, &cmd, &reply, NULL);
	if (rc)
		return rc;
	if (cli.json)
		print_json(reply);
	else {
		const char *id = json_string_value(json_object_get(reply, "snapshotId"));
		if (!id)
			rc = error("snapshot: no snapshotId in the reply");
		else
			printf("%s\n", id);
	}
	json_decref(reply);
	return rc;
}
