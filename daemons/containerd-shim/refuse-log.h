/* SPDX-License-Identifier: MIT */
/*
 * refuse-log.h — the journal lines of the egress proxy's and the forward's
 * refusals, rate-limited (issue 30 item 6).
 *
 * A sandbox can make thousands of refused requests a second (a loop that sends
 * `GET /` to $HTTPS_PROXY); each is answered (403/405/400/431/502 or a close)
 * but only the first few of each kind per sandbox reach the log. Per sandbox
 * and kind, at most `burst` lines per window; the rest are counted and, when
 * the window ends (a timer: the summary comes even when the flood stopped),
 * logged as one line "N more refusals of class X from sandbox S suppressed".
 * Across all sandboxes at most `global_burst` lines per window, whatever the
 * kind (a host with many flooding sandboxes), the rest counted in one summary.
 * refuse_log_flush_sandbox() writes a sandbox's summaries at once and forgets
 * it (its last run's listeners closed).
 *
 * Memory: one small record per sandbox that was refused something in the
 * current window, freed at the window's end (or the flush).
 * Single-threaded (the shim's loop).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "log.h"
#include "macro.h"
#include "time-util.h"

struct event_base;
typedef struct RefuseLog RefuseLog;

typedef enum RefuseKind {
	REFUSE_CONN_LIMIT,     /* accept: too many connections open */
	REFUSE_HEAD_TOO_LARGE, /* 431 */
	REFUSE_HEAD_TIMEOUT,   /* no complete head in time */
	REFUSE_NOT_CONNECT,    /* 405 */
	REFUSE_IP_LITERAL,     /* 403 */
	REFUSE_MALFORMED,      /* 400 */
	REFUSE_NOT_ALLOWED,    /* 403, not on the allowlist */
	REFUSE_UNRESOLVED,     /* 502, the name does not resolve */
	REFUSE_ADDRESS,	       /* 403, resolves to a non-public address */
	REFUSE_CONNECT_FAILED, /* 502, no address answered */
	REFUSE_FORWARD_FAILED, /* a forward's target did not answer */
	_REFUSE_KIND_MAX
} RefuseKind;

#define REFUSE_WINDOW_USEC (30 * USEC_PER_SEC)
#define REFUSE_BURST 3	       /* lines per sandbox, kind and window */
#define REFUSE_GLOBAL_BURST 60 /* lines per window, all sandboxes and kinds */

int refuse_log_new(struct event_base *base, usec_t window, unsigned burst, unsigned global_burst,
		   RefuseLog **ret);
/* Writes the summaries still held back; NULL-safe; returns NULL. */
RefuseLog *refuse_log_free(RefuseLog *rl);

/* One refusal of kind k by ctx->sandbox_id (required): logged at level with
 * ctx when the limits allow it, else counted. Returns true when logged. */
bool refuse_log(RefuseLog *rl, RefuseKind k, int level, const LogCtx *ctx, const char *fmt, ...)
    _printf_(5, 6);

/* The refusals of sandbox_id held back so far (tests). */
unsigned refuse_log_held(const RefuseLog *rl, const char *sandbox_id, RefuseKind k);

/* Log sandbox_id's summaries now and forget its counters. */
void refuse_log_flush_sandbox(RefuseLog *rl, const char *sandbox_id);
