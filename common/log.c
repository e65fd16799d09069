/* SPDX-License-Identifier: MIT */
#include "config.h"

#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#ifdef HAVE_SYSTEMD
#include <systemd/sd-journal.h>
#endif

static const char *log_ident = "runwarden";
static int log_max_level = LOG_INFO;
static int log_use_journal = 0;
static int log_tty = 0;

static const char *const level_names[] = {
    [LOG_EMERG] = "emerg",     [LOG_ALERT] = "alert",	[LOG_CRIT] = "crit", [LOG_ERR] = "error",
    [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice", [LOG_INFO] = "info", [LOG_DEBUG] = "debug",
};

/* systemd sets JOURNAL_STREAM=dev:ino for the stream it connected to stderr;
 * only trust it when fd 2 really is that stream (a child may inherit the
 * variable with stderr redirected elsewhere). */
static int
stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2)
		return 0;
	if (fstat(STDERR_FILENO, &st) < 0)
		return 0;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void
log_open(const char *ident)
{
	const char *forced = getenv("RUNWARDEN_LOG");

	if (ident)
		log_ident = ident;
	log_tty = isatty(STDERR_FILENO);
#ifdef HAVE_SYSTEMD
	if (forced && streq(forced, "journal"))
		log_use_journal = 1;
	else if (forced && streq(forced, "stderr"))
		log_use_journal = 0;
	else
		log_use_journal = stderr_is_journal();
#else
	(void)forced;
	(void)stderr_is_journal;
	log_use_journal = 0;
#endif
}

void
log_set_max_level(int level)
{
	log_max_level = level;
}

int
log_level_from_string(const char *s)
{
	for (size_t i = 0; i < ELEMENTSOF(level_names); i++)
		if (level_names[i] && streq(level_names[i], s))
			return (int)i;
	if (streq(s, "err"))
		return LOG_ERR;
	if (streq(s, "warn"))
		return LOG_WARNING;
	return -EINVAL;
}

#ifdef HAVE_SYSTEMD
static void
log_journal(int level, int err, const LogCtx *ctx, const char *message_id, const char *file,
	    int line, const char *func, const char *msg)
{
	char f_msg[4200], f_prio[32], f_ident[128], f_file[512], f_line[32], f_func[256],
	    f_errno[32], f_run[128], f_thread[400], f_sandbox[128], f_msgid[64];
	struct iovec iov[12];
	int n = 0;

#define ADD(buf, ...)                                                                              \
	do {                                                                                       \
		int _l = snprintf(buf, sizeof(buf), __VA_ARGS__);                                  \
		if (_l < 0)                                                                        \
			break;                                                                     \
		iov[n].iov_base = buf;                                                             \
		iov[n].iov_len = MIN((size_t)_l, sizeof(buf) - 1);                                 \
		n++;                                                                               \
	} while (0)
	ADD(f_msg, "MESSAGE=%s", msg);
	ADD(f_prio, "PRIORITY=%d", level);
	ADD(f_ident, "SYSLOG_IDENTIFIER=%s", log_ident);
	ADD(f_file, "CODE_FILE=%s", file);
	ADD(f_line, "CODE_LINE=%d", line);
	ADD(f_func, "CODE_FUNC=%s", func);
	if (err)
		ADD(f_errno, "ERRNO=%d", err);
	if (ctx && ctx->run_id)
		ADD(f_run, "RUN_ID=%s", ctx->run_id);
	if (ctx && ctx->thread_id)
		ADD(f_thread, "THREAD_ID=%s", ctx->thread_id);
	if (ctx && ctx->sandbox_id)
		ADD(f_sandbox, "SANDBOX_ID=%s", ctx->sandbox_id);
	if (message_id)
		ADD(f_msgid, "MESSAGE_ID=%s", message_id);
#undef ADD
	sd_journal_sendv(iov, n);
}
#endif

int
log_internal(int level, int err, const LogCtx *ctx, const char *message_id, const char *file,
	     int line, const char *func, const char *fmt, ...)
{
	char msg[4096];
	char extra[700] = "";
	va_list ap;
	int saved = errno;

	if (err < 0)
		err = -err;
	if (level > log_max_level)
		return -err;

	errno = err; /* for %m */
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

#ifdef HAVE_SYSTEMD
	if (log_use_journal) {
		log_journal(level, err, ctx, message_id, file, line, func, msg);
		errno = saved;
		return -err;
	}
#endif
	if (ctx) {
		size_t o = 0;
		if (ctx->run_id)
			o += (size_t)snprintf(extra + o, sizeof(extra) - o, " RUN_ID=%s",
					      ctx->run_id);
		if (ctx->thread_id && o < sizeof(extra))
			o += (size_t)snprintf(extra + o, sizeof(extra) - o, " THREAD_ID='%s'",
					      ctx->thread_id);
		if (ctx->sandbox_id && o < sizeof(extra))
			snprintf(extra + o, sizeof(extra) - o, " SANDBOX_ID=%s", ctx->sandbox_id);
	}
	if (log_tty)
		fprintf(stderr, "%s: %s: %s%s%s%s\n", log_ident, level_names[level & 7], msg,
			*extra ? " [" : "", *extra ? extra + 1 : "", *extra ? "]" : "");
	else
		fprintf(stderr, "<%d>%s: %s%s%s%s\n", level & 7, log_ident, msg, *extra ? " [" : "",
			*extra ? extra + 1 : "", *extra ? "]" : "");
	errno = saved;
	return -err;
}
