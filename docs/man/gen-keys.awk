# Turn conf/runwarden.conf (the daemons' --dump-config output) into the KEYS
# section of runwarden.conf(5): a subsection per [section], a .TP per key
# with its default and the help line above it.
/^\[.*\]$/ { printf ".SS %s\n", $0; help = ""; started = 1; next }
!started { next }
/^# / { help = (help == "" ? "" : help " ") substr($0, 3); next }
/^#[a-z_]+ = ?/ {
	key = $0; sub(/^#/, "", key); n = index(key, " ="); k = substr(key, 1, n - 1)
	v = substr(key, n + 3); if (v == "") v = "(empty)"
	gsub(/\\/, "\\\\", help); gsub(/^\./, "\\\\\\&.", help)
	printf ".TP\n.B %s\nDefault: \\fB%s\\fR. %s\n", k, v, help
	help = ""; next
}
