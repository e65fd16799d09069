# bench-lib.sh — what the coordinatord bench scripts share (coord-bench.sh,
# cluster-bench.sh), sourced after `set -euo pipefail`:
#
#   . "$(dirname "$0")/bench-lib.sh"     # top, build (= $1), reps (= $2, 3)
#   bench_need bench/append-bench coordinatord   # built when missing
#   bench_workdir                        # $work, removed (and coordinatord
#                                        # stopped) at exit
#   start_coord [CONF_LINES]             # a coordinatord on $work/run, under
#   stop_coord                           # $SERVER (a taskset prefix, or unset)
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
reps=${2:-3}
cpid=

# Build each program (a path under BUILD_DIR) that is not there yet.
bench_need() {
	for p in "$@"; do
		[ -x "$build/$p" ] || make -C "$build" -s "$p" >/dev/null
	done
}

bench_workdir() {
	work=$(mktemp -d "$build/bench-data.XXXXXX")
	# every step may fail (a coordinatord already gone) without skipping the rm
	trap '{ [ -n "$cpid" ] && kill $cpid 2>/dev/null; } || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
}

# A fresh state and runtime dir each time; $1: more lines for the file (a
# [cluster] section). Waits for the socket (10 s), else prints the log, exits.
start_coord() {
	rm -rf "$work/state" "$work/run"
	cat >"$work/c.conf" <<CONF
[runwarden]
runtime_dir = $work/run
state_dir = $work/state
log_level = warning
[coordinatord]
sandbox_wait_ms = 100
read_max = 4096
${1:-}
CONF
	${SERVER:-} "$build/coordinatord" --config "$work/c.conf" 2>>"$work/coord.log" &
	cpid=$!
	for _ in $(seq 200); do [ -S "$work/run/coordinatord.sock" ] && return; sleep 0.05; done
	echo "coordinatord did not start" >&2
	cat "$work/coord.log" >&2
	exit 1
}

stop_coord() { kill "$cpid"; wait "$cpid" 2>/dev/null || true; cpid=; }
