#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Density (issue 32): memory per idle sandbox, runwarden beside crun.

  sudo bench/density.py [--build build] [--n 100]

runwarden: the three daemons (pool_size 2: its sandboxes count as idle ones) (tests/e2e/rwtest.py, max_instances = N + 8,
sleep_after_ms one day); N new threads each run `true` (POST /runs, then the
run's end on the tail), leaving N idle sandboxes. crun (1.8): N `crun run -d`
containers of `sleep infinity` (the bundle as bench/provider-exec-bench.mjs
builds it: `crun spec`, read-only root, /usr bound read-only), in a private
mount namespace without /sys/fs/cgroup/unified (crun 1.8 refuses the hybrid
layout of the dev VM); the daemons keep the host's. Same invocation,
runwarden first.

Per sandbox / container, after 2 s of settling:
  pss      Pss of smaps_rollup summed over the sandbox's own processes (those
           in its sb-* cgroup; crun: the container's process), / N;
  tree     runwarden only: the PSS of the daemons and every descendant,
           after minus before, / N (daemon growth included);
  memcg    the memory cgroup's usage (v1 memory.usage_in_bytes, v2
           memory.current) summed, / N;
  create   seconds to create all N (runwarden: POST /runs through the tail's
           end of each run, serially; crun: `crun run -d` each);
  /metrics runwarden_sandbox_memory_bytes{state="idle"} / runwarden_sandboxes
           {state="idle"}, the memcg figure as the API shows it.
Prints one table and the ratios runwarden / crun. Needs root and crun.

  sudo bench/density.py --scale [--n 1000] [--build build]

The daemons with N idle sandboxes (runwarden alone, no crun): a live thread's
`POST /runs` of `true` → its status on the tail, 60 runs before the N are
created and 60 with them (p50, p99 of each, same invocation); while the N
sit idle for 10 s, the shim's CPU (utime + stime) and coordinatord's, and
the shim's VmRSS; creation time per 100. Then re-adoption: N runs of
`sleep 3600` (one sandbox each, an exec running: an idle sandbox is not
re-adopted, see docs/DESIGN.md), the shim leaves by SIGUSR2 (the upgrade's
hand-over) and a new one starts: the time from its start to the log's
"Re-adopted" of all N, its VmRSS then, and a live thread's run latency with
N re-adopted. The host's fs.inotify limits must allow N sandboxes
(packaging/sysctl: 60-runwarden.conf); max_instances is set to N + 8.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for ln in f:
                if ln.startswith("Pss:"):
                    return int(ln.split()[1])
    except OSError:
        pass
    return 0


def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for t in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{t}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def memcg_bytes(pid):
    """The memory cgroup of pid: its usage in bytes (v1 or v2)."""
    with open(f"/proc/{pid}/cgroup") as f:
        lines = [ln.rstrip("\n").split(":", 2) for ln in f]
    for _, ctrl, path in lines:
        if "memory" in ctrl.split(","):
            p = f"/sys/fs/cgroup/memory{path}/memory.usage_in_bytes"
            if os.path.exists(p):
                return int(open(p).read())
    for hid, ctrl, path in lines:
        if hid == "0":
            p = f"/sys/fs/cgroup{path}/memory.current"
            if os.path.exists(p):
                return int(open(p).read())
    return 0


# --- crun (runs in the private mount namespace: --crun-child) ---

def crun_bundle(d):
    root = os.path.join(d, "rootfs")
    for sub in ("usr", "proc", "dev", "sys", "tmp", "etc"):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    for ln in ("bin", "lib", "lib64", "sbin"):
        os.symlink(f"usr/{ln}", os.path.join(root, ln))
    subprocess.run(["crun", "spec"], cwd=d, check=True)
    with open(os.path.join(d, "config.json")) as f:
        c = json.load(f)
    c["process"]["terminal"] = False
    c["process"]["args"] = ["sleep", "infinity"]
    c["root"] = {"path": "rootfs", "readonly": True}
    c["mounts"].append({"destination": "/usr", "type": "bind", "source": "/usr",
                        "options": ["rbind", "ro"]})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(c, f)


