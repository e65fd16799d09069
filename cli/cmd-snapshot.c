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

int
cmd_snapshot(int argc, char **argv)
{
	char path[1024];
	int rc = thread_cmd_begin(argc, argv, 1, 2, "snapshot: THREAD [LABEL] is required",
				  "snapshots", path, sizeof(path));
	if (rc)
		return rc;
	json_t *body = json_object(), *reply;
	if (argc - optind == 2)
		json_object_set_new(body, "label", json_string(argv[optind + 1]));
	rc = call("POST", path, body, "snapshot", &reply, NULL);
	json_decref(body);
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
