#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""BENCH-RELIABILITY B6 — start a sandboxed run, containerd-shim beside bwrap
and unshare, all timed by the same C harness (bench/sandbox/spawn-time.c,
built here with cc: fork + execvp + waitpid per iteration).

Per repetition, in an order that rotates between repetitions:
  shim      `shimctl SOCK KEY -- /bin/true` with a fresh KEY (SANDBOX_ENSURE
            creates the sandbox, EXEC_START/EXEC_EXIT), then, timed apart,
            `shimctl SOCK KEY --destroy`; the shim's pool_size = 2 (the default:
            a create takes a pre-started sandbox and binds its workspace in)
  shim_cold the same against a second shim with pool_size = 0 (every create
            builds a sandbox), running beside the first
  once      `shimctl SOCK KEY --destroy-after -- /bin/true`: create, exec and
            destroy from one client process, as bwrap is one process (and
            once_cold against the pool_size = 0 shim)
  bwrap     `bwrap --unshare-all --ro-bind / / --dev /dev --proc /proc true`
  unshare   `unshare -Urnpfmiu --mount-proc true`
  spawn     `/bin/true` (the fork+exec+wait floor of the harness)
  floor     `shimctl SOCK - --list` (start shimctl — 26 shared libraries —,
            connect, HELLO, EXEC_LIST: the client's own cost, subtracted for
            the shim-side figure)
