#!/bin/bash
# Regenerate conf/runwarden.conf from the daemons' key tables (--dump-config).
#   conf/gen-conf.sh [BUILD_DIR]
# tests/e2e/t_config.py fails when the file and the tables disagree.
# coordinatord's dump ends with the [harness.NAME] and [tool.NAME] templates
# (commented-out sections, from their first "#[" line): they go last, after
# the text of runwarden.conf.tail that introduces them.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
coord=$("$build/coordinatord" --dump-config)
{
	sed -n '1,/^$/p' "$top/conf/runwarden.conf.head"
	printf '%s\n' "$coord" | sed '/^#\[/,$d' | sed '${/^$/d}'
	for d in routerd containerd-shim; do
		echo
		# the shared sections ([runwarden], [cluster]) come once, from coordinatord
		"$build/$d" --dump-config 2>/dev/null | sed -n "/^\[$d\]/,\$p"
	done
	cat "$top/conf/runwarden.conf.tail"
	echo
	printf '%s\n' "$coord" | sed -n '/^#\[/,$p'
} >"$top/conf/runwarden.conf"