def crun_child(n):
    d = tempfile.mkdtemp(prefix="rw-density-crun-")
    names = []
    try:
        crun_bundle(d)
        t0 = time.monotonic()
        for i in range(n):
            name = f"rw-density-{os.getpid()}-{i}"
            subprocess.run(["crun", "run", "-d", "--bundle", d, name], check=True,
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            names.append(name)
        create = time.monotonic() - t0
        time.sleep(2)
        pids = []
        for name in names:
            st = json.loads(subprocess.run(["crun", "state", name], capture_output=True,
                                           text=True, check=True).stdout)
            pids.append(st["pid"])
        procs = [p for pid in pids for p in descendants(pid)]
        print(json.dumps({"pss": sum(pss_kib(p) for p in procs) / n,
                          "memcg": sum(memcg_bytes(p) for p in pids) / 1024 / n,
                          "procs": len(procs) / n, "create": create}))
    finally:
        for name in names:
            subprocess.run(["crun", "delete", "-f", name], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)


# --- runwarden ---

def runwarden(build, n):
    os.environ["RW_BUILD_DIR"] = build
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
    import rwtest
    s = rwtest.Suite(f"[containerd-shim]\nmax_instances = {n + 8}\n"
                     "sleep_after_ms = 86400000\n").start()
    try:
        time.sleep(2)
        daemons = [p.pid for p in s.procs.values()]
        before = sum(pss_kib(p) for d in daemons for p in descendants(d))
        t0 = time.monotonic()
        failed = []
        for i in range(n):
            for attempt in range(3):  # a failed creation is reported, then retried
                t = f"density-{i}-{attempt}"
                r = s.start_run("true", thread=t)
                _, st, _, _ = s.tail(r, thread=t)
                if st["status"] == "completed":
                    break
                failed.append(st.get("error"))
            else:
                sys.exit(f"run {i} failed three times: {failed[-3:]}")
        if failed:
            print(f"runwarden: {len(failed)} runs failed and were retried: {failed}",
                  file=sys.stderr)
        create = time.monotonic() - t0
        time.sleep(2)
        after = sum(pss_kib(p) for d in daemons for p in descendants(d))
        shim = s.procs["containerd-shim"].pid
        # each sandbox's processes: the shim's descendants in a cgroup sb-<id>
        # (the pool's idle ones included: N + pool_size sandboxes)
        sb_procs, memcg_pids = [], {}
        for p in descendants(shim)[1:]:
            try:
                with open(f"/proc/{p}/cgroup") as f:
                    cg = f.read()
            except OSError:
                continue
            ids = {seg[3:] for ln in cg.splitlines() for seg in ln.split("/")
                   if seg.startswith("sb-")}
            if ids:
                sb_procs.append(p)
                memcg_pids.setdefault(next(iter(ids)), p)
        live = len(memcg_pids)
        # what /metrics says of the same sandboxes (SHIM_MEMORY, every 2 s)
        st, text = s.http("GET", "/metrics")
        text = text.decode() if isinstance(text, bytes) else str(text)
        met = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines()
               if ln.startswith(("runwarden_sandbox_memory_bytes{", "runwarden_sandboxes{"))}
        idle_n = met.get('runwarden_sandboxes{state="idle"}', 0)
        metrics = met.get('runwarden_sandbox_memory_bytes{state="idle"}', 0) / 1024 / idle_n \
            if idle_n else float("nan")
        return {"metrics": metrics, "metrics_n": idle_n,
"pss": sum(pss_kib(p) for p in sb_procs) / live,
                "tree": (after - before) / n,
                "memcg": sum(memcg_bytes(p) for p in memcg_pids.values()) / 1024 / live,
                "procs": len(sb_procs) / live, "create": create, "live": live}
    finally:
        s.stop()
        s.cleanup()


def run_latency(s, thread, n):
    """Seconds from POST /runs of `true` to the status frame on the tail, n times."""
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        r = s.start_run("true", thread=thread)
        _, st, _, _ = s.tail(r, thread=thread, timeout=60)
        out.append(time.monotonic() - t0)
        assert st and st["status"] == "completed", st
    return out


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        f = f.read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])  # utime + stime


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    return 0


def idle_cpu(s, secs=10.0):
    """CPU % of the shim and coordinatord over secs of nothing asked."""
    hz = os.sysconf("SC_CLK_TCK")
    pids = {n: s.procs[n].pid for n in ("containerd-shim", "coordinatord")}
    a = {n: cpu_ticks(p) for n, p in pids.items()}
    time.sleep(secs)
    return {n: 100.0 * (cpu_ticks(p) - a[n]) / hz / secs for n, p in pids.items()}


def scale(build, n, readopt_only=False):
    os.environ["RW_BUILD_DIR"] = build
    sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
    import rwtest
    s = rwtest.Suite(f"[containerd-shim]\nmax_instances = {n + 8}\n"
                     "sleep_after_ms = 86400000\n").start()
    res = {"n": n}
    if readopt_only:
        return readopt(rwtest, n, res)
    try:
        s.expected_errors += [r"containerd-shim"]
        time.sleep(1)
        run_latency(s, "live", 5)  # its sandbox exists from here on
        base = run_latency(s, "live", 60)
        res["base_p50"], res["base_p99"] = pct(base, 50), pct(base, 99)
        res["idle0_cpu"] = idle_cpu(s, 5)
        shim = s.procs["containerd-shim"].pid
        res["rss0"] = vm_rss_kib(shim)
        per100, t0 = [], time.monotonic()
        for i in range(n):
            r = s.start_run("true", thread=f"idle-{i}")
            _, st, _, _ = s.tail(r, thread=f"idle-{i}", timeout=120)
            assert st and st["status"] == "completed", (i, st)
            if (i + 1) % 100 == 0:
                per100.append(round(time.monotonic() - t0, 2))
                t0 = time.monotonic()
        res["create_per100_s"] = per100
        time.sleep(2)
        res["idle_cpu"] = idle_cpu(s, 10)
        res["rss"] = vm_rss_kib(shim)
        lat = run_latency(s, "live", 60)
        res["p50"], res["p99"] = pct(lat, 50), pct(lat, 99)
        st, text = s.http("GET", "/metrics")
        text = text.decode() if isinstance(text, bytes) else str(text)
        res["metrics_idle"] = next((ln.split()[1] for ln in text.splitlines()
                                    if ln.startswith('runwarden_sandboxes{state="idle"}')), None)
    finally:
        s.stop()
        s.cleanup()
    print(json.dumps(res), flush=True)
    return readopt(rwtest, n, res)


