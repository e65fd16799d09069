/* SPDX-License-Identifier: MIT */
/*
 * log.h — logging for the three daemons and the CLI.
 *
 * Two backends, chosen once by log_open():
 *  - journald (libsystemd), when stderr is the journal stream systemd gave us
 *    (JOURNAL_STREAM matches fd 2) or RUNWARDEN_LOG=journal. Each entry carries
 *    PRIORITY, SYSLOG_IDENTIFIER, CODE_FILE/LINE/FUNC, ERRNO and the run context
 *    fields below, so `journalctl RUN_ID=<id>` tells one run's story.
 *  - stderr otherwise: "<N>ident: message [RUN_ID=… THREAD_ID=…]" with the
 *    syslog priority prefix and no timestamp (journald stream capture keeps the
 *    level), or "ident: level: message" on a terminal.
 *
 * Structured fields (all optional, project wide):
 *   RUN_ID      the public run id (uuid)
 *   THREAD_ID   the client's thread id (user-controlled, logged quoted)
 *   SANDBOX_ID  the shim's sandbox id
 *   MESSAGE_ID  a catalog id for run start/finish/watchdog/cancel/sandbox events
 *
 * The log_*_errno() forms take a negative or positive errno, make it available
 * to %m in the format, and return it negated, so a caller writes
 *   return log_error_errno(r, "Failed to open '%s': %m", path);
 *
 * common/ code never logs above LOG_DEBUG: it returns errnos.
 * Secrets must never be passed to any of these functions.
 */
#pragma once

#include <stdarg.h>
#include <syslog.h>

#include "macro.h"

typedef struct LogCtx {
	const char *run_id;	/* may be NULL */
	const char *thread_id;	/* may be NULL */
	const char *sandbox_id; /* may be NULL */
} LogCtx;

/* MESSAGE_IDs (128-bit, as journald wants) for the catalogued events. */
#define RW_MESSAGE_RUN_STARTED "8c5f2b7b1a5e4a7e9d3f0b6c2e1a9d01"
#define RW_MESSAGE_RUN_FINISHED "8c5f2b7b1a5e4a7e9d3f0b6c2e1a9d02"
#define RW_MESSAGE_RUN_WATCHDOG "8c5f2b7b1a5e4a7e9d3f0b6c2e1a9d03"
#define RW_MESSAGE_RUN_CANCELLED "8c5f2b7b1a5e4a7e9d3f0b6c2e1a9d04"
#define RW_MESSAGE_SANDBOX_CREATED "8c5f2b7b1a5e4a7e9d3f0b6c2e1a9d05"
#define RW_MESSAGE_SANDBOX_DESTROYED "8c5f2b7b1a5e4a7e9d3f0b6c2e1a9d06"

/* Choose the backend and set the identifier. Safe to call more than once. */
void log_open(const char *ident);
/* Entries above this level (LOG_ERR … LOG_DEBUG) are dropped. Default LOG_INFO. */
void log_set_max_level(int level);
/* "debug", "info", "notice", "warning", "error" → level, or -EINVAL. */
int log_level_from_string(const char *s);

/* The one implementation. err may be 0. Returns -abs(err) (0 when err == 0). */
int log_internal(int level, int err, const LogCtx *ctx, const char *message_id, const char *file,
		 int line, const char *func, const char *fmt, ...) _printf_(8, 9);

#define log_full_errno(level, err, ...)                                                            \
	log_internal((level), (err), NULL, NULL, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_full(level, ...) (void)log_full_errno((level), 0, __VA_ARGS__)

#define log_debug(...) log_full(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_full(LOG_INFO, __VA_ARGS__)
#define log_notice(...) log_full(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) log_full(LOG_WARNING, __VA_ARGS__)
#define log_error(...) log_full(LOG_ERR, __VA_ARGS__)
#define log_crit(...) log_full(LOG_CRIT, __VA_ARGS__)

#define log_debug_errno(err, ...) log_full_errno(LOG_DEBUG, (err), __VA_ARGS__)
#define log_info_errno(err, ...) log_full_errno(LOG_INFO, (err), __VA_ARGS__)
#define log_warning_errno(err, ...) log_full_errno(LOG_WARNING, (err), __VA_ARGS__)
#define log_error_errno(err, ...) log_full_errno(LOG_ERR, (err), __VA_ARGS__)

/* With run context: log_ctx(LOG_INFO, &ctx, "…"), optionally a MESSAGE_ID. */
#define log_ctx(level, ctx, ...)                                                                   \
	(void)log_internal((level), 0, (ctx), NULL, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_ctx_errno(level, err, ctx, ...)                                                        \
	log_internal((level), (err), (ctx), NULL, __FILE__, __LINE__, __func__, __VA_ARGS__)
#define log_ctx_msgid(level, ctx, msgid, ...)                                                      \
	(void)log_internal((level), 0, (ctx), (msgid), __FILE__, __LINE__, __func__, __VA_ARGS__)
