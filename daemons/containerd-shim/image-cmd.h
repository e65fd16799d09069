/* SPDX-License-Identifier: MIT */
/*
 * image-cmd.h — `containerd-shim image …`, the image store's command line
 * (image-cmd.c), and the store's settings from the shim's configuration.
 */
#pragma once

#include "image-store.h"
#include "shim-conf.h"

/* <state_dir>/images and the import caps of c. */
void image_store_from_conf(const ShimConf *c, ImageStore *st);

/* argv[0] is the command (import, ls, inspect, rm, gc). Returns the exit
 * status: 0, 1 (failed), 2 (usage), 3 (in use), 4 (no such image). */
int image_cmd(const ShimConf *c, int argc, char **argv);
