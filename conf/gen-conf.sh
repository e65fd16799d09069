#!/bin/bash
# Regenerate conf/runwarden.conf from the daemons' key tables (--dump-config).
#   conf/gen-conf.sh [BUILD_DIR]
# tests/e2e/t_config.py fails when the file and the tables disagree.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
{
	sed -n '1,/^$/p' "$top/conf/runwarden.conf.head"
	"$build/coordinatord" --dump-config
	for d in routerd containerd-shim; do
		echo
		"$build/$d" --dump-config 2>/dev/null | sed '1,/^$/d'
	done
	cat "$top/conf/runwarden.conf.tail"
} >"$top/conf/runwarden.conf"
