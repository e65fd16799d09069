/* SPDX-License-Identifier: MIT */
/*
 * shimctl — a small blocking client of containerd-shim, for the e2e tests and
 * for poking at a shim by hand.
 *
 *   shimctl SOCKET KEY [OPTIONS] -- ARGV...   ensure the sandbox of KEY, run ARGV
 *                                             in it, stream its output, exit with
 *                                             its exit code
 *   shimctl SOCKET KEY --destroy              destroy the sandbox of KEY
 *   shimctl SOCKET KEY --stats                print "cpu_usec=N procs=N" of the
 *                                             sandbox of KEY (SANDBOX_STATS)
 *   shimctl SOCKET - --list                   print the execs the shim holds, one
 *                                             "EXEC_ID SANDBOX_ID RUNNING" a line
 *   shimctl SOCKET - --attach ID [--from OUT ERR]
 *                                             re-attach to exec ID from the given
 *                                             byte offsets (default 0 0) and stream
 *                                             it like a run; "dropped N bytes of
 *                                             stream S" goes to stderr
 *
 * Options: --cwd DIR (default /workspace), --env K=V (repeatable; replaces the
 * default PATH=/usr/local/bin:/usr/bin:/bin HOME=/workspace), --stdin (send
 * our stdin), --kill-after MS (EXEC_KILL with SIGKILL after MS ms),
 * --timeout MS (EXEC_START timeout_ms), --image NAME (SANDBOX_ENSURE on that
 * image, docs/IMAGES.md), --destroy-after (destroy the sandbox
 * once the exec ended), --detach (print "exec_id=N" once it started and
 * disconnect: the exec keeps running in the shim), --fresh N [--gap MS] (create
 * N new sandboxes KEY-0… one after the other, time ENSURE → EXIT of ARGV in each,
 * destroy it; prints p50/p99), --repeat N (run ARGV N times
 * in a row in the live sandbox and print the p50/p99 latency of an exec, from
 * EXEC_START to EXEC_EXIT).
 *
 * The reason of the end goes to stderr as
 *   "shimctl: exec N: REASON (exit_code C, signal S)".
 * Exit status: the exec's exit code; 255 when it was lost; 2 for usage or
 * protocol errors (the ERROR message is printed).
 *
 * Layout: the options are a table (options[]: name, kind, field of Opts) and
 * so are the commands (commands[]: which options select one, whether it needs
 * a key and an ARGV); each command is one cmd_* function. A new option is a
 * row and a field; a new command a row and a function.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fd-util.h"
#include "frame.h"
#include "macro.h"
#include "mp-cursor.h"
#include "msg.h"
#include "peer.h"
#include "proto.h"
#include "shim.h"
#include "time-util.h"
#include "unix-socket.h"

#define MAX_FRAME (16 * 1024 * 1024)

static int sock = -1;
static uint64_t next_req = 0;
static uint64_t cur_exec = 0;
static uint64_t next_off[3]; /* offsets expected next, to check replays are gap-free */
static bool quiet;	     /* --repeat: only the first exec's end is reported */

static int
cmp_usec(const void *a, const void *b)
{
	usec_t x = *(const usec_t *)a, y = *(const usec_t *)b;
	return x < y ? -1 : x > y;
}

