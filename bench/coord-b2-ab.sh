#!/bin/bash
# coord-b2-ab.sh — B2 (64 appenders over 16 runs) for two coordinatord
# binaries side by side, beside raw LMDB, in one invocation:
#
#   bench/coord-b2-ab.sh BUILD_DIR REPEATS OLD_COORDINATORD [NEW_COORDINATORD]
#
# Each repetition runs, in this order: raw LMDB at 100 events per txn (the
# reference), raw LMDB doing B2's own LMDB work (64 per txn over 16 runs + 16
# records: the floor of B2's shape), append-floor (a minimal server of the
# same IPC doing that LMDB work: the floor of any daemon for B2), the old
# binary's B2, the new binary's B2 (NEW defaults to BUILD_DIR/coordinatord). Pinning as coord-bench.sh: daemon
# and references on CPU 0, the client on CPU 1. Raw results and medians go to
# bench/results/coord-b2-ab-<timestamp>.json, with each daemon's CPU time
# (user + system, from /proc) per event: less at the mercy of the disk's
# other tenants than events/s.
set -euo pipefail
. "$(dirname "$0")/bench-lib.sh"
old=${3:?usage: coord-b2-ab.sh BUILD_DIR REPEATS OLD_COORDINATORD [NEW_COORDINATORD]}
new=${4:-$build/coordinatord}
B="$build/bench"
bench_need bench/lmdb-ref bench/append-bench bench/append-floor coordinatord
bench_workdir
SERVER="taskset -c 0"
CLIENT="taskset -c 1"
[ "$(nproc)" -ge 2 ] || { SERVER=""; CLIENT=""; }

load0=$(cut -d' ' -f1-3 /proc/loadavg)
out="$work/raw.jsonl"
: >"$out"
record() { printf '{"bench":"B2","side":"%s","rep":%d,"result":%s}\n' "$1" "$2" "$3" >>"$out"; }
N2=${B2_EVENTS:-60000}
orig_build=$build
for rep in $(seq 1 "$reps"); do
	echo "== repetition $rep/$reps" >&2
	rm -rf "$work/ref"; record ref "$rep" "$($SERVER "$B/lmdb-ref" "$work/ref" "$N2" 100)"
	rm -rf "$work/ref"; record shape "$rep" "$($SERVER "$B/lmdb-ref" "$work/ref" "$N2" 64 16 200)"
	# the floor of any daemon for B2 over this IPC: append-floor.c
	rm -rf "$work/floor"; mkdir -p "$work/floor"
	$SERVER "$B/append-floor" "$work/floor/s.sock" "$work/floor/db" &
	fpid=$!
	cpid=$fpid # bench_workdir's exit trap stops it if we fail
	for _ in $(seq 200); do [ -S "$work/floor/s.sock" ] && break; sleep 0.05; done
	res=$($CLIENT "$B/append-bench" "$work/floor/s.sock" concurrent "$N2" 64 16)
	read -r ut st < <(awk '{print $14, $15}' "/proc/$fpid/stat")
	cpu=$(awk -v u="$ut" -v s="$st" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.3f", (u+s)/hz}')
	record floor "$rep" "${res%\}},\"daemon_cpu_s\":$cpu}"
	kill "$fpid"; wait "$fpid" 2>/dev/null || true
	cpid=
	for side in old new; do
		bin=$old; [ $side = new ] && bin=$new
		# start_coord runs $build/coordinatord: point it at this side's binary
		mkdir -p "$work/bin-$side"; ln -sf "$(realpath "$bin")" "$work/bin-$side/coordinatord"
		build="$work/bin-$side"; start_coord; build=$orig_build
		res=$($CLIENT "$B/append-bench" "$work/run/coordinatord.sock" concurrent "$N2" 64 16)
		# the daemon's CPU time (user + system, clock ticks) over its life
		read -r ut st < <(awk '{print $14, $15}' "/proc/$cpid/stat")
		cpu=$(awk -v u="$ut" -v s="$st" -v hz="$(getconf CLK_TCK)" 'BEGIN{printf "%.3f", (u+s)/hz}')
		record "$side" "$rep" "${res%\}},\"daemon_cpu_s\":$cpu}"
		stop_coord
	done
done
mkdir -p "$top/bench/results"
res="$top/bench/results/coord-b2-ab-$(date -u +%Y%m%dT%H%M%SZ).json"
/usr/bin/python3 - "$out" "$res" "$load0" "$old" "$new" <<'PY'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def get(side):
    return [r["result"]["events_per_s"] for r in rows if r["side"] == side]
def ratios(a, b):
    return [x / y for x, y in zip(a, b)]
def fmt(rs):
    return f"median {statistics.median(rs):.2f} (min {min(rs):.2f}, max {max(rs):.2f})"
s = {
  "old / raw LMDB 100 per txn": ratios(get("old"), get("ref")),
  "new / raw LMDB 100 per txn": ratios(get("new"), get("ref")),
  "old / B2's own LMDB work": ratios(get("old"), get("shape")),
  "new / B2's own LMDB work": ratios(get("new"), get("shape")),
  "B2's own LMDB work / raw LMDB 100 per txn": ratios(get("shape"), get("ref")),
  "old / append-floor (the least a daemon over this IPC does)": ratios(get("old"), get("floor")),
  "new / append-floor (the least a daemon over this IPC does)": ratios(get("new"), get("floor")),
  "append-floor / raw LMDB 100 per txn": ratios(get("floor"), get("ref")),
  "append-floor / B2's own LMDB work": ratios(get("floor"), get("shape")),
  "new / old": ratios(get("new"), get("old")),
}
for k, v in s.items():
    print(f"{k}: {fmt(v)}")
def cpu(side):
    return [r["result"]["daemon_cpu_s"] * 1e6 / r["result"]["events"] for r in rows if r["side"] == side]
for side in ("floor", "old", "new"):
    v = cpu(side)
    s["%s daemon CPU us per event" % side] = v
    print(f"{side}: daemon CPU per event (us, whole life incl. start-up): {fmt(v)}")
print("events/s medians: ref %.0f, shape %.0f, floor %.0f, old %.0f, new %.0f" % tuple(
    statistics.median(get(x)) for x in ("ref", "shape", "floor", "old", "new")))
load = {"start": sys.argv[3], "end": " ".join(f"{x:.2f}" for x in os.getloadavg())}
print("load average (1, 5, 15 min) at the start: %s, at the end: %s" % (load["start"], load["end"]))
json.dump({"raw": rows, "ratios": s, "old": sys.argv[4], "new": sys.argv[5], "loadavg": load},
          open(sys.argv[2], "w"), indent=1)
print("raw results:", sys.argv[2])
PY
