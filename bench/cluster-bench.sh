#!/bin/bash
# cluster-bench.sh — coordinatord's RUN_APPEND latency and throughput with
# cluster mode (a three-server NATS JetStream cluster on loopback, R = 3)
# beside single-host, in one invocation, alternating (docs/CLUSTER.md
# "Measured"; issue #14's goals: append p50 <= 2x, throughput >= 0.5x).
#
#   bench/cluster-bench.sh [BUILD_DIR] [REPEATS]
#   CLUSTER_BASE=OTHER_BUILD_DIR bench/cluster-bench.sh [BUILD_DIR] [REPEATS]
#
# Per repetition and side: append-bench serial (one event per request, the
# next after the ack) and concurrent (64 connections over 16 runs); and the
# floor, bench/cluster-floor: the same shapes as JetStream publishes alone
# (no LMDB, no coordinatord; 16 runs of 4-event messages). With
# CLUSTER_BASE, each repetition runs that build's coordinatord too, in the
# same order (base single, base cluster, single, cluster), against the same
# NATS servers: the ratios of both builds in one run. The NATS servers share
# the machine's CPUs with coordinatord and the clients: this measures the
# wiring's cost on one host, not a deployment. Each measurement also
# records the CPU time (user + system) the NATS servers, coordinatord and
# the client spent on it ("cpu_s"): on this machine the three share its
# CPUs, and the CPU per event says what throughput the CPUs allow at all.
# Raw results: bench/results/cluster-bench-<timestamp>.json (one object per
# line).
set -euo pipefail
. "$(dirname "$0")/bench-lib.sh"
bench_need bench/append-bench bench/cluster-floor coordinatord
bench_workdir
urls=$(/usr/bin/python3 "$top/tests/cluster/natscluster.py" start "$work/nats" 3 --owner $$ | tail -1)
nats_pids=$(pgrep -f "$work/nats/" | tr '\n' ' ')
hz=$(getconf CLK_TCK)

# CPU clock ticks (user + system) the processes $@ used so far.
ticks() {
	local t=0 p f
	for p in "$@"; do
		f=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || continue
		set -- $f
		t=$((t + ${12} + ${13}))
	done
	echo "$t"
}

# Run a client (its argv), print its JSON line with "cpu_s" added: the CPU
# seconds of coordinatord ($cpid, when running), the NATS servers and the
# client itself over the run.
measured() {
	local c0 n0 c1 n1 out
	c0=$( [ -n "$cpid" ] && ticks "$cpid" || echo 0)
	n0=$(ticks $nats_pids)
	out=$( { TIMEFORMAT='%3U %3S'; time "$@"; } 2>"$work/time")
	c1=$( [ -n "$cpid" ] && ticks "$cpid" || echo 0)
	n1=$(ticks $nats_pids)
	read -r u sy <<<"$(tail -1 "$work/time")"
	printf '%s,"cpu_s":{"coordinatord":%s,"nats":%s,"client":%s}}' "${out%\}}" \
		"$(awk "BEGIN{print ($c1-$c0)/$hz}")" "$(awk "BEGIN{print ($n1-$n0)/$hz}")" \
		"$(awk "BEGIN{print $u+$sy}")"
}

