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
 * --timeout MS (EXEC_START timeout_ms), --destroy-after (destroy the sandbox
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
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fd-util.h"
#include "frame.h"
#include "macro.h"
#include "mp-cursor.h"
#include "peer.h"
#include "proto.h"
#include "shim.h"
#include "time-util.h"

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
	MpReader r;
	uint64_t id = 0, stream = 0, off = 0;
	const void *data = NULL;
	size_t len = 0;
	int ret = -1;

	mp_reader_init(&r, f->body);
	if (f->type == MSG_EXEC_OUTPUT) {
		mp_read_uint(&r, "exec_id", &id);
		mp_read_uint(&r, "stream", &stream);
		mp_read_uint(&r, "offset", &off);
		mp_read_bin(&r, "data", &data, &len);
		uint64_t dropped = 0;
		const msgpack_object *d = mp_map_get(f->body, "dropped");
		if (d && d->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
			dropped = d->via.u64;
		if (r.err < 0 || stream < 1 || stream > 2)
			die("bad EXEC_OUTPUT");
		if (id == cur_exec) {
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
			(void)loop_write(stream == 2 ? STDERR_FILENO : STDOUT_FILENO, data, len);
		}
	} else if (f->type == MSG_EXEC_EXIT) {
		int64_t code = 0, sig = 0;
		const char *reason = NULL;
		mp_read_uint(&r, "exec_id", &id);
		mp_read_int(&r, "exit_code", &code);
		mp_read_int(&r, "signal", &sig);
		mp_read_str(&r, "reason", &reason);
		if (r.err < 0)
			die("bad EXEC_EXIT");
		if (id == cur_exec) {
			if (!quiet)
				fprintf(stderr,
					"shimctl: exec %" PRIu64 ": %s (exit_code %" PRId64
					", signal %" PRId64 ")\n",
					id, reason, code, sig);
			ret = streq(reason, "lost") ? 255 : (int)(code & 0xff);
		}
	}
	mp_reader_done(&r);
	return ret;
}

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
	uint64_t eid = 0;
	MpWriter w;
	MpReader r;
	Frame f;

	mp_writer_init(&w);
	mp_w_map(&w, 4 + (in ? 1 : 0) + (timeout >= 0 ? 1 : 0));
	mp_w_str(&w, "sandbox_id", sid);
	mp_w_str_array(&w, "argv", cmd);
	mp_w_str_array(&w, "env", env);
	mp_w_str(&w, "cwd", cwd);
	if (in)
		mp_w_bin(&w, "stdin", in, in_len);
	if (timeout >= 0)
		mp_w_uint(&w, "timeout_ms", (uint64_t)timeout);
	call(MSG_EXEC_START, &w, &f);
	mp_writer_done(&w);
	mp_reader_init(&r, f.body);
	mp_read_uint(&r, "exec_id", &eid);
	if (r.err < 0)
		die("bad EXEC_START reply");
	mp_reader_done(&r);
	frame_done(&f);
	return eid;
}

