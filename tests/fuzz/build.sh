#!/bin/bash
# Build the libFuzzer targets with clang (ASan + UBSan) from the sources.
# usage: tests/fuzz/build.sh BUILD_DIR OUT_DIR [TARGET…]   (BUILD_DIR holds config.h)
# Every source is compiled once into OUT_DIR/obj; each target links the
# objects of the one daemon it exercises (plus common/).
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?build dir}
out=${2:?out dir}
shift 2
CC=${CC:-clang}
mkdir -p "$out"
flags=(-g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
	-I"$build" -I"$top/common" -I"$top/common/proto" -I"$top/tests/fuzz"
	-D_GNU_SOURCE -DSYSCONFDIR=\"/etc\" -DLOCALSTATEDIR=\"/var\" -DRUNSTATEDIR=\"/run\"
	-DPKGLIBEXECDIR=\"/usr/lib/runwarden\" -DUIDIR=\"/usr/share/runwarden/ui\" -w)
libs=(-levent -lwslay -lhttp_parser -ljansson -lmsgpackc -linih -lcrypto)
pkg-config --exists libsystemd 2>/dev/null && libs+=(-lsystemd)
read -r -a nats_libs <<<"$(pkg-config --libs libnats libevent_pthreads)"
libs+=("${nats_libs[@]}")
objdir="$out/obj"
# No header dependency tracking here: when any header (or config.h) is newer
# than the last build, rebuild everything (a stale object once broke a run).
stamp="$objdir/.stamp"
if [ ! -e "$stamp" ] || [ -n "$(find "$top/common" "$top/daemons" "$top/tests/fuzz" \
	"$build/config.h" -name '*.h' -newer "$stamp" -print -quit 2>/dev/null)" ]; then
	rm -rf "$objdir"
fi
mkdir -p "$objdir"
touch "$stamp"

# obj FILE [EXTRA-FLAGS…]: compile when stale; prints the object's path
obj() {
	local f=$1
	shift
	local o
	o="$objdir/$(echo "${f#"$top"/}" | tr / _).o"
	if [ ! -e "$o" ] || [ "$f" -nt "$o" ]; then
		"$CC" "${flags[@]}" "$@" -c "$f" -o "$o"
	fi
	echo "$o"
}
# objs DIR EXCLUDED-BASENAME…: the objects of every .c of DIR but those
objs() {
	local d=$1 f b x skip
	shift
	for f in "$top/$d"/*.c; do
		b=$(basename "$f")
		skip=
		for x in "$@"; do [ "$b" = "$x" ] && skip=1; done
		[ -n "$skip" ] || obj "$f" -I"$top/$d"
	done
}

mapfile -t common < <(objs common; objs common/proto)
# daemons/coordinatord/cluster: the JetStream layer coordinatord's replicate.c
# and placement.c call (libnats; no fuzz input reaches it: without [cluster]
# nats it is never started)
mapfile -t -O "${#common[@]}" common < <(objs daemons/coordinatord/cluster)
mapfile -t router < <(objs daemons/routerd main.c)
router+=("$(obj "$top/tests/fuzz/fuzz-common.c" -I"$top/daemons/routerd")")
# coordinatord without main.c; commit.c and coordinator.c are included by the
# targets that look at their static state (the op queue, the handler table)
mapfile -t coord_all < <(objs daemons/coordinatord main.c)
mapfile -t coord_nocommit < <(objs daemons/coordinatord main.c commit.c)
mapfile -t coord_nocoord < <(objs daemons/coordinatord main.c coordinator.c)
shim_dir=daemons/containerd-shim
shim_libs=(-larchive -lseccomp)

link() { # link TARGET SOURCE INCLUDE-DIR OBJECTS… -- LIBS…
	local t=$1 src=$2 inc=$3
	shift 3
	local o=() l=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		o+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	l=("$@")
	"$CC" "${flags[@]}" -I"$top/$inc" -fsanitize=fuzzer "$src" "${o[@]}" "${common[@]}" \
		"${libs[@]}" "${l[@]}" -o "$out/fuzz-$t"
}

want() { # is target $1 asked for (all when none named)
	[ ${#targets[@]} -eq 0 ] && return 0
	local x
	for x in "${targets[@]}"; do [ "$x" = "$1" ] && return 0; done
	return 1
}
targets=("$@")
F="$top/tests/fuzz"
for t in http ws; do
	want $t && link $t "$F/fuzz-$t.c" daemons/routerd "${router[@]}"
done
for a in ndjson claude codex; do
	want adapter-$a && link adapter-$a "$F/fuzz-adapter.c" daemons/coordinatord \
		"${coord_nocommit[@]}" -- -llmdb -DFUZZ_ADAPTER_"${a^^}"
done
want coord-frames && link coord-frames "$F/fuzz-coord-frames.c" daemons/coordinatord \
	"${coord_nocoord[@]}" -- -llmdb
want connect && link connect "$F/fuzz-connect.c" $shim_dir \
	"$(obj "$top/$shim_dir/connect-parse.c" -I"$top/$shim_dir")"
want files && link files "$F/fuzz-files.c" daemons/routerd "${router[@]}" \
	"$(obj "$top/$shim_dir/wsfs.c" -I"$top/$shim_dir")" -- -I"$top/$shim_dir"
want snapshot && link snapshot "$F/fuzz-snapshot.c" $shim_dir \
	"$(obj "$top/$shim_dir/snapshot.c" -I"$top/$shim_dir" -DUNPACK_BLOCK=65536)" \
	"$(obj "$top/$shim_dir/tar-read.c" -I"$top/$shim_dir")" \
	"$(obj "$top/$shim_dir/wsfs.c" -I"$top/$shim_dir")" -- "${shim_libs[@]}"
exit 0