N1=${B1_EVENTS:-1000}
N2=${B2_EVENTS:-20000}
CLUSTER="[cluster]
nats = $urls
node = bench
replicas = 3"
builds="$build"
[ -n "${CLUSTER_BASE:-}" ] && builds="$(cd "$CLUSTER_BASE" && pwd) $build"
mkdir -p "$top/bench/results"
out="$top/bench/results/cluster-bench-$(date -u +%Y%m%dT%H%M%SZ).json"
: >"$out"
main_build=$build
for rep in $(seq 1 "$reps"); do
	for b in $builds; do
		build=$b
		tag=new
		[ "$b" != "$main_build" ] && tag=base
		for side in single cluster; do
			conf=""
			[ "$side" = cluster ] && conf=$CLUSTER
			start_coord "$conf"
			sleep 1 # the cluster's stream and buckets ensured
			s=$(measured "$main_build/bench/append-bench" "$work/run/coordinatord.sock" serial "$N1")
			c=$(measured "$main_build/bench/append-bench" "$work/run/coordinatord.sock" concurrent "$N2" 64 16)
			stop_coord
			printf '{"build":"%s","side":"%s","rep":%d,"load":"%s","serial":%s,"concurrent":%s}\n' \
				"$tag" "$side" "$rep" "$(cut -d' ' -f1 /proc/loadavg)" "$s" "$c" >>"$out"
		done
	done
	f1=$(measured "$main_build/bench/cluster-floor" "$urls" serial "$N1")
	f2=$(measured "$main_build/bench/cluster-floor" "$urls" concurrent "$N2" 16 4)
	printf '{"build":"floor","side":"floor","rep":%d,"load":"%s","serial":%s,"concurrent":%s}\n' \
		"$rep" "$(cut -d' ' -f1 /proc/loadavg)" "$f1" "$f2" >>"$out"
done
build=$main_build
/usr/bin/python3 "$top/tests/cluster/natscluster.py" stop "$work/nats"
/usr/bin/python3 - "$out" <<'PY'
import json, os, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(b, side, kind, key):
    return st.median(r[kind][key] for r in rows if r["side"] == side and r["build"] == b)
def fmed(kind, key):
    return st.median(r[kind][key] for r in rows if r["side"] == "floor")
for kind in ("serial", "concurrent"):
    print(f"floor {kind} (JetStream alone): p50 {fmed(kind, 'p50') * 1e3:.2f} ms, "
          f"events/s {fmed(kind, 'events_per_s'):.0f}")
for b in sorted({r["build"] for r in rows if r["side"] != "floor"}, reverse=True):
    for kind in ("serial", "concurrent"):
        s50, c50 = med(b, "single", kind, "p50") * 1e3, med(b, "cluster", kind, "p50") * 1e3
        s99, c99 = med(b, "single", kind, "p99") * 1e3, med(b, "cluster", kind, "p99") * 1e3
        sr, cr = med(b, "single", kind, "events_per_s"), med(b, "cluster", kind, "events_per_s")
        print(f"{b} {kind}: p50 single {s50:.2f} ms, cluster {c50:.2f} ms ({c50 / s50:.1f}x); "
              f"p99 {s99:.2f} / {c99:.2f} ms; events/s {sr:.0f} / {cr:.0f} ({cr / sr:.2f}x; "
              f"{cr / fmed(kind, 'events_per_s'):.2f} of the floor)")
ncpu = os.cpu_count()
def cpu_line(label, sel, kind):
    rs = [r for r in rows if sel(r) and "cpu_s" in r[kind]]
    if not rs:
        return
    n = rs[0][kind]["events"]
    part = {k: st.median(r[kind]["cpu_s"][k] for r in rs) / n * 1e6
            for k in ("nats", "coordinatord", "client")}
    tot = sum(part.values())
    print(f"  CPU per event, {label} {kind}: NATS servers {part['nats']:.0f} us, "
          f"coordinatord {part['coordinatord']:.0f} us, client {part['client']:.0f} us; "
          f"{tot:.0f} us in all: {ncpu} CPUs allow at most {ncpu / tot * 1e6:.0f} events/s")
for kind in ("serial", "concurrent"):
    cpu_line("floor", lambda r: r["side"] == "floor", kind)
    for b in sorted({r["build"] for r in rows if r["side"] != "floor"}, reverse=True):
        for side in ("single", "cluster"):
            cpu_line(f"{b} {side}", lambda r, b=b, side=side: r["build"] == b and r["side"] == side, kind)
print(f"({len([r for r in rows if r['side'] == 'floor'])} repetitions, medians; "
      f"raw: {sys.argv[1]})")
PY
