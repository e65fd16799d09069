#!/bin/bash
# Build the libFuzzer targets with clang (ASan + UBSan) from the sources.
# usage: tests/fuzz/build.sh BUILD_DIR OUT_DIR   (BUILD_DIR holds config.h)
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?build dir}
out=${2:?out dir}
CC=${CC:-clang}
mkdir -p "$out"
srcs=()
for f in "$top"/daemons/routerd/*.c "$top"/common/*.c "$top"/common/proto/*.c; do
	case "$f" in */main.c | */fake-coord.c) continue ;; esac
	srcs+=("$f")
done
flags=(-g -O1 -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined
	-I"$build" -I"$top/common" -I"$top/common/proto" -I"$top/daemons/routerd"
	-I"$top/tests/fuzz" -D_GNU_SOURCE -DSYSCONFDIR=\"/etc\" -DLOCALSTATEDIR=\"/var\" -DRUNSTATEDIR=\"/run\" -w)
libs=(-levent -lwslay -lhttp_parser -ljansson -lmsgpackc -linih -lcrypto)
pkg-config --exists libsystemd 2>/dev/null && libs+=(-lsystemd)
objdir="$out/obj"
# No header dependency tracking here: when any header (or config.h) is newer
# than the last build, rebuild everything (a stale object once broke a run).
stamp="$objdir/.stamp"
if [ ! -e "$stamp" ] || [ -n "$(find "$top/common" "$top/daemons/routerd" "$top/tests/fuzz" \
	"$build/config.h" -name '*.h' -newer "$stamp" -print -quit 2>/dev/null)" ]; then
	rm -rf "$objdir"
fi
mkdir -p "$objdir"
touch "$stamp"
objs=()
for f in "${srcs[@]}" "$top/tests/fuzz/fuzz-common.c"; do
	o="$objdir/$(echo "${f#"$top"/}" | tr / _).o"
	if [ ! -e "$o" ] || [ "$f" -nt "$o" ]; then
		"$CC" "${flags[@]}" -c "$f" -o "$o"
	fi
	objs+=("$o")
done
for t in http ws; do
	"$CC" "${flags[@]}" -fsanitize=fuzzer "$top/tests/fuzz/fuzz-$t.c" "${objs[@]}" "${libs[@]}" \
		-o "$out/fuzz-$t"
done
