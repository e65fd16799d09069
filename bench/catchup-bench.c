/* SPDX-License-Identifier: MIT */
/*
 * catchup-bench — BENCH-RELIABILITY B5, catch-up of a long run.
 *
 *   catchup-bench preload SOCK N      append N events to a new run (256 in
 *                                     flight), print its run id
 *   catchup-bench read SOCK RUN N     RUN_READ from lastSeq -1 until N events
 *                                     arrived: what a reconnecting tail costs
 *                                     coordinatord; prints seconds
 *   catchup-bench scan DIR RUN N      the reference: an in-process LMDB cursor
 *                                     scan of the same events, each written to
 *                                     a socket a child process drains
 */
#include "config.h"

#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench-util.h"
#include "fd-util.h"
#include "macro.h"
#include "mp-cursor.h"
#include "proto.h"

static int
preload(const char *sock, long n)
{
	BenchConn c;
	char run[37], chunk[256];
	long sent = 0, acked = 0;

	memset(chunk, 'x', sizeof(chunk) - 1);
	memcpy(chunk, "{\"type\":\"CUSTOM\",\"name\":\"b\",\"value\":\"", 37);
	memcpy(chunk + sizeof(chunk) - 3, "\"}", 3);
	if (bench_connect(&c, sock) < 0 || bench_run_open(&c, "bench-catchup", run) < 0)
		return 1;
	while (acked < n) {
		while (sent < n && sent - acked < 256) {
			MpWriter w;
			mp_writer_init(&w);
			mp_w_map(&w, 2);
			mp_w_str(&w, "run_id", run);
			mp_w_str(&w, "chunk", chunk);
			int64_t r = bench_send(&c, MSG_RUN_APPEND, w.sbuf.data, w.sbuf.size);
			mp_writer_done(&w);
			if (r < 0)
				return 1;
			sent++;
		}
		Frame f;
		if (bench_recv(&c, &f) < 0 || f.type != MSG_REPLY)
			return 1;
		frame_done(&f);
		acked++;
	}
	printf("%s\n", run);
	bench_close(&c);
	return 0;
}

static int
readall(const char *sock, const char *run, long n)
{
	BenchConn c;
	int64_t cur = -1;
	long got = 0;
	size_t bytes = 0;

	if (bench_connect(&c, sock) < 0)
		return 1;
	double t0 = bench_now();
	while (got < n) {
		MpWriter w;
		Frame f;
		MpReader rd;
		const msgpack_object_array *ev = NULL;
		mp_writer_init(&w);
		mp_w_map(&w, 3);
		mp_w_str(&w, "run_id", run);
		mp_w_int(&w, "from_seq", cur);
		mp_w_uint(&w, "max", 4096);
		int64_t r = bench_send(&c, MSG_RUN_READ, w.sbuf.data, w.sbuf.size);
		mp_writer_done(&w);
		if (r < 0 || bench_recv(&c, &f) < 0 || f.type != MSG_REPLY)
			return 1;
		mp_reader_init(&rd, f.body);
		mp_read_array(&rd, "events", &ev);
		if (rd.err < 0 || ev->size == 0)
			return 1;
		for (uint32_t i = 0; i < ev->size; i++)
			bytes += ev->ptr[i].via.str.size;
		got += ev->size;
		cur += ev->size;
		mp_reader_done(&rd);
		frame_done(&f);
	}
	printf("{\"events\":%ld,\"bytes\":%zu,\"seconds\":%.6f}\n", got, bytes, bench_now() - t0);
	bench_close(&c);
	return 0;
}

static int
scan(const char *dir, const char *run, long n)
{
	MDB_env *env;
	MDB_txn *txn;
	MDB_dbi dbi;
	MDB_cursor *cur;
	int sv[2];
	char key[44];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return 1;
	pid_t pid = fork();
	if (pid == 0) { /* the "client": drain until EOF */
		char buf[65536];
		close(sv[0]);
		while (read(sv[1], buf, sizeof(buf)) > 0)
			;
		_exit(0);
	}
	close(sv[1]);
	if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 8) ||
	    mdb_env_open(env, dir, MDB_RDONLY | MDB_NOTLS, 0600))
		return 1;
	double t0 = bench_now();
	if (mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) || mdb_dbi_open(txn, "events", 0, &dbi) ||
	    mdb_cursor_open(txn, dbi, &cur))
		return 1;
	memcpy(key, run, 36);
	memset(key + 36, 0, 8);
	MDB_val k = {sizeof(key), key}, v;
	long got = 0;
	size_t bytes = 0;
	/* copy into 4 KiB writes: the loopback reference of B5 */
	char out[4096];
	size_t o = 0;
	for (int rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE); rc == 0 && got < n;
	     rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
		const char *p = v.mv_data;
		size_t left = v.mv_size;
		while (left) {
			size_t take = MIN(left, sizeof(out) - o);
			memcpy(out + o, p, take);
			o += take;
			p += take;
			left -= take;
			if (o == sizeof(out)) {
				if (loop_write(sv[0], out, o) < 0)
					return 1;
				o = 0;
			}
		}
		bytes += v.mv_size;
		got++;
	}
	if (o && loop_write(sv[0], out, o) < 0)
		return 1;
	mdb_cursor_close(cur);
	mdb_txn_abort(txn);
	close(sv[0]);
	waitpid(pid, NULL, 0);
	printf("{\"events\":%ld,\"bytes\":%zu,\"seconds\":%.6f}\n", got, bytes, bench_now() - t0);
	mdb_env_close(env);
	return got == n ? 0 : 1;
}

int
main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "preload") == 0)
		return preload(argv[2], atol(argv[3]));
	if (argc == 5 && strcmp(argv[1], "read") == 0)
		return readall(argv[2], argv[3], atol(argv[4]));
	if (argc == 5 && strcmp(argv[1], "scan") == 0)
		return scan(argv[2], argv[3], atol(argv[4]));
	fprintf(stderr, "usage: catchup-bench preload SOCK N | read SOCK RUN N | scan DIR RUN N\n");
	return 2;
}