static _noreturn_ _printf_(1, 2) void die(const char *fmt, ...)
{
	va_list ap;
	fputs("shimctl: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

static uint64_t
send_msg(int type, const MpWriter *w)
{
	char *buf = NULL;
	size_t len = 0;
	uint64_t id = type == MSG_HELLO ? 0 : ++next_req;
	int r = frame_encode(type, id, w ? w->sbuf.data : NULL, w ? w->sbuf.size : 0, MAX_FRAME,
			     &buf, &len);
	if (r < 0)
		die("encode: %s", strerror(-r));
	r = loop_write(sock, buf, len);
	free(buf);
	if (r < 0)
		die("write: %s", strerror(-r));
	return id;
}

static int
read_full(void *buf, size_t len)
{
	char *p = buf;
	while (len > 0) {
		ssize_t n = read(sock, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Blocking read of one frame. */
static void
read_frame(Frame *f)
{
	unsigned char hdr[4];
	uint32_t len;
	char *buf;

	if (read_full(hdr, 4) < 0)
		die("connection closed by the shim");
	len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
	if (len > MAX_FRAME)
		die("oversized frame (%u bytes)", len);
	buf = malloc(len ? len : 1);
	if (!buf || read_full(buf, len) < 0)
		die("short frame");
	if (frame_parse(buf, len, f) < 0)
		die("malformed frame");
	free(buf);
}

/* Returns the exit status of shimctl when the exec ended, -1 otherwise. */
static int
handle_push(const Frame *f)
{
	int ret = -1;

	if (f->type == MSG_EXEC_OUTPUT) {
		_cleanup_(msg_done_EXEC_OUTPUT) Msg_EXEC_OUTPUT m;
		if (msg_decode_EXEC_OUTPUT(f->body, &m) < 0 || m.stream < 1 || m.stream > 2)
			die("bad EXEC_OUTPUT");
		uint64_t stream = m.stream, off = m.offset, len = m.data_len;
		uint64_t dropped = m.has_dropped && m.dropped > 0 ? (uint64_t)m.dropped : 0;
		if (m.exec_id == cur_exec) {
			if (dropped)
				fprintf(stderr,
					"shimctl: dropped %" PRIu64 " bytes of stream %" PRIu64
					"\n",
					dropped, stream);
			if (off != next_off[stream] + dropped)
				die("gap in stream %" PRIu64 ": offset %" PRIu64
				    ", expected %" PRIu64,
				    stream, off, next_off[stream] + dropped);
			next_off[stream] = off + len;
			(void)loop_write(stream == 2 ? STDERR_FILENO : STDOUT_FILENO, m.data, len);
		}
	} else if (f->type == MSG_EXEC_EXIT) {
		_cleanup_(msg_done_EXEC_EXIT) Msg_EXEC_EXIT m;
		/* strict: the shim always sends signal and reason */
		if (msg_decode_EXEC_EXIT(f->body, &m) < 0 || !m.has_signal || !m.reason)
			die("bad EXEC_EXIT");
		if (m.exec_id == cur_exec) {
			if (!quiet)
				fprintf(stderr,
					"shimctl: exec %" PRIu64 ": %s (exit_code %" PRId64
					", signal %" PRId64 ")\n",
					m.exec_id, m.reason, m.exit_code, m.signal);
			ret = streq(m.reason, "lost") ? 255 : (int)(m.exit_code & 0xff);
		}
	}
	return ret;
}

/* call() of a typed request m (msg.h). */
#define CALL(NAME, m, ret)                                                                         \
	do {                                                                                       \
		MpWriter _w;                                                                       \
		mp_writer_init(&_w);                                                               \
		msg_encode_##NAME(&_w, (m));                                                       \
		call(MSG_##NAME, &_w, (ret));                                                      \
		mp_writer_done(&_w);                                                               \
	} while (0)

/* Send a request and wait for its REPLY (pushes in between are handled).
 * On ERROR: print and exit 2. The reply frame is left in *ret. */
static void
call(int type, const MpWriter *w, Frame *ret)
{
	uint64_t id = send_msg(type, w);

	for (;;) {
		Frame f;
		read_frame(&f);
		if ((f.type == MSG_REPLY || f.type == MSG_ERROR) && f.req_id == id) {
			if (f.type == MSG_ERROR) {
				MpReader r;
				const char *msg = "?";
				int64_t code = 0;
				mp_reader_init(&r, f.body);
				mp_read_int(&r, "code", &code);
				mp_read_str(&r, "message", &msg);
				fprintf(stderr, "shimctl: %s failed: %s (%s)\n",
					msg_type_name(type), msg, strerror((int)-code));
				exit(2);
			}
			*ret = f;
			return;
		}
		int st = handle_push(&f);
		frame_done(&f);
		if (st >= 0)
			exit(st);
	}
}

static char *
read_all_stdin(size_t *ret_len)
{
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap);
	ssize_t n;

	while (buf && (n = read(STDIN_FILENO, buf + len, cap - len)) > 0) {
		len += (size_t)n;
		if (len == cap)
			buf = realloc(buf, cap *= 2);
	}
	if (!buf)
		die("out of memory");
	*ret_len = len;
	return buf;
}

/* EXEC_START of cmd in sandbox sid; returns the exec id (dies on error). */
static uint64_t
start_exec(const char *sid, char **cmd, char *const *env, const char *cwd, const char *in,
	   size_t in_len, long timeout)
{
	Reply_EXEC_START rep;
	Frame f;

	CALL(EXEC_START,
	     &((Msg_EXEC_START){
		 .sandbox_id = sid,
		 .argv = cmd,
		 .env = env,
		 .cwd = cwd,
		 .stdin = in,
		 .stdin_len = in_len,
		 .has_stdin = in != NULL,
		 .timeout_ms = timeout,
		 .has_timeout_ms = timeout >= 0,
	     }),
	     &f);
	if (reply_decode_EXEC_START(f.body, &rep) < 0)
		die("bad EXEC_START reply");
	reply_done_EXEC_START(&rep);
	frame_done(&f);
	return rep.exec_id;
}

/* What the command line asked for (filled from the option table). */
typedef struct Opts {
	const char *path, *key, *cwd;
	const char *image; /* --image NAME: SANDBOX_ENSURE's image (docs/IMAGES.md) */
	char **env;	   /* --env entries; def_env when none */
	size_t n_env;
	bool destroy, destroy_after, want_stdin, stats, detach, list;
	long kill_after, timeout, repeat, fresh, gap_ms;
	uint64_t attach;
	char **cmd; /* after "--" */
	char id[17];
	char *in;
	size_t in_len;
} Opts;

static const char *const def_env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", NULL};

typedef enum OptKind { OPT_FLAG, OPT_LONG, OPT_U64, OPT_STR, OPT_ENV, OPT_FROM } OptKind;

/* The options: name, what its arguments are, and where they go. */
static const struct Option {
	const char *name;
	OptKind kind;
	size_t off; /* into Opts (unused for OPT_ENV, OPT_FROM) */
} options[] = {
    {"--destroy", OPT_FLAG, offsetof(Opts, destroy)},
    {"--stats", OPT_FLAG, offsetof(Opts, stats)},
    {"--repeat", OPT_LONG, offsetof(Opts, repeat)},
    {"--fresh", OPT_LONG, offsetof(Opts, fresh)},
    {"--gap", OPT_LONG, offsetof(Opts, gap_ms)},
    {"--list", OPT_FLAG, offsetof(Opts, list)},
    {"--detach", OPT_FLAG, offsetof(Opts, detach)},
    {"--attach", OPT_U64, offsetof(Opts, attach)},
    {"--from", OPT_FROM, 0},
    {"--timeout", OPT_LONG, offsetof(Opts, timeout)},
    {"--destroy-after", OPT_FLAG, offsetof(Opts, destroy_after)},
    {"--stdin", OPT_FLAG, offsetof(Opts, want_stdin)},
    {"--cwd", OPT_STR, offsetof(Opts, cwd)},
    {"--image", OPT_STR, offsetof(Opts, image)},
    {"--env", OPT_ENV, 0},
    {"--kill-after", OPT_LONG, offsetof(Opts, kill_after)},
};

static size_t
opt_nargs(OptKind k)
{
	return k == OPT_FLAG ? 0 : k == OPT_FROM ? 2 : 1;
}

/* argv[3…]: the options, up to "--" (the command). */
static void
parse_options(Opts *o, int argc, char **argv)
{
	for (int i = 3; i < argc; i++) {
		const struct Option *opt = NULL;
		char *base = (char *)o;

		if (streq(argv[i], "--")) {
			o->cmd = argv + i + 1;
			break;
		}
		for (size_t j = 0; j < ELEMENTSOF(options); j++)
			if (streq(argv[i], options[j].name) &&
			    (size_t)(argc - i - 1) >= opt_nargs(options[j].kind))
				opt = &options[j];
		if (!opt)
			die("unknown option '%s'", argv[i]);
		switch (opt->kind) {
		case OPT_FLAG: *(bool *)(base + opt->off) = true; break;
		case OPT_LONG: *(long *)(base + opt->off) = atol(argv[++i]); break;
		case OPT_U64: *(uint64_t *)(base + opt->off) = strtoull(argv[++i], NULL, 10); break;
		case OPT_STR: *(const char **)(base + opt->off) = argv[++i]; break;
		case OPT_ENV: o->env[o->n_env++] = argv[++i]; break;
		case OPT_FROM:
			next_off[1] = strtoull(argv[++i], NULL, 10);
			next_off[2] = strtoull(argv[++i], NULL, 10);
			break;
		}
	}
}

/* SANDBOX_DESTROY of sid (its reply is empty). */
static void
destroy_sandbox(const char *sid)
{
	Frame f;

	CALL(SANDBOX_DESTROY, &((Msg_SANDBOX_DESTROY){.sandbox_id = sid}), &f);
	frame_done(&f);
}

/* Read pushes until the current exec's EXEC_EXIT; returns shimctl's status. */
static int
wait_exit(void)
{
	int status = -1;
	Frame f;

	while (status < 0) {
		read_frame(&f);
		status = handle_push(&f);
		frame_done(&f);
	}
	return status;
}

static void
print_latency(const char *what, usec_t *lat, long n)
{
	qsort(lat, (size_t)n, sizeof(usec_t), cmp_usec);
	fprintf(stderr, "shimctl: %ld %s: p50 %.2f ms, p99 %.2f ms\n", n, what,
		(double)lat[n / 2] / 1000.0, (double)lat[(n * 99) / 100] / 1000.0);
}

static int
cmd_destroy(Opts *o)
{
	destroy_sandbox(o->id);
	fprintf(stderr, "shimctl: sandbox %s destroyed\n", o->id);
	return 0;
}

static int
cmd_list(Opts *o)
{
	const msgpack_object *a;
	Frame f;

	CALL(EXEC_LIST, &((Msg_EXEC_LIST){}), &f);
	a = mp_map_get(f.body, "execs");
	if (!a || a->type != MSGPACK_OBJECT_ARRAY)
		die("bad EXEC_LIST reply");
	for (uint32_t k = 0; k < a->via.array.size; k++) {
		MpReader r;
		uint64_t eid = 0;
		const char *sid = NULL;
		bool running = false;
		mp_reader_init(&r, &a->via.array.ptr[k]);
		mp_read_uint(&r, "exec_id", &eid);
		mp_read_str(&r, "sandbox_id", &sid);
		mp_read_bool_opt(&r, "running", &running, false);
		if (r.err < 0)
			die("bad EXEC_LIST entry");
		printf("%" PRIu64 " %s %s\n", eid, sid, running ? "running" : "ended");
		mp_reader_done(&r);
	}
	frame_done(&f);
	return 0;
}

static int
cmd_attach(Opts *o)
{
	Frame f;

	cur_exec = o->attach;
	CALL(EXEC_ATTACH,
	     &((Msg_EXEC_ATTACH){
		 .exec_id = o->attach, .stdout_offset = next_off[1], .stderr_offset = next_off[2]}),
	     &f);
	frame_done(&f);
	return wait_exit();
}

static int
cmd_stats(Opts *o)
{
	Reply_SANDBOX_STATS rep;
	Frame f;

	CALL(SANDBOX_STATS, &((Msg_SANDBOX_STATS){.sandbox_id = o->id}), &f);
	if (reply_decode_SANDBOX_STATS(f.body, &rep) < 0)
		die("bad SANDBOX_STATS reply");
	reply_done_SANDBOX_STATS(&rep);
	frame_done(&f);
	printf("cpu_usec=%" PRIu64 " procs=%" PRIu64 "\n", rep.cpu_usec, rep.procs);
	return 0;
}

/* --fresh N: N new sandboxes (keys KEY-0 … KEY-N-1) on this one connection,
 * each timed from SANDBOX_ENSURE to the EXEC_EXIT of ARGV, then destroyed
 * (not timed), --gap MS apart: the shim's own create + exec latency, without
 * a client process start per sample. */
static int
cmd_fresh(Opts *o)
{
	usec_t *fl = calloc((size_t)o->fresh, sizeof(usec_t));
	Frame f;

	if (!fl)
		die("out of memory");
	for (long it = 0; it < o->fresh; it++) {
		char k[300], fid[17];
		int status;
		snprintf(k, sizeof(k), "%s-%ld", o->key, it);
		if (shim_sandbox_id(k, strlen(k), fid) < 0)
			die("bad key");
		if (o->gap_ms > 0)
			(void)poll(NULL, 0, (int)o->gap_ms);
		usec_t t0 = now_usec();
		CALL(SANDBOX_ENSURE, &((Msg_SANDBOX_ENSURE){.key = k, .image = o->image}), &f);
		frame_done(&f);
		cur_exec = start_exec(fid, o->cmd, (char *const *)def_env, o->cwd, NULL, 0, -1);
		status = wait_exit();
		if (status != 0)
			die("%s exited with %d", o->cmd[0], status);
		fl[it] = now_usec() - t0;
		quiet = true;
		destroy_sandbox(fid);
	}
	print_latency("creates", fl, o->fresh);
	free(fl);
	return 0;
}

/* SANDBOX_ENSURE of the key: its sandbox must have the id we computed. */
static void
ensure_sandbox(Opts *o)
{
	Reply_SANDBOX_ENSURE rep;
	Frame f;

	CALL(SANDBOX_ENSURE, &((Msg_SANDBOX_ENSURE){.key = o->key, .image = o->image}), &f);
	if (reply_decode_SANDBOX_ENSURE(f.body, &rep) < 0 || !streq(rep.sandbox_id, o->id))
		die("bad SANDBOX_ENSURE reply");
	if (getenv("SHIMCTL_VERBOSE"))
		fprintf(stderr, "shimctl: sandbox %s %s\n", rep.sandbox_id,
			rep.created ? "created" : "reused");
	reply_done_SANDBOX_ENSURE(&rep);
	frame_done(&f);
}

/* Wait for the current exec's end; with --kill-after, EXEC_KILL it (SIGKILL)
 * once that much time passed. */
static int
wait_exit_or_kill(long kill_after)
{
	usec_t deadline = kill_after >= 0 ? now_usec() + (usec_t)kill_after * USEC_PER_MSEC : 0;
	int status = -1;
	Frame f;

	while (status < 0) {
		if (deadline) {
			usec_t now = now_usec();
			struct pollfd p = {.fd = sock, .events = POLLIN};
			int t = now >= deadline ? 0 : (int)((deadline - now) / USEC_PER_MSEC) + 1;
			if (poll(&p, 1, t) == 0) {
				deadline = 0;
				CALL(EXEC_KILL,
				     &((Msg_EXEC_KILL){.exec_id = cur_exec, .signal = SIGKILL}),
				     &f);
				frame_done(&f);
				continue;
			}
		}
		read_frame(&f);
		status = handle_push(&f);
		frame_done(&f);
	}
	return status;
}

/* The default: ensure the sandbox, run ARGV (--repeat times), stream it. */
static int
cmd_run(Opts *o)
{
	int status = -1;
	usec_t *lat;

	ensure_sandbox(o);
	lat = calloc((size_t)o->repeat, sizeof(usec_t));
	if (!lat)
		die("out of memory");
	for (long it = 0; it < o->repeat; it++) {
		usec_t t0 = now_usec();
		next_off[1] = next_off[2] = 0;
		cur_exec = start_exec(o->id, o->cmd, o->n_env ? o->env : (char *const *)def_env,
				      o->cwd, o->in, o->in_len, o->timeout);
		if (o->detach) {
			printf("exec_id=%" PRIu64 "\n", cur_exec);
			return 0;
		}
		status = wait_exit_or_kill(o->kill_after);
		lat[it] = now_usec() - t0;
		quiet = true;
	}
	if (o->repeat > 1)
		print_latency("execs", lat, o->repeat);
	free(lat);
	if (o->destroy_after)
		destroy_sandbox(o->id);
	return status;
}

static bool
want_destroy(const Opts *o)
{
	return o->destroy;
}
static bool
want_list(const Opts *o)
{
	return o->list;
}
static bool
want_attach(const Opts *o)
{
	return o->attach != 0;
}
static bool
want_stats(const Opts *o)
{
	return o->stats;
}
static bool
want_fresh(const Opts *o)
{
	return o->fresh > 0;
}

/* The commands, first match wins; the last one (run) is the default. key: KEY
 * must be a valid sandbox key (else "-"); argv: needs "-- ARGV". */
static const struct Command {
	bool (*wanted)(const Opts *o);
	int (*run)(Opts *o);
	bool key, argv;
} commands[] = {
    {want_destroy, cmd_destroy, true, false}, {want_list, cmd_list, false, false},
    {want_attach, cmd_attach, false, false},  {want_stats, cmd_stats, true, false},
    {want_fresh, cmd_fresh, true, true},      {NULL, cmd_run, true, true},
};

int
main(int argc, char **argv)
{
	Opts o = {.cwd = "/workspace", .kill_after = -1, .timeout = -1, .repeat = 1};
	const struct Command *c = commands;
	MpWriter w;
	int status;

	if (argc < 3)
		die("usage: shimctl SOCKET KEY [--cwd DIR] [--env K=V]... [--stdin] "
		    "[--kill-after MS] [--timeout MS] [--destroy-after] -- ARGV... | "
		    "shimctl SOCKET KEY --destroy | shimctl SOCKET KEY --stats");
	o.path = argv[1];
	o.key = argv[2];
	o.env = calloc((size_t)argc + 1, sizeof(char *));
	parse_options(&o, argc, argv);
	while (c->wanted && !c->wanted(&o))
		c++;
	if (o.repeat < 1)
		die("--repeat wants a count >= 1");
	if (c->argv && (!o.cmd || !o.cmd[0]))
		die("nothing to run (missing -- ARGV)");
	if (c->key && shim_sandbox_id(o.key, strlen(o.key), o.id) < 0)
		die("bad key");
	if (o.want_stdin)
		o.in = read_all_stdin(&o.in_len);

	sock = unix_connect(o.path);
	if (sock < 0)
		die("connect '%s': %s", o.path, strerror(-sock));
	mp_writer_init(&w);
	msg_encode_HELLO(
	    &w,
	    &(Msg_HELLO){.version = RW_PROTO_VERSION, .role = "client", .pid = (uint64_t)getpid()});
	send_msg(MSG_HELLO, &w);
	mp_writer_done(&w);

	status = c->run(&o);
	free(o.in);
	free(o.env);
	close(sock);
	return status;
}