int
main(int argc, char **argv)
{
	const char *path, *key, *cwd = "/workspace";
	const char *def_env[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace", NULL};
	char **env = NULL;
	size_t n_env = 0;
	bool destroy = false, destroy_after = false, want_stdin = false, stats = false;
	bool detach = false, list = false;
	long kill_after = -1, timeout = -1, repeat = 1, fresh = 0, gap_ms = 0;
	uint64_t attach = 0;
	char id[17];
	char **cmd = NULL;
	char *in = NULL;
	size_t in_len = 0;
	MpWriter w;
	Frame f;
	int i, status = -1;

	if (argc < 3)
		die("usage: shimctl SOCKET KEY [--cwd DIR] [--env K=V]... [--stdin] "
		    "[--kill-after MS] [--timeout MS] [--destroy-after] -- ARGV... | "
		    "shimctl SOCKET KEY --destroy | shimctl SOCKET KEY --stats");
	path = argv[1];
	key = argv[2];
	env = calloc((size_t)argc + 1, sizeof(char *));
	for (i = 3; i < argc; i++) {
		if (streq(argv[i], "--")) {
			cmd = argv + i + 1;
			break;
		} else if (streq(argv[i], "--destroy"))
			destroy = true;
		else if (streq(argv[i], "--stats"))
			stats = true;
		else if (streq(argv[i], "--repeat") && i + 1 < argc)
			repeat = atol(argv[++i]);
		else if (streq(argv[i], "--fresh") && i + 1 < argc)
			fresh = atol(argv[++i]);
		else if (streq(argv[i], "--gap") && i + 1 < argc)
			gap_ms = atol(argv[++i]);
		else if (streq(argv[i], "--list"))
			list = true;
		else if (streq(argv[i], "--detach"))
			detach = true;
		else if (streq(argv[i], "--attach") && i + 1 < argc)
			attach = strtoull(argv[++i], NULL, 10);
		else if (streq(argv[i], "--from") && i + 2 < argc) {
			next_off[1] = strtoull(argv[++i], NULL, 10);
			next_off[2] = strtoull(argv[++i], NULL, 10);
		} else if (streq(argv[i], "--timeout") && i + 1 < argc)
			timeout = atol(argv[++i]);
		else if (streq(argv[i], "--destroy-after"))
			destroy_after = true;
		else if (streq(argv[i], "--stdin"))
			want_stdin = true;
		else if (streq(argv[i], "--cwd") && i + 1 < argc)
			cwd = argv[++i];
		else if (streq(argv[i], "--env") && i + 1 < argc)
			env[n_env++] = argv[++i];
		else if (streq(argv[i], "--kill-after") && i + 1 < argc)
			kill_after = atol(argv[++i]);
		else
			die("unknown option '%s'", argv[i]);
	}
	if (repeat < 1)
		die("--repeat wants a count >= 1");
	if (!destroy && !stats && !list && !attach && (!cmd || !cmd[0]))
		die("nothing to run (missing -- ARGV)");
	if (!list && !attach && shim_sandbox_id(key, strlen(key), id) < 0)
		die("bad key");
	if (want_stdin)
		in = read_all_stdin(&in_len);

	sock = unix_connect(path);
	if (sock < 0)
		die("connect '%s': %s", path, strerror(-sock));
	mp_writer_init(&w);
	mp_w_map(&w, 3);
	mp_w_uint(&w, "version", RW_PROTO_VERSION);
	mp_w_str(&w, "role", "client");
	mp_w_uint(&w, "pid", (uint64_t)getpid());
	send_msg(MSG_HELLO, &w);
	mp_writer_done(&w);

	if (destroy) {
		mp_writer_init(&w);
		mp_w_map(&w, 1);
		mp_w_str(&w, "sandbox_id", id);
		call(MSG_SANDBOX_DESTROY, &w, &f);
		mp_writer_done(&w);
		frame_done(&f);
		fprintf(stderr, "shimctl: sandbox %s destroyed\n", id);
		return 0;
	}

	if (list) {
		const msgpack_object *a;
		mp_writer_init(&w);
		mp_w_map(&w, 0);
		call(MSG_EXEC_LIST, &w, &f);
		mp_writer_done(&w);
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
	if (attach) {
		cur_exec = attach;
		mp_writer_init(&w);
		mp_w_map(&w, 3);
		mp_w_uint(&w, "exec_id", attach);
		mp_w_uint(&w, "stdout_offset", next_off[1]);
		mp_w_uint(&w, "stderr_offset", next_off[2]);
		call(MSG_EXEC_ATTACH, &w, &f);
		mp_writer_done(&w);
		frame_done(&f);
		for (;;) {
			read_frame(&f);
			status = handle_push(&f);
			frame_done(&f);
			if (status >= 0)
				return status;
		}
	}
	if (stats) {
		MpReader r;
		uint64_t cpu = 0, procs = 0;
		mp_writer_init(&w);
		mp_w_map(&w, 1);
		mp_w_str(&w, "sandbox_id", id);
		call(MSG_SANDBOX_STATS, &w, &f);
		mp_writer_done(&w);
		mp_reader_init(&r, f.body);
		mp_read_uint(&r, "cpu_usec", &cpu);
		mp_read_uint(&r, "procs", &procs);
		if (r.err < 0)
			die("bad SANDBOX_STATS reply");
		mp_reader_done(&r);
		frame_done(&f);
		printf("cpu_usec=%" PRIu64 " procs=%" PRIu64 "\n", cpu, procs);
		return 0;
	}

	if (fresh > 0) {
		/* --fresh N: N new sandboxes (keys KEY-0 … KEY-N-1) on this one
		 * connection, each timed from SANDBOX_ENSURE to the EXEC_EXIT of ARGV,
		 * then destroyed (not timed), --gap MS apart: the shim's own create +
		 * exec latency, without a client process start per sample. */
		usec_t *fl = calloc((size_t)fresh, sizeof(usec_t));
		if (!fl)
			die("out of memory");
		for (long it = 0; it < fresh; it++) {
			char k[300], fid[17];
			snprintf(k, sizeof(k), "%s-%ld", key, it);
			if (shim_sandbox_id(k, strlen(k), fid) < 0)
				die("bad key");
			if (gap_ms > 0)
				(void)poll(NULL, 0, (int)gap_ms);
			usec_t t0 = now_usec();
			mp_writer_init(&w);
			mp_w_map(&w, 1);
			mp_w_str(&w, "key", k);
			call(MSG_SANDBOX_ENSURE, &w, &f);
			mp_writer_done(&w);
			frame_done(&f);
			cur_exec = start_exec(fid, cmd, (char *const *)def_env, cwd, NULL, 0, -1);
			for (status = -1; status < 0;) {
				read_frame(&f);
				status = handle_push(&f);
				frame_done(&f);
			}
			if (status != 0)
				die("%s exited with %d", cmd[0], status);
			fl[it] = now_usec() - t0;
			quiet = true;
			mp_writer_init(&w);
			mp_w_map(&w, 1);
			mp_w_str(&w, "sandbox_id", fid);
			call(MSG_SANDBOX_DESTROY, &w, &f);
			mp_writer_done(&w);
			frame_done(&f);
		}
		qsort(fl, (size_t)fresh, sizeof(usec_t), cmp_usec);
		fprintf(stderr, "shimctl: %ld creates: p50 %.2f ms, p99 %.2f ms\n", fresh,
			(double)fl[fresh / 2] / 1000.0, (double)fl[(fresh * 99) / 100] / 1000.0);
		free(fl);
		return 0;
	}

	mp_writer_init(&w);
	mp_w_map(&w, 1);
	mp_w_str(&w, "key", key);
	call(MSG_SANDBOX_ENSURE, &w, &f);
	mp_writer_done(&w);
	{
		MpReader r;
		const char *sid = NULL;
		bool created = false;
		mp_reader_init(&r, f.body);
		mp_read_str(&r, "sandbox_id", &sid);
		mp_read_bool_opt(&r, "created", &created, false);
		if (r.err < 0 || !streq(sid, id))
			die("bad SANDBOX_ENSURE reply");
		if (getenv("SHIMCTL_VERBOSE"))
			fprintf(stderr, "shimctl: sandbox %s %s\n", sid,
				created ? "created" : "reused");
		mp_reader_done(&r);
		frame_done(&f);
	}

	usec_t *lat = calloc((size_t)repeat, sizeof(usec_t));
	if (!lat)
		die("out of memory");
	for (long it = 0; it < repeat; it++) {
		usec_t t0 = now_usec();
		status = -1;
		next_off[1] = next_off[2] = 0;
		cur_exec = start_exec(id, cmd, n_env ? env : (char *const *)def_env, cwd, in,
				      in_len, timeout);
		if (detach) {
			printf("exec_id=%" PRIu64 "\n", cur_exec);
			close(sock);
			return 0;
		}

		usec_t deadline =
		    kill_after >= 0 ? now_usec() + (usec_t)kill_after * USEC_PER_MSEC : 0;
		while (status < 0) {
			if (deadline) {
				usec_t now = now_usec();
				struct pollfd p = {.fd = sock, .events = POLLIN};
				int t = now >= deadline
					    ? 0
					    : (int)((deadline - now) / USEC_PER_MSEC) + 1;
				if (poll(&p, 1, t) == 0) {
					deadline = 0;
					mp_writer_init(&w);
					mp_w_map(&w, 2);
					mp_w_uint(&w, "exec_id", cur_exec);
					mp_w_int(&w, "signal", SIGKILL);
					call(MSG_EXEC_KILL, &w, &f);
					mp_writer_done(&w);
					frame_done(&f);
					continue;
				}
			}
			read_frame(&f);
			status = handle_push(&f);
			frame_done(&f);
		}
		lat[it] = now_usec() - t0;
		quiet = true;
	}
	if (repeat > 1) {
		qsort(lat, (size_t)repeat, sizeof(usec_t), cmp_usec);
		fprintf(stderr, "shimctl: %ld execs: p50 %.2f ms, p99 %.2f ms\n", repeat,
			(double)lat[repeat / 2] / 1000.0,
			(double)lat[(repeat * 99) / 100] / 1000.0);
	}
	free(lat);

	if (destroy_after) {
		mp_writer_init(&w);
		mp_w_map(&w, 1);
		mp_w_str(&w, "sandbox_id", id);
		call(MSG_SANDBOX_DESTROY, &w, &f);
		mp_writer_done(&w);
		frame_done(&f);
	}
	free(in);
	free(env);
	close(sock);
	return status;
}
