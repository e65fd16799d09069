/* SPDX-License-Identifier: MIT */
/*
 * lmdb-ref — the reference for the run-log benchmarks (BENCH-RELIABILITY B1,
 * B2): raw LMDB puts with the same flags coordinatord uses (sync on commit,
 * MDB_NOTLS), the same key shape (runId ‖ seq big-endian) and 256-byte
 * values, into a directory on the same disk.
 *
 *   lmdb-ref DIR EVENTS BATCH [RUNS [RECORD]]
 *       → one JSON line: commits/s, events/s, p50/p99 (s)
 *
 * With RUNS = 1 (default) the keys ascend (MDB_APPEND, the cheapest case);
 * with RUNS > 1 consecutive events go round-robin to RUNS run ids, the key
 * layout a group commit over that many runs writes. With RECORD > 0 each
 * transaction also rewrites, once per run it touched, a RECORD-byte value
 * keyed by the run id in a second database: the run records a group commit
 * rewrites. BATCH 64, RUNS 16, RECORD 200 is the LMDB work of B2's commits,
 * nothing else (the floor of that benchmark's shape).
 */
#include "config.h"

#include <errno.h>
#include <lmdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench-util.h"

int
main(int argc, char **argv)
{
	MDB_env *env;
	MDB_dbi dbi, rdbi;
	MDB_txn *txn;
	char val[256];
	char key[44];

	if (argc < 4 || argc > 6) {
		fprintf(stderr, "usage: lmdb-ref DIR EVENTS BATCH [RUNS [RECORD]]\n");
		return 2;
	}
	const char *dir = argv[1];
	long n = atol(argv[2]), batch = atol(argv[3]), nruns = argc >= 5 ? atol(argv[4]) : 1;
	long record = argc == 6 ? atol(argv[5]) : 0;
	char rec[4096];
	if (n <= 0 || batch <= 0 || nruns <= 0 || nruns > 1000 || record < 0 ||
	    record > (long)sizeof(rec))
		return 2;
	memset(rec, 'r', sizeof(rec));
	mkdir(dir, 0700);
	memset(val, 'v', sizeof(val));
	memcpy(key, "00000000-0000-4000-8000-000000000000", 36);
	if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 8) ||
	    mdb_env_set_mapsize(env, (size_t)1 << 32) || mdb_env_open(env, dir, MDB_NOTLS, 0600) ||
	    mdb_txn_begin(env, NULL, 0, &txn) || mdb_dbi_open(txn, "events", MDB_CREATE, &dbi) ||
	    mdb_dbi_open(txn, "runs", MDB_CREATE, &rdbi) || mdb_txn_commit(txn)) {
		fprintf(stderr, "lmdb-ref: cannot open %s\n", dir);
		return 1;
	}
	long commits = (n + batch - 1) / batch;
	double *lat = calloc((size_t)commits, sizeof(double));
	long seq = 0;
	double t0 = bench_now();
	for (long c = 0; c < commits; c++) {
		double s = bench_now();
		if (mdb_txn_begin(env, NULL, 0, &txn))
			return 1;
		for (long i = 0; i < batch && seq < n; i++, seq++) {
			long run = seq % nruns, rseq = seq / nruns;
			/* run ids that sort like random uuids would: spread over the key space */
			snprintf(key, 37, "%08lx-0000-4000-8000-000000000000",
				 (unsigned long)(run * 2654435761UL) & 0xffffffffUL);
			for (int k = 0; k < 8; k++)
				key[36 + k] = (char)((uint64_t)rseq >> (56 - 8 * k));
			MDB_val kv = {sizeof(key), key}, vv = {sizeof(val), val};
			if (mdb_put(txn, dbi, &kv, &vv, nruns == 1 ? MDB_APPEND : 0))
				return 1;
		}
		/* the records of the runs this transaction touched */
		for (long r = 0; record > 0 && r < nruns && r < batch; r++) {
			snprintf(key, 37, "%08lx-0000-4000-8000-000000000000",
				 (unsigned long)(r * 2654435761UL) & 0xffffffffUL);
			MDB_val kv = {36, key}, vv = {(size_t)record, rec};
			if (mdb_put(txn, rdbi, &kv, &vv, 0))
				return 1;
		}
		if (mdb_txn_commit(txn))
			return 1;
		lat[c] = bench_now() - s;
	}
	double el = bench_now() - t0;
	printf("{\"events\":%ld,\"runs\":%ld,\"batch\":%ld,\"record\":%ld,\"seconds\":%.6f,"
	       "\"commits_per_s\":%.1f,"
	       "\"events_per_s\":%.1f,\"p50\":%.6f,\"p99\":%.6f}\n",
	       n, nruns, batch, record, el, (double)commits / el, (double)n / el,
	       bench_percentile(lat, (size_t)commits, 50),
	       bench_percentile(lat, (size_t)commits, 99));
	mdb_env_close(env);
	free(lat);
	return 0;
}
