/* SPDX-License-Identifier: MIT */
/*
 * reasons.h — the ERROR reasons of reasons.def: one constant per row,
 * REASON_ID, the reason's wire name ("thread_busy"), so that a sender cannot
 * send a name the table lacks (a misspelt one does not compile), and the
 * row's facts for a receiver: its errnos and routerd's HTTP status and code.
 *
 *     peer_reply_error_reason(p, req_id, -EBUSY, REASON_THREAD_BUSY, "…");
 *
 * The constants are strings because reasons travel as strings (an ERROR
 * relayed from the shim keeps the shim's reason) and may be kept in a
 * `const char *` beside the errno they go with.
 */
#pragma once

#include <stddef.h>

#define ERRNOS(...) __VA_ARGS__
#define REASON(id, name, errnos, status, code, help) extern const char REASON_##id[];
#include "reasons.def"
#undef REASON

typedef enum PeerReasonId {
#define REASON(id, name, errnos, status, code, help) PEER_REASON_##id,
#include "reasons.def"
#undef REASON
	_PEER_REASON_MAX,
} PeerReasonId;

typedef struct PeerReasonInfo {
	const char *name;
	const int *errnos; /* positive errnos, 0-terminated; the first is the usual one */
	int status;	   /* routerd's HTTP status */
	const char *code;  /* routerd's JSON "code" */
	const char *help;
} PeerReasonInfo;

extern const PeerReasonInfo peer_reasons[_PEER_REASON_MAX];

/* The row of a wire name, or NULL (an older or newer peer's reason). */
const PeerReasonInfo *peer_reason_lookup(const char *name);

/* Among the rows ids[0..n) in order, the first that lists the errno err
 * (negative or positive); fallback when none does. */
const char *peer_reason_of_errno(int err, const PeerReasonId *ids, size_t n, const char *fallback);
