/* SPDX-License-Identifier: MIT */
/*
 * reason.h — the words that go with a negative errno.
 *
 * A function that can fail in a way its caller must explain (to a client, in
 * a log line, in a doctor report) returns a negative errno as usual and takes
 * a Reason *why (may be NULL) that it fills in with one line naming the
 * failing step: "mkdir /sys/fs/cgroup/…: Permission denied", "'a/b': more than
 * restore_max_entries entries". The errno stays the return value; the Reason
 * is only the text. The caller reads it with reason_text(), which falls back
 * to strerror() when the callee set none.
 *
 *     Reason why = {""};
 *     r = cgroup_jobs_create(h, &cg, &why);
 *     if (r < 0)
 *             log_error_errno(r, "jobs' cgroup: %s", reason_text(&why, r));
 *
 * Header only: the cgroup layer, the shim's leaf modules and the fuzz
 * harnesses share it without linking anything more.
 */
#pragma once

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "macro.h"

typedef struct Reason {
	char msg[320]; /* "" = none given */
} Reason;

/* Set why's text (NULL-safe); returns 0, so that a failure path reads as one
 * expression: return reason_set(why, "mkdir %s: %s", p, strerror(-r)), r; */
static inline _printf_(2, 3) int reason_set(Reason *why, const char *fmt, ...)
{
	va_list ap;

	if (!why)
		return 0;
	va_start(ap, fmt);
	vsnprintf(why->msg, sizeof(why->msg), fmt, ap);
	va_end(ap);
	return 0;
}

/* why's text, or strerror(-err) when it has none. */
static inline const char *
reason_text(const Reason *why, int err)
{
	return why && why->msg[0] ? why->msg : strerror(err < 0 ? -err : err);
}
