/* SPDX-License-Identifier: MIT */
/*
 * refuse-log.c — rate-limited log lines for the proxy's refusals (see the
 * header). The window is one timer for all sandboxes, armed by the first
 * refusal after a quiet window: when it fires every sandbox's held-back
 * counts are logged, one line per kind, and every counter starts again.
 */
#include "config.h"

#include "refuse-log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

typedef struct Counter {
	unsigned logged, held;
} Counter;

typedef struct SandboxRefusals SandboxRefusals;
struct SandboxRefusals {
	SandboxRefusals *next;
	char sandbox_id[65];
	Counter c[_REFUSE_KIND_MAX];
};

struct RefuseLog {
	struct event *tick;
	usec_t window;
	unsigned burst, global_burst;
	Counter global;
	SandboxRefusals *sandboxes;
};

static const char *const kind_names[_REFUSE_KIND_MAX] = {
    [REFUSE_CONN_LIMIT] = "too many connections",
    [REFUSE_HEAD_TOO_LARGE] = "head too large",
    [REFUSE_HEAD_TIMEOUT] = "head timeout",
    [REFUSE_NOT_CONNECT] = "not CONNECT",
    [REFUSE_IP_LITERAL] = "IP literal",
    [REFUSE_MALFORMED] = "malformed",
    [REFUSE_NOT_ALLOWED] = "not on the allowlist",
    [REFUSE_UNRESOLVED] = "name not resolved",
    [REFUSE_ADDRESS] = "non-public address",
    [REFUSE_CONNECT_FAILED] = "cannot connect",
    [REFUSE_FORWARD_FAILED] = "forward target unreachable",
};

static void
sandbox_summaries(RefuseLog *rl, SandboxRefusals *s)
{
	LogCtx ctx = {.sandbox_id = s->sandbox_id};

	for (int k = 0; k < _REFUSE_KIND_MAX; k++)
		if (s->c[k].held > 0)
			log_ctx(LOG_WARNING, &ctx,
				"Proxy: %u more refusals of class '%s' from sandbox %s suppressed "
				"(at most %u logged per %u s)",
				s->c[k].held, kind_names[k], s->sandbox_id, rl->burst,
				(unsigned)(rl->window / USEC_PER_SEC));
}

static void
global_summary(RefuseLog *rl)
{
	if (rl->global.held > 0)
		log_warning("Proxy: %u more refusals from all sandboxes suppressed (at most %u "
			    "logged per %u s)",
			    rl->global.held, rl->global_burst,
			    (unsigned)(rl->window / USEC_PER_SEC));
	rl->global = (Counter){0};
}

static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	RefuseLog *rl = arg;

	while (rl->sandboxes) {
		SandboxRefusals *s = rl->sandboxes;
		rl->sandboxes = s->next;
		sandbox_summaries(rl, s);
		free(s);
	}
	global_summary(rl);
}

int
refuse_log_new(struct event_base *base, usec_t window, unsigned burst, unsigned global_burst,
	       RefuseLog **ret)
{
	RefuseLog *rl = calloc(1, sizeof(*rl));

	if (!rl)
		return -ENOMEM;
	rl->tick = evtimer_new(base, tick_cb, rl);
	if (!rl->tick) {
		free(rl);
		return -ENOMEM;
	}
	rl->window = window;
	rl->burst = burst;
	rl->global_burst = global_burst;
	*ret = rl;
	return 0;
}

RefuseLog *
refuse_log_free(RefuseLog *rl)
{
	if (!rl)
		return NULL;
	tick_cb(-1, 0, rl);
	event_free(rl->tick);
	free(rl);
	return NULL;
}

static SandboxRefusals *
sandbox_find(const RefuseLog *rl, const char *sandbox_id)
{
	for (SandboxRefusals *s = rl->sandboxes; s; s = s->next)
		if (streq(s->sandbox_id, sandbox_id))
			return s;
	return NULL;
}

bool
refuse_log(RefuseLog *rl, RefuseKind k, int level, const LogCtx *ctx, const char *fmt, ...)
{
	const char *sb = ctx->sandbox_id ? ctx->sandbox_id : "";
	SandboxRefusals *s = sandbox_find(rl, sb);
	char msg[1024];
	va_list ap;

	if (!evtimer_pending(rl->tick, NULL)) {
		struct timeval tv = {.tv_sec = (time_t)(rl->window / USEC_PER_SEC),
				     .tv_usec = (suseconds_t)(rl->window % USEC_PER_SEC)};
		evtimer_add(rl->tick, &tv);
	}
	if (!s && strlen(sb) < sizeof(s->sandbox_id)) {
		s = calloc(1, sizeof(*s));
		if (s) {
			strcpy(s->sandbox_id, sb);
			s->next = rl->sandboxes;
			rl->sandboxes = s;
		}
	}
	if (!s) { /* no memory (or a foreign id): the global limit alone */
		if (rl->global.logged >= rl->global_burst) {
			rl->global.held++;
			return false;
		}
	} else if (s->c[k].logged >= rl->burst) {
		s->c[k].held++;
		return false;
	} else if (rl->global.logged >= rl->global_burst) {
		rl->global.held++;
		return false;
	}
	if (s)
		s->c[k].logged++;
	rl->global.logged++;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_ctx(level, ctx, "%s", msg);
	return true;
}

unsigned
refuse_log_held(const RefuseLog *rl, const char *sandbox_id, RefuseKind k)
{
	const SandboxRefusals *s = sandbox_find(rl, sandbox_id);

	return s ? s->c[k].held : 0;
}

void
refuse_log_flush_sandbox(RefuseLog *rl, const char *sandbox_id)
{
	for (SandboxRefusals **pp = &rl->sandboxes; *pp; pp = &(*pp)->next)
		if (streq((*pp)->sandbox_id, sandbox_id)) {
			SandboxRefusals *s = *pp;
			*pp = s->next;
			sandbox_summaries(rl, s);
			free(s);
			return;
		}
}
