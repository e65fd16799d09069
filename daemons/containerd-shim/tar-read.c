/* SPDX-License-Identifier: MIT */
/*
 * tar-read.c — the read loops of a tar (tar-read.h).
 */
#include "config.h"

#include "tar-read.h"

#include <errno.h>
#include <unistd.h>

#include <archive.h>

int
tar_read_open(bool xz_bzip2, TarOpenFn open, void *userdata, const char *unreadable, Reason *why,
	      struct archive **ret)
{
	struct archive *a = archive_read_new();

	if (!a)
		return -ENOMEM;
	archive_read_support_filter_gzip(a);
	archive_read_support_filter_zstd(a);
	if (xz_bzip2) {
		archive_read_support_filter_xz(a);
		archive_read_support_filter_bzip2(a);
	}
	archive_read_support_filter_none(a);
	archive_read_support_format_tar(a);
	if (open(a, userdata) != ARCHIVE_OK) {
		reason_set(why, "%s: %s", unreadable, archive_error_string(a) ?: "unreadable");
		archive_read_free(a);
		return -EINVAL;
	}
	*ret = a;
	return 0;
}

int
tar_refuse(Reason *why, const char *prefix, int max, const char *path, const char *what)
{
	reason_set(why, "%s'%.*s': %s", prefix, max, path ? path : "?", what);
	return -EINVAL;
}

int
tar_read_entries(struct archive *a, TarEntryFn fn, void *userdata, const char *broken, Reason *why)
{
	struct archive_entry *e;

	for (;;) {
		int k = archive_read_next_header(a, &e), r;
		if (k == ARCHIVE_EOF)
			return 0;
		if (k < ARCHIVE_WARN) {
			reason_set(why, "%s: %s", broken, archive_error_string(a) ?: "corrupt");
			return -EINVAL;
		}
		r = fn(e, userdata);
		if (r < 0)
			return r;
	}
}

int
tar_read_data(struct archive *a, int fd, int64_t size, const char **ret_what)
{
	for (;;) {
		const void *buf;
		size_t len;
		la_int64_t off;
		int r = archive_read_data_block(a, &buf, &len, &off);
		if (r == ARCHIVE_EOF)
			return 0;
		if (r < ARCHIVE_WARN) {
			*ret_what = archive_error_string(a) ?: "read error";
			return -EINVAL;
		}
		if (off < 0 || (uint64_t)off + len > (uint64_t)size) {
			*ret_what = "data beyond the entry's size";
			return -EINVAL;
		}
		for (size_t done = 0; done < len;) {
			ssize_t n = pwrite(fd, (const char *)buf + done, len - done,
					   (off_t)((uint64_t)off + done));
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return -errno;
			done += (size_t)n;
		}
	}
}
