/* SPDX-License-Identifier: MIT */
/*
 * cmd-image.c — `runwarden image [--config FILE]... COMMAND …`: the image
 * store is the shim's, on this host (docs/IMAGES.md), so this runs
 * `containerd-shim [--config FILE]... image COMMAND …` from the daemons'
 * directory, as root.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

int
cmd_image(int argc, char **argv)
{
	const char *dir = getenv("RUNWARDEN_LIBEXECDIR") ?: PKGLIBEXECDIR;
	char bin[4200];
	char **av = calloc((size_t)argc + 3, sizeof(char *));
	int n = 0, i = 1;

	if (!av)
		return error("out of memory");
	snprintf(bin, sizeof(bin), "%s/containerd-shim", dir);
	av[n++] = bin;
	for (; i + 1 < argc && (strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "-c") == 0);
	     i += 2) {
		av[n++] = "--config";
		av[n++] = argv[i + 1];
	}
	if (i >= argc) {
		free(av);
		return usage_error("image: import NAME SOURCE | ls | inspect NAME | rm NAME | gc");
	}
	av[n++] = "image";
	for (; i < argc; i++)
		av[n++] = argv[i];
	av[n] = NULL;
	execv(bin, av);
	error("image: cannot run '%s': %m", bin);
	free(av);
	return EXIT_CLI;
}
