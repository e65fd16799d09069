# SPDX-License-Identifier: MIT
"""The samples of a `perf record -g` file, for perf-groups.py and perf-kinds.py."""
import subprocess


def samples(data):
    """Yield (comm, pid, cpu, [function, …]) for each sample of PERF_DATA: the
    functions of its call chain, innermost first; cpu without leading zeros."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,pid,cpu,ip,sym"],
                         capture_output=True, text=True).stdout
    cur, syms = None, []
    for line in out.splitlines() + [""]:
        if not line.strip():
            if cur is not None:
                yield cur + (syms,)
            cur, syms = None, []
        elif not line.startswith(("\t", " ")):
            parts = line.split()
            # comm may contain spaces; pid is the token before [cpu]
            i = [k for k, t in enumerate(parts) if t.startswith("[") and t.endswith("]")][0]
            cur = (" ".join(parts[:i - 1]), parts[i - 1], parts[i].strip("[]").lstrip("0") or "0")
        else:
            p = line.split()
            if len(p) >= 2:
                syms.append(p[1].split("+")[0])
