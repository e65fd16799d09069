#!/bin/bash
# coord-bench.sh — coordinatord's run-log benchmarks beside their references,
# in one invocation, on the same disk (BENCH-RELIABILITY.md B1, B2, B3, B5).
#
#   bench/coord-bench.sh [BUILD_DIR] [REPEATS]
#
# coordinatord runs pinned to CPU 0 and the load generators to CPU 1 (and the
# references to CPU 0, where the daemon would run). Each pair runs REPEATS
# times (default 3), alternating; the median ratio is reported with its min and
# max. Raw results go to bench/results/coord-<timestamp>.json.
set -euo pipefail
. "$(dirname "$0")/bench-lib.sh"
B="$build/bench"
bench_need bench/lmdb-ref bench/fsync-probe bench/append-bench bench/catchup-bench coordinatord
bench_workdir
SERVER="taskset -c 0"
CLIENT="taskset -c 1"
[ "$(nproc)" -ge 2 ] || { SERVER=""; CLIENT=""; }


load0=$(cut -d' ' -f1-3 /proc/loadavg)
out="$work/raw.jsonl"
: >"$out"
record() { printf '{"bench":"%s","side":"%s","rep":%d,"result":%s}\n' "$1" "$2" "$3" "$4" >>"$out"; }

N1=${B1_EVENTS:-2000}
N2=${B2_EVENTS:-60000}
N5=${B5_EVENTS:-100000}
for rep in $(seq 1 "$reps"); do
	echo "== repetition $rep/$reps" >&2
	record B3 fsync "$rep" "$($SERVER "$B/fsync-probe" "$work" 1000)"
	rm -rf "$work/ref"; record B1 ref "$rep" "$($SERVER "$B/lmdb-ref" "$work/ref" "$N1" 1)"
	start_coord
	record B1 ours "$rep" "$($CLIENT "$B/append-bench" "$work/run/coordinatord.sock" serial "$N1")"
	stop_coord
	rm -rf "$work/ref"; record B2 ref "$rep" "$($SERVER "$B/lmdb-ref" "$work/ref" "$N2" 100)"
	rm -rf "$work/ref"; record B2 ref16 "$rep" "$($SERVER "$B/lmdb-ref" "$work/ref" "$N2" 100 16)"
	# B2's own LMDB work and nothing else: 64 events per txn over 16 runs'
	# key ranges, and the 16 run records rewritten (the floor of its shape)
	rm -rf "$work/ref"; record B2 shape "$rep" "$($SERVER "$B/lmdb-ref" "$work/ref" "$N2" 64 16 200)"
	start_coord
	record B2 ours "$rep" "$($CLIENT "$B/append-bench" "$work/run/coordinatord.sock" concurrent "$N2" 64 16)"
	stop_coord
done
# B5: one preloaded run, read back by coordinatord vs an in-process cursor scan
start_coord
run=$($CLIENT "$B/catchup-bench" preload "$work/run/coordinatord.sock" "$N5")
for rep in $(seq 1 "$reps"); do
	record B5 ours "$rep" "$($CLIENT "$B/catchup-bench" read "$work/run/coordinatord.sock" "$run" "$N5")"
	record B5 ref "$rep" "$($SERVER "$B/catchup-bench" scan "$work/state/runlog" "$run" "$N5")"
done
stop_coord

mkdir -p "$top/bench/results"
res="$top/bench/results/coord-$(date -u +%Y%m%dT%H%M%SZ).json"
/usr/bin/python3 - "$out" "$res" "$SERVER" "$load0" <<'PY'
import json, os, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def get(b, side, key):
    return [r["result"][key] for r in rows if r["bench"] == b and r["side"] == side]
def ratios(a, b, inv=False):
    return [(y / x if inv else x / y) for x, y in zip(a, b)]
def fmt(rs):
    return f"median {statistics.median(rs):.2f} (min {min(rs):.2f}, max {max(rs):.2f})"
summary = {}
b1 = ratios(get("B1", "ours", "events_per_s"), get("B1", "ref", "commits_per_s"))
b1p99 = ratios(get("B1", "ours", "p99"), get("B1", "ref", "p99"))
b2 = ratios(get("B2", "ours", "events_per_s"), get("B2", "ref", "events_per_s"))
b2r16 = ratios(get("B2", "ours", "events_per_s"), get("B2", "ref16", "events_per_s"))
b2shape = ratios(get("B2", "ours", "events_per_s"), get("B2", "shape", "events_per_s"))
shape_ref = ratios(get("B2", "shape", "events_per_s"), get("B2", "ref", "events_per_s"))
b3 = ratios(get("B1", "ours", "p50"), get("B3", "fsync", "p50"))
b5 = ratios(get("B5", "ours", "seconds"), get("B5", "ref", "seconds"))
summary = {
  "B1 one-event appends / raw LMDB commits (target >= 0.9)": b1,
  "B1 p99 ours / p99 raw (target <= 2)": b1p99,
  "B2 64 appenders x 16 runs / raw LMDB at 100 per txn, one ascending key range (target >= 0.8)": b2,
  "B2 same / raw LMDB at 100 per txn over 16 runs' key ranges": b2r16,
  "B2 same / raw LMDB doing B2's own LMDB work (64 per txn over 16 runs + 16 records)": b2shape,
  "B2's own LMDB work / raw LMDB at 100 per txn, one range (the best B2 can reach)": shape_ref,
  "B3 append p50 / fdatasync p50 (target <= 2.5)": b3,
  "B5 catch-up time / cursor scan + socket write (target <= 3)": b5,
}
print(f"pinning: server/reference on CPU 0, clients on CPU 1" if sys.argv[3] else "pinning: none (1 CPU)")
for k, v in summary.items():
    print(f"{k}: {fmt(v)}")
print("absolute (medians): B1 ours %.0f ev/s, ref %.0f commits/s; B2 ours %.0f ev/s, ref %.0f ev/s; "
      "ref over 16 runs %.0f ev/s; B2's own LMDB work %.0f ev/s; fdatasync p50 %.0f us; B1 ours p50 %.0f us; B5 ours %.3f s, ref %.3f s" % (
      statistics.median(get("B1","ours","events_per_s")), statistics.median(get("B1","ref","commits_per_s")),
      statistics.median(get("B2","ours","events_per_s")), statistics.median(get("B2","ref","events_per_s")),
      statistics.median(get("B2","ref16","events_per_s")), statistics.median(get("B2","shape","events_per_s")), statistics.median(get("B3","fsync","p50"))*1e6, statistics.median(get("B1","ours","p50"))*1e6,
      statistics.median(get("B5","ours","seconds")), statistics.median(get("B5","ref","seconds"))))
load = {"start": sys.argv[4], "end": " ".join(f"{x:.2f}" for x in os.getloadavg())}
print("load average (1, 5, 15 min) at the start: %s, at the end: %s" % (load["start"], load["end"]))
json.dump({"raw": rows, "ratios": summary, "pinning": bool(sys.argv[3]), "loadavg": load},
          open(sys.argv[2], "w"), indent=1)
print("raw results:", sys.argv[2])
PY