def readopt(rwtest, n, res):
    """Re-adoption of n sandboxes with an exec running each."""
    s = rwtest.Suite(f"[containerd-shim]\nmax_instances = {n + 8}\n"
                     "sleep_after_ms = 86400000\n"
                     "[coordinatord]\ntenant_max_running = 0\n").start()
    try:
        s.expected_errors += [r"containerd-shim"]
        time.sleep(1)
        run_latency(s, "live", 3)
        for i in range(n):
            s.start_run("sleep 3600", thread=f"busy-{i}")
        deadline = time.time() + 900
        while time.time() < deadline:  # every run's sandbox made and its exec started
            if s.log("coordinatord").count("Sandbox created") >= n + 1:
                break
            time.sleep(0.5)
        time.sleep(3)
        mark = len(s.log("containerd-shim"))
        assert s.kill("containerd-shim", signal.SIGUSR2) == 0
        t0 = time.monotonic()
        s.start_daemon("containerd-shim")
        last, since = -1, time.monotonic()
        while time.monotonic() - t0 < 600:
            log = s.log("containerd-shim")[mark:]
            k = log.count("Re-adopted sandbox ")
            if k >= n:
                break
            if k != last:
                last, since = k, time.monotonic()
            elif "containerd-shim ready" in log and time.monotonic() - since > 5:
                break  # ready, and no more come: it adopted k of n
            time.sleep(0.05)
        res["readopt_s"] = time.monotonic() - t0
        res["readopted"] = s.log("containerd-shim")[mark:].count("Re-adopted sandbox ")
        res["readopt_rss"] = vm_rss_kib(s.procs["containerd-shim"].pid)
        time.sleep(2)
        res["busy_cpu"] = idle_cpu(s, 10)
        lat = run_latency(s, "live", 30)
        res["readopt_p50"], res["readopt_p99"] = pct(lat, 50), pct(lat, 99)
    finally:
        s.stop()
        s.cleanup()
    print(json.dumps(res))
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", time.strftime("density-scale-%Y%m%dT%H%M%SZ.json",
                                                          time.gmtime())), "w") as f:
        json.dump(res, f, indent=1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--crun-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--scale", action="store_true",
                    help="runwarden alone: latency, CPU, RSS and re-adoption with N idle")
    ap.add_argument("--readopt-only", action="store_true",
                    help="with --scale: the re-adoption part alone")
    a = ap.parse_args()
    if a.scale:
        scale(os.path.abspath(a.build), a.n, a.readopt_only)
        return
    if a.crun_child:
        crun_child(a.n)
        return
    rw = runwarden(os.path.abspath(a.build), a.n)
    out = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c",
         'umount -l /sys/fs/cgroup/unified 2>/dev/null; exec "$@"', "sh",
         sys.executable, os.path.abspath(__file__), "--crun-child", "--n", str(a.n)],
        capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"crun: {out.stderr}")
    cr = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{a.n} idle each, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}, "
          f"load {os.getloadavg()[0]:.1f}")
    print(f"{'':10} {'procs':>6} {'PSS KiB':>8} {'tree KiB':>9} {'memcg KiB':>10} {'create s':>9}")
    print(f"{'runwarden':10} {rw['procs']:6.1f} {rw['pss']:8.0f} {rw['tree']:9.0f} "
          f"{rw['memcg']:10.0f} {rw['create']:9.2f}   ({rw['live']} sandboxes counted; "
          f"/metrics: {rw['metrics_n']:.0f} idle, {rw['metrics']:.0f} KiB each)")
    print(f"{'crun':10} {cr['procs']:6.1f} {cr['pss']:8.0f} {'':>9} {cr['memcg']:10.0f} "
          f"{cr['create']:9.2f}")
    print(f"runwarden / crun: PSS {rw['pss'] / cr['pss']:.2f} (tree {rw['tree'] / cr['pss']:.2f}), "
          f"memcg {rw['memcg'] / cr['memcg']:.2f}, create time {rw['create'] / cr['create']:.2f}")


if __name__ == "__main__":
    main()
