/* SPDX-License-Identifier: MIT */
/*
 * tar-read.h — the read loops of a tar that image-layer.c (a layer applied)
 * and snapshot.c (a restore) share: the headers one by one, and an entry's
 * data written to a file. Each caller opens the archive itself (its filters
 * and its reader) and checks each entry its own way. libarchive and libc
 * only; nothing logs.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "reason.h"

struct archive;
struct archive_entry;

/* Opens a on its source (archive_read_open*()): ARCHIVE_OK or libarchive's
 * error. */
typedef int (*TarOpenFn)(struct archive *a, void *userdata);

/* A reader of a tar, uncompressed or gzip or zstd (with xz_bzip2, xz and
 * bzip2 too), opened by open(a, userdata). Returns 0 with *ret (free it with
 * archive_read_free()), -ENOMEM, or -EINVAL when open fails, with why set to
 * "<unreadable>: <libarchive's words>". */
int tar_read_open(bool xz_bzip2, TarOpenFn open, void *userdata, const char *unreadable,
		  Reason *why, struct archive **ret);

/* An entry refused: why set to "<prefix>'<path, its first max bytes>': <what>"
 * ("?" for no path). Returns -EINVAL. */
int tar_refuse(Reason *why, const char *prefix, int max, const char *path, const char *what);

/* Called for each entry: ≥0 goes on, a negative errno stops the loop. */
typedef int (*TarEntryFn)(struct archive_entry *e, void *userdata);

/* Read the headers of a to its end and call fn on each. Returns 0 at the end,
 * fn's error as it is, or -EINVAL for a header libarchive cannot read, with
 * why set to "<broken>: <libarchive's words>". */
int tar_read_entries(struct archive *a, TarEntryFn fn, void *userdata, const char *broken,
		     Reason *why);

/* Write the data of a's current entry, of size bytes as its header says, to
 * fd at its offsets (holes stay holes; the caller sets the length). Returns
 * 0, a negative errno from pwrite(), or -EINVAL with *ret_what saying what is
 * wrong (libarchive's words, valid until the next call on a, or data beyond
 * size). */
int tar_read_data(struct archive *a, int fd, int64_t size, const char **ret_what);
