#!/bin/bash
# cluster-bench.sh — coordinatord's RUN_APPEND latency and throughput with
# cluster mode (a three-server NATS JetStream cluster on loopback, R = 3)
# beside single-host, in one invocation, alternating (docs/CLUSTER.md
# "Measured"; issue #14's goals: append p50 <= 2x, throughput >= 0.5x).
#
#   bench/cluster-bench.sh [BUILD_DIR] [REPEATS]
#
# Per repetition and side: append-bench serial (one event per request, the
# next after the ack) and concurrent (64 connections over 16 runs). The NATS
# servers share the machine's CPUs with coordinatord and the clients: this
# measures the wiring's cost on one host, not a deployment.
set -euo pipefail
. "$(dirname "$0")/bench-lib.sh"
bench_need bench/append-bench coordinatord
bench_workdir
urls=$(/usr/bin/python3 "$top/tests/cluster/natscluster.py" start "$work/nats" 3 --owner $$ | tail -1)

N1=${B1_EVENTS:-1000}
N2=${B2_EVENTS:-20000}
CLUSTER="[cluster]
nats = $urls
node = bench
replicas = 3"
out="$work/raw.jsonl"
: >"$out"
for rep in $(seq 1 "$reps"); do
	for side in single cluster; do
		conf=""
		[ "$side" = cluster ] && conf=$CLUSTER
		start_coord "$conf"
		sleep 1 # the cluster's stream and buckets ensured
		s=$("$build/bench/append-bench" "$work/run/coordinatord.sock" serial "$N1")
		c=$("$build/bench/append-bench" "$work/run/coordinatord.sock" concurrent "$N2" 64 16)
		stop_coord
		printf '{"side":"%s","rep":%d,"serial":%s,"concurrent":%s}\n' "$side" "$rep" "$s" "$c" >>"$out"
	done
done
/usr/bin/python3 "$top/tests/cluster/natscluster.py" stop "$work/nats"
/usr/bin/python3 - "$out" <<'PY'
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(side, kind, key):
    return st.median(r[kind][key] for r in rows if r["side"] == side)
for kind in ("serial", "concurrent"):
    s50, c50 = med("single", kind, "p50") * 1e3, med("cluster", kind, "p50") * 1e3
    s99, c99 = med("single", kind, "p99") * 1e3, med("cluster", kind, "p99") * 1e3
    sr, cr = med("single", kind, "events_per_s"), med("cluster", kind, "events_per_s")
    print(f"{kind}: p50 single {s50:.2f} ms, cluster {c50:.2f} ms ({c50 / s50:.1f}x); "
          f"p99 {s99:.2f} / {c99:.2f} ms; events/s {sr:.0f} / {cr:.0f} ({cr / sr:.2f}x)")
print(f"({len(rows) // 2} repetitions, medians)")
PY
