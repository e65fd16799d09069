#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Sandbox creation, several builds side by side: for bisecting B6.

usage: REPS=4 bench/sandbox/create-ab.py BUILD_DIR BUILD_DIR...

Each BUILD_DIR needs only containerd-shim and shimctl (tools/shimctl, or
daemons/containerd-shim/shimctl in older trees): `make containerd-shim
tools/shimctl` in a `git worktree` of the commit. One shim per build is started
with pool_size = 0 (every create builds a sandbox) and max_instances = 64,
pinned to CPU 0 (its sandboxes inherit that); per repetition, in an order that
alternates, each build's own shimctl on CPU 1 runs `--fresh 40` (serial: 40 new
sandboxes on one connection, SANDBOX_ENSURE → EXEC_EXIT of /bin/true, then
destroyed untimed) and 8 such clients at once (`--fresh 6` each). Printed: the
median of the repetitions' p50 (ms) and each repetition's, and creations per
second with 8 clients, and the CPU each sandbox cost (create + exec of
/bin/true + destroy): the shim's utime + stime with its reaped children's
(the spawners, the inits and what they reaped), over all creations, read
0.5 s after each batch — a figure the other helpers' load on a shared
machine moves far less than the latencies. No JSON: a tool to find which
commit moved a figure; b6.py is the benchmark."""
import os, re, subprocess, sys, tempfile, time, statistics, signal, shutil
builds = sys.argv[1:]
def shimctl(b):
    for p in ("tools/shimctl", "daemons/containerd-shim/shimctl"):
        if os.path.exists(os.path.join(b, p)): return os.path.join(b, p)
def start(b):
    d = tempfile.mkdtemp(prefix="bis-")
    conf = os.path.join(d, "c.conf")
    open(conf, "w").write(f"[runwarden]\nruntime_dir = {d}/run\nstate_dir = {d}/state\nlog_level = warning\n[containerd-shim]\nmax_instances = 64\npool_size = 0\n")
    p = subprocess.Popen(["taskset", "-c", "0", os.path.join(b, "containerd-shim"), "--config", conf],
                         stdout=open(d + "/log", "w"), stderr=subprocess.STDOUT)
    sock = f"{d}/run/containerd-shim.sock"
    for _ in range(200):
        if os.path.exists(sock): break
        time.sleep(0.05)
    time.sleep(0.5)
    return p, d, sock
def fresh(b, sock, n, par, tag):
    ps = [subprocess.Popen(["taskset", "-c", "1", shimctl(b), sock, f"{tag}w{w}", "--fresh", str(n // par), "--", "/bin/true"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for w in range(par)]
    t0 = time.time(); p50 = []
    for p in ps:
        _, err = p.communicate(timeout=600)
        m = re.search(r"creates: p50 ([\d.]+) ms", err)
        if not m: raise SystemExit(f"{b}: {err}")
        p50.append(float(m.group(1)))
    return statistics.median(p50), n / (time.time() - t0)
S = {b: start(b) for b in builds}
res = {b: {"ser": [], "par": [], "parps": [], "cpu": 0, "made": 0} for b in builds}
def ticks(p):
    f = open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15])  # utime stime cutime cstime
try:
    for b in builds: fresh(b, S[b][2], 8, 1, "warm")
    for r in range(int(os.environ.get("REPS", 4))):
        order = builds if r % 2 == 0 else builds[::-1]
        for b in order:
            t0 = ticks(S[b][0])
            s, _ = fresh(b, S[b][2], 40, 1, f"s{r}")
            p, ps = fresh(b, S[b][2], 48, 8, f"p{r}")
            time.sleep(0.5)
            res[b]["cpu"] += ticks(S[b][0]) - t0; res[b]["made"] += 88
            res[b]["ser"].append(s); res[b]["par"].append(p); res[b]["parps"].append(ps)
finally:
    for b in builds:
        S[b][0].send_signal(signal.SIGTERM); S[b][0].wait()
        subprocess.run(["umount", "-R", "-l", S[b][1]], stderr=subprocess.DEVNULL)
        shutil.rmtree(S[b][1], ignore_errors=True)
for b in builds:
    x = res[b]
    print(f"{b:40s} serial p50 {statistics.median(x['ser']):6.2f} {[round(v,1) for v in x['ser']]}  par8 p50 {statistics.median(x['par']):6.2f} {[round(v,1) for v in x['par']]} /s {statistics.median(x['parps']):.0f}  CPU/sandbox {1000 * x['cpu'] / os.sysconf('SC_CLK_TCK') / max(1, x['made']):.2f} ms")