each serial (N iterations) and 8 in parallel (8 worker processes);
  fresh     `shimctl SOCK KEY --fresh N -- /bin/true` against each shim: N new
            sandboxes on one kept connection, ENSURE → EXEC_EXIT timed in the
            shim's client (no process start per sample), serial back to back,
            paced (50 ms apart, arrivals with gaps) and 8 such clients at once
  live      `shimctl SOCK KEY --repeat M -- /bin/true` into one live sandbox
            (shimctl's own EXEC_START → EXEC_EXIT p50/p99);
  e2e       POST /runs {"true"} on a fresh thread, then the WebSocket tail:
            time to the POST reply, the first frame, the first frame from the
            sandbox (sandbox.created), TOOL_CALL_RESULT and the status frame;
            serial and 8 concurrent clients. Each thread's sandbox is destroyed
            after its status frame (untimed) so they do not pile up.

The three daemons are pinned to CPU 0 (taskset -c 0; sandboxes inherit it),
this script and everything it spawns (harness, shimctl, bwrap, unshare) to
CPU 1; one more repetition unpinned. Warm-up: a few iterations of everything
before the first repetition. Raw JSON: bench/results/sandbox-b6-<time>.json.

With --only-e2e, only bwrap (the reference) and e2e run, with their ratios.
With --fs journal, runtime_dir is a tmpfs and state_dir a fresh journaled ext4
(the layout of a production host; see layout()). B6_TAG=… is appended to the
JSON's name (e.g. the build measured); B6_SHIMCTL=PATH runs another shimctl
binary as the client.

usage: RW_BUILD_DIR=build bench/sandbox/b6.py [--reps 3] [--n 100] [--live 500]
       [--e2e 50] [--no-unpinned] [--only-e2e] [--fs test|journal]"""
import argparse
import asyncio
import datetime
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "tests", "e2e"))
import rwtest  # noqa: E402
import websockets  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--reps", type=int, default=3)
ap.add_argument("--n", type=int, default=100, help="iterations per serial/parallel measurement")
ap.add_argument("--par", type=int, default=8)
ap.add_argument("--live", type=int, default=500, help="execs into the live sandbox")
ap.add_argument("--e2e", type=int, default=50, help="runs per e2e measurement")
ap.add_argument("--no-unpinned", action="store_true")
ap.add_argument("--only-e2e", action="store_true", help="bwrap and e2e alone")
ap.add_argument("--fs", choices=("test", "journal"), default="test",
                help="test: runtime_dir and state_dir in the suite's directory under /tmp (the "
                "e2e harness's layout); journal: runtime_dir on a tmpfs (as /run) and state_dir "
                "on a fresh journaled ext4 (a loop image, as /var/lib on a production host)")
A = ap.parse_args()

EXE = "/tmp/rw-b6-spawn-time"
# B6_SHIMCTL=PATH measures another client binary against the same daemons
# (a side-by-side of two shimctl builds).
SHIMCTL = os.environ.get("B6_SHIMCTL") or os.path.join(rwtest.BUILD, "tools", "shimctl")
BWRAP = ["bwrap", "--unshare-all", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
         "true"]
UNSHARE = ["unshare", "-Urnpfmiu", "--mount-proc", "true"]
# max_instances above the default 5 so 8 parallel creates are not queued by the cap.
# The shim runs twice side by side: with its default pool of pre-started
# sandboxes ("shim") and without one ("shim_cold": every create builds one).
CONF = "[containerd-shim]\nmax_instances = 64\npool_size = 2\n"
CONF_COLD = "[containerd-shim]\nmax_instances = 64\npool_size = 0\n"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p / 100))] if xs else None


def summ(lat_us, wall_us=None):
    ms = [x / 1000 for x in lat_us]
    d = {"n": len(ms), "p50_ms": round(pct(ms, 50), 3), "p99_ms": round(pct(ms, 99), 3),
         "max_ms": round(max(ms), 3), "mean_ms": round(statistics.mean(ms), 3)}
    if wall_us:
        d["per_s"] = round(len(ms) / (wall_us / 1e6), 1)
    return d


def harness(n, par, tag, cmd, then=None):
    args = [EXE, str(n), str(par), tag, "--"] + cmd + (["--then"] + then if then else [])
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"spawn-time failed: {p.stderr}")
    d = json.loads(p.stdout)
    if d["bad"]:
        raise RuntimeError(f"{cmd[0]}: {d['bad']} iterations exited non-zero")
    return d


def layout(suite):
    """--fs journal: mount the suite's run/ and state/ before its daemons start.
    The root filesystem of the VMs this is measured on is an ext4 without a
    journal, where every new inode costs a scan over the inodes freed in the
    last minutes (ext4's find_inode_bit/recently_deleted, only without a
    journal) — a cost that grows with everything else deleting files on the
    machine. A production host keeps runtime_dir on /run (tmpfs) and state_dir
    on a journaled filesystem."""
    if A.fs != "journal":
        return suite
    run, state, img = suite.dir + "/run", suite.dir + "/state", suite.dir + ".img"
    os.makedirs(run)
    os.makedirs(state)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", run], check=True)
    subprocess.run(["truncate", "-s", "4G", img], check=True)
    subprocess.run(["mkfs.ext4", "-q", "-F", img], check=True)
    subprocess.run(["mount", "-o", "loop", img, state], check=True)
    os.unlink(img)
    return suite


class Bench:
    def __init__(self, pinned):
        self.pinned = pinned
        wrap = {d: ["taskset", "-c", "0"] for d in rwtest.DAEMONS} if pinned else {}
        os.sched_setaffinity(0, {1} if pinned else {0, 1})
        self.s = layout(rwtest.Suite(CONF, wrap=wrap)).start()
        self.sock = os.path.join(self.s.dir, "run", "containerd-shim.sock")
        self.cold = layout(rwtest.Suite(CONF_COLD, wrap=wrap)).start()
        self.cold_sock = os.path.join(self.cold.dir, "run", "containerd-shim.sock")
        self.seq = 0

    def tag(self, what):
        self.seq += 1
        return f"b6{'p' if self.pinned else 'u'}{what}{self.seq}"

    def contender(self, name, n, par):
        if name in ("shim", "shim_cold"):
            sock = self.sock if name == "shim" else self.cold_sock
            d = harness(n, par, self.tag("s"), [SHIMCTL, sock, "%K", "--", "/bin/true"],
                        [SHIMCTL, sock, "%K", "--destroy"])
            tot = [a + b for a, b in zip(d["a"], d["b"])]
            return {"create_exec": summ(d["a"], d["wall_us"]), "destroy": summ(d["b"]),
                    "create_exec_destroy": summ(tot, d["wall_us"]), "raw": d}
        if name in ("once", "once_cold"):
            # bwrap's like: one client process creates, runs and destroys
            sock = self.sock if name == "once" else self.cold_sock
            d = harness(n, par, self.tag("o"),
                        [SHIMCTL, sock, "%K", "--destroy-after", "--", "/bin/true"])
            return {"total": summ(d["a"], d["wall_us"]), "raw": d}
        cmd = {"bwrap": BWRAP, "unshare": UNSHARE, "spawn": ["/bin/true"],
               "floor": [SHIMCTL, self.sock, "-", "--list"]}[name]
        d = harness(n, par, self.tag(name[0]), cmd)
        return {"total": summ(d["a"], d["wall_us"]), "raw": d}

    def live(self, m):
        key = self.tag("live")
        p = subprocess.run([SHIMCTL, self.sock, key, "--repeat", str(m), "--", "/bin/true"],
                           capture_output=True, text=True, timeout=600)
        mm = re.search(r"p50 ([\d.]+) ms, p99 ([\d.]+) ms", p.stderr)
        if p.returncode != 0 or not mm:
            raise RuntimeError(f"shimctl --repeat: {p.stderr}")
        # the same through the harness: one shimctl process per exec (connect, hello, ensure
        # of the live sandbox, exec) — what a client pays without a kept connection
        d = harness(min(m, A.n), 1, key, [SHIMCTL, self.sock, key, "--", "/bin/true"])
        subprocess.run([SHIMCTL, self.sock, key, "--destroy"], capture_output=True)
        return {"repeat": {"n": m, "p50_ms": float(mm.group(1)), "p99_ms": float(mm.group(2))},
                "shimctl_process": summ(d["a"]), "raw_process": d}

    def fresh(self, sock, n, par, gap_ms):
        """shimctl --fresh: ENSURE of a new key → EXEC_EXIT of /bin/true on one kept
        connection (the shim's own create + exec latency, no client start per
        sample); par processes at once, each n // par creates."""
        key = self.tag("f")
        ps = [subprocess.Popen([SHIMCTL, sock, f"{key}w{w}", "--fresh", str(max(1, n // par)),
                                "--gap", str(gap_ms), "--", "/bin/true"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
              for w in range(par)]
        p50s, p99s = [], []
        for p in ps:
            _, err = p.communicate(timeout=600)
            mm = re.search(r"creates: p50 ([\d.]+) ms, p99 ([\d.]+) ms", err)
            if p.returncode != 0 or not mm:
                raise RuntimeError(f"shimctl --fresh: {err}")
            p50s.append(float(mm.group(1)))
            p99s.append(float(mm.group(2)))
        return {"p50_ms": round(statistics.median(p50s), 3), "p99_ms": round(max(p99s), 3),
                "n": n, "par": par, "gap_ms": gap_ms}

    async def one_run(self, thread):
        loop = asyncio.get_running_loop()
        body = json.dumps({"threadId": thread, "messages": [{"role": "user", "content": "true"}]})

        def post():
            c = http.client.HTTPConnection("127.0.0.1", self.s.port, timeout=30)
            c.request("POST", "/runs", body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            js = json.loads(r.read())
            c.close()
            assert r.status == 202, (r.status, js)
            return js["runId"]

        t0 = time.perf_counter()
        run_id = await loop.run_in_executor(None, post)
        t = {"post": time.perf_counter() - t0}
        uri = f"ws://127.0.0.1:{self.s.port}/runs/{run_id}/stream?threadId={thread}"
        async with websockets.connect(uri) as ws:
            async for raw in ws:
                now = time.perf_counter() - t0
                msg = json.loads(raw)
                t.setdefault("first", now)
                if msg.get("type") == "status":
                    t["status"] = now
                    assert msg["record"]["status"] == "completed", msg
                    break
                ch = msg["chunk"]
                if ch.get("name") == "sandbox.created":
                    t.setdefault("sandbox", now)
                if ch["type"] == "TOOL_CALL_RESULT":
                    t["result"] = now
        p = await asyncio.create_subprocess_exec(SHIMCTL, self.sock, thread, "--destroy",
                                                 stdout=asyncio.subprocess.DEVNULL,
                                                 stderr=asyncio.subprocess.DEVNULL)
        await p.wait()
        return {k: v * 1e6 for k, v in t.items()}

    def e2e(self, n, par):
        tag = self.tag("e")

        async def go():
            res = []

            async def worker(w):
                for i in range(w, n, par):
                    res.append(await self.one_run(f"{tag}-{w}-{i}"))
            t0 = time.perf_counter()
            await asyncio.gather(*(worker(w) for w in range(par)))
            return res, (time.perf_counter() - t0) * 1e6
        res, wall = asyncio.run(go())
        out = {k: summ([r[k] for r in res if k in r])
               for k in ("post", "first", "sandbox", "result", "status")}
        out["status"]["per_s"] = round(n / (wall / 1e6), 1)
        out["raw"] = res
        return out

    def rep(self, order):
        r = {}
        if A.only_e2e:
            r["bwrap"] = {"serial": self.contender("bwrap", A.n, 1),
                          "par": self.contender("bwrap", A.n, A.par)}
            r["e2e"] = {"serial": self.e2e(A.e2e, 1), "par": self.e2e(A.e2e, A.par)}
            return r
        for name in order:
            r[name] = {"serial": self.contender(name, A.n, 1),
                       "par": self.contender(name, A.n, A.par)}
        r["live"] = self.live(A.live)
        r["fresh"] = {
            name: {"serial": self.fresh(sock, A.n, 1, 0),
                   "paced": self.fresh(sock, A.n, 1, 50),
                   "par": self.fresh(sock, A.n, A.par, 0)}
            for name, sock in (("pool", self.sock), ("cold", self.cold_sock))}
        r["e2e"] = {"serial": self.e2e(A.e2e, 1), "par": self.e2e(A.e2e, A.par)}
        return r

    def warm(self):
        if A.only_e2e:
            self.contender("bwrap", 10, 2)
            self.e2e(5, 1)
            return
        for name in ("shim", "shim_cold", "once", "once_cold", "bwrap", "unshare", "spawn",
                     "floor"):
            self.contender(name, 10, 2)
        self.live(20)
        self.e2e(5, 1)

    def claims(self):
        """The shim's own figure for each ENSURE served from the pool (key check,
        workspace, bind, runtime record, reply), from its debug log: builds from
        before it was logged have none."""
        us = [int(x) for x in re.findall(r"served from the pool in (\d+) us",
                                          self.s.log("containerd-shim"))]
        if not us:
            return None
        return {"n": len(us), "p50_us": pct(us, 50), "p90_us": pct(us, 90),
                "p99_us": pct(us, 99), "mean_us": round(statistics.mean(us), 1)}

    def close(self):
        self.claim_us = self.claims()
        problems = self.s.stop() + self.cold.stop()
        self.s.cleanup()  # also unmounts what layout() mounted
        self.cold.cleanup()
        return problems


def ratio(r, e2e_key="first"):
    bw = r["bwrap"]["serial"]["total"]["p50_ms"]
    bwp = r["bwrap"]["par"]["total"]["p50_ms"]
    if A.only_e2e:
        return {
            "e2e_first_over_bwrap": r["e2e"]["serial"]["first"]["p50_ms"] / bw,
            "e2e_sandbox_over_bwrap": r["e2e"]["serial"]["sandbox"]["p50_ms"] / bw,
            "e2e_status_over_bwrap": r["e2e"]["serial"]["status"]["p50_ms"] / bw,
            "e2e_status_over_bwrap_par8": r["e2e"]["par"]["status"]["p50_ms"] / bwp,
        }
    return {
        "create_exec_over_bwrap": r["shim"]["serial"]["create_exec"]["p50_ms"] / bw,
        "cold_create_exec_over_bwrap": r["shim_cold"]["serial"]["create_exec"]["p50_ms"] / bw,
        "cold_shim_side_create_exec_over_bwrap": (
            r["shim_cold"]["serial"]["create_exec"]["p50_ms"]
            - r["floor"]["serial"]["total"]["p50_ms"]) / bw,
        "cold_create_exec_over_bwrap_par8": r["shim_cold"]["par"]["create_exec"]["p50_ms"] / bwp,
        "shim_side_create_exec_over_bwrap": (r["shim"]["serial"]["create_exec"]["p50_ms"]
                                             - r["floor"]["serial"]["total"]["p50_ms"]) / bw,
        "create_exec_destroy_over_bwrap": r["shim"]["serial"]["create_exec_destroy"]["p50_ms"] / bw,
        "create_exec_over_bwrap_par8": r["shim"]["par"]["create_exec"]["p50_ms"] / bwp,
        "shim_per_s_over_bwrap_par8": r["shim"]["par"]["create_exec_destroy"]["per_s"]
        / r["bwrap"]["par"]["total"]["per_s"],
        # one client process per sandbox, as bwrap is one process per sandbox
        "once_per_s_over_bwrap": r["once"]["serial"]["total"]["per_s"]
        / r["bwrap"]["serial"]["total"]["per_s"],
        "once_per_s_over_bwrap_par8": r["once"]["par"]["total"]["per_s"]
        / r["bwrap"]["par"]["total"]["per_s"],
        "once_cold_per_s_over_bwrap_par8": r["once_cold"]["par"]["total"]["per_s"]
        / r["bwrap"]["par"]["total"]["per_s"],
        "create_exec_over_unshare": r["shim"]["serial"]["create_exec"]["p50_ms"]
        / r["unshare"]["serial"]["total"]["p50_ms"],
        "e2e_first_over_bwrap": r["e2e"]["serial"]["first"]["p50_ms"] / bw,
        "e2e_status_over_bwrap": r["e2e"]["serial"]["status"]["p50_ms"] / bw,
        "e2e_status_over_bwrap_par8": r["e2e"]["par"]["status"]["p50_ms"] / bwp,
        "live_exec_p50_ms": r["live"]["repeat"]["p50_ms"],
        "fresh_create_exec_over_bwrap": r["fresh"]["pool"]["serial"]["p50_ms"] / bw,
        "fresh_paced_create_exec_over_bwrap": r["fresh"]["pool"]["paced"]["p50_ms"] / bw,
        "fresh_create_exec_over_bwrap_par8": r["fresh"]["pool"]["par"]["p50_ms"] / bwp,
        "cold_fresh_create_exec_over_bwrap": r["fresh"]["cold"]["serial"]["p50_ms"] / bw,
        "cold_fresh_create_exec_over_bwrap_par8": r["fresh"]["cold"]["par"]["p50_ms"] / bwp,
    }


def main():
    if subprocess.run(["cc", "-O2", "-Wall", "-o", EXE, os.path.join(HERE, "spawn-time.c")]).returncode:
        sys.exit("cc failed")
    bw = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    out = {"bench": "B6", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
           "kernel": os.uname().release, "shimctl": SHIMCTL, "bwrap": bw, "conf": CONF,
           "conf_cold": CONF_COLD,
           "pinning": "daemons taskset -c 0 (sandboxes inherit); b6.py, spawn-time, shimctl, "
                      "bwrap, unshare and the e2e client on CPU 1 (sched_setaffinity)",
           "fs": A.fs, "n": A.n, "par": A.par, "live": A.live, "e2e": A.e2e, "reps": [], "unpinned": None}
    names = ["shim", "shim_cold", "once", "once_cold", "bwrap", "unshare", "spawn", "floor"]
    orders = [names[i:] + names[:i] for i in range(len(names))]
    b = Bench(True)
    try:
        b.warm()
        for i in range(A.reps):
            r = b.rep(orders[i % len(orders)])
            r["order"] = orders[i % len(orders)]
            r["ratios"] = ratio(r)
            out["reps"].append(r)
            print(f"rep {i}: " + json.dumps({k: round(v, 3) for k, v in r["ratios"].items()}),
                  flush=True)
    finally:
        out["hygiene_pinned"] = b.close()
        out["claim_us_pinned"] = b.claim_us
    if not A.no_unpinned:
        b = Bench(False)
        try:
            b.warm()
            r = b.rep(orders[0])
            r["ratios"] = ratio(r)
            out["unpinned"] = r
            print("unpinned: " + json.dumps({k: round(v, 3) for k, v in r["ratios"].items()}),
                  flush=True)
        finally:
            out["hygiene_unpinned"] = b.close()
    keys = out["reps"][0]["ratios"].keys()
    out["ratio_median_min_max"] = {
        k: [round(statistics.median(x), 3), round(min(x), 3), round(max(x), 3)]
        for k in keys for x in [[r["ratios"][k] for r in out["reps"]]]}
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = os.path.join(TOP, "bench", "results", f"sandbox-b6-{stamp}{'-e2e' if A.only_e2e else ''}"
                        f"{'-journal' if A.fs == 'journal' else ''}{os.environ.get('B6_TAG', '')}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(path)
    print(json.dumps(out["ratio_median_min_max"], indent=1))
    # table: median over pinned reps of each p50/p99
    def med(f):
        return round(statistics.median(f(r) for r in out["reps"]), 2)
    if A.only_e2e:
        for name, f in (("bwrap --unshare-all", lambda r, m: r["bwrap"][m]["total"]),
                        ("e2e POST reply", lambda r, m: r["e2e"][m]["post"]),
                        ("e2e first frame", lambda r, m: r["e2e"][m]["first"]),
                        ("e2e sandbox.created", lambda r, m: r["e2e"][m]["sandbox"]),
                        ("e2e TOOL_CALL_RESULT", lambda r, m: r["e2e"][m]["result"]),
                        ("e2e status frame", lambda r, m: r["e2e"][m]["status"])):
            print(f"| {name} | " + " | ".join(
                f"{med(lambda r: f(r, m)['p50_ms'])} / {med(lambda r: f(r, m)['p99_ms'])}"
                for m in ("serial", "par")) + " |")
        return
    rows = [("spawn /bin/true", lambda r, m: r["spawn"][m]["total"]),
            ("unshare -Urnpfmiu", lambda r, m: r["unshare"][m]["total"]),
            ("bwrap --unshare-all", lambda r, m: r["bwrap"][m]["total"]),
            ("shimctl floor (--list)", lambda r, m: r["floor"][m]["total"]),
            ("shim create+exec", lambda r, m: r["shim"][m]["create_exec"]),
            ("shim destroy", lambda r, m: r["shim"][m]["destroy"]),
            ("shim create+exec+destroy", lambda r, m: r["shim"][m]["create_exec_destroy"]),
            ("shim create+exec+destroy, one shimctl (--destroy-after)",
             lambda r, m: r["once"][m]["total"]),
            ("… pool_size=0", lambda r, m: r["once_cold"][m]["total"]),
            ("shim pool_size=0 create+exec", lambda r, m: r["shim_cold"][m]["create_exec"]),
            ("shim pool_size=0 destroy", lambda r, m: r["shim_cold"][m]["destroy"]),
            ("e2e POST reply", lambda r, m: r["e2e"][m]["post"]),
            ("e2e first frame", lambda r, m: r["e2e"][m]["first"]),
            ("e2e sandbox.created", lambda r, m: r["e2e"][m]["sandbox"]),
            ("e2e TOOL_CALL_RESULT", lambda r, m: r["e2e"][m]["result"]),
            ("e2e status frame", lambda r, m: r["e2e"][m]["status"])]
    for name, f in rows:
        cells = []
        for m in ("serial", "par"):
            cells.append(f"{med(lambda r: f(r, m)['p50_ms'])} / {med(lambda r: f(r, m)['p99_ms'])}")
            ps = [f(r, m).get("per_s") for r in out["reps"]]
            cells.append(str(round(statistics.median(ps))) if None not in ps else "")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"| live exec (--repeat) | {med(lambda r: r['live']['repeat']['p50_ms'])} / "
          f"{med(lambda r: r['live']['repeat']['p99_ms'])} | | | |")
    for pc in ("pool", "cold"):
        for mode in ("serial", "paced", "par"):
            print(f"| fresh create+exec, {pc}, {mode} | "
                  f"{med(lambda r: r['fresh'][pc][mode]['p50_ms'])} / "
                  f"{med(lambda r: r['fresh'][pc][mode]['p99_ms'])} | | | |")
    print(f"| live exec (shimctl process) | {med(lambda r: r['live']['shimctl_process']['p50_ms'])}"
          f" / {med(lambda r: r['live']['shimctl_process']['p99_ms'])} | | | |")
    for k in ("hygiene_pinned", "hygiene_unpinned"):
        if out.get(k):
            print(k, out[k][:5])


if __name__ == "__main__":
    main()
