/* SPDX-License-Identifier: MIT */
/*
 * reasons.c — the tables reasons.h declares, expanded from reasons.def.
 */
#include "config.h"

#include "reasons.h"

#include <errno.h>
#include <string.h>

#include "macro.h"

#define REASON(id, name, errnos, status, code, help) const char REASON_##id[] = name;
#include "reasons.def"
#undef REASON

const PeerReasonInfo peer_reasons[_PEER_REASON_MAX] = {
#define REASON(id, name, errnos, status, code, help)                                               \
	[PEER_REASON_##id] = {REASON_##id, (const int[]){errnos, 0}, status, code, help},
#include "reasons.def"
#undef REASON
};

const PeerReasonInfo *
peer_reason_lookup(const char *name)
{
	if (!name)
		return NULL;
	for (size_t i = 0; i < _PEER_REASON_MAX; i++)
		if (streq(peer_reasons[i].name, name))
			return &peer_reasons[i];
	return NULL;
}

const char *
peer_reason_of_errno(int err, const PeerReasonId *ids, size_t n, const char *fallback)
{
	if (err < 0)
		err = -err;
	for (size_t i = 0; i < n; i++)
		for (const int *e = peer_reasons[ids[i]].errnos; *e; e++)
			if (*e == err)
				return peer_reasons[ids[i]].name;
	return fallback;
}
