# SPDX-License-Identifier: MIT
"""Per-exec cgroups (docs/DESIGN.md, "Cancel kills the run's exec cgroup"):
every exec is born in its own cgroup2 leaf <sandbox cgroup>/e<exec id>, so
EXEC_KILL with SIGKILL, the exec wall timeout and a run's cancel kill all it
started (setsid'd, double-forked, SIGTERM-ignoring descendants included) and
nothing of the sandbox's other execs; leaves are removed once empty, and with
the sandbox; a re-adopted exec finds its leaf again by name.

Processes are found on the host by a marker in their argv (as t_sandbox.py)."""
import glob
import hashlib
import os
import re
import signal
import subprocess

from helpers.mpack import MSG, REPLY, Client
from rwtest import poll, stdout_text
from t_sandbox import SHIMCTL, cgroup_id, host_pids, sandbox_cgroups, sandbox_id, shimctl, \
    workspace

SUITE_CONF = """[containerd-shim]
pids_max = 256
# no sandboxes started ahead: the leak check counts every cgroup directory
pool_size = 0

[coordinatord]
sandbox_wait_ms = 30000
"""

ENV = ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace"]
MSG_EXEC_OUTPUT, MSG_EXEC_EXIT = MSG["EXEC_OUTPUT"], MSG["EXEC_EXIT"]


def client(s):
    return Client(os.path.join(s.dir, "run", "containerd-shim.sock"), timeout=60)


def ensure(c, key):
    t, b = c.call("SANDBOX_ENSURE", {"key": key})
    assert t == REPLY, b
    return b["sandbox_id"]


def start(c, sid, script, marker, timeout_ms=None):
    body = {"sandbox_id": sid, "argv": ["bash", "-c", script, marker], "env": ENV,
            "cwd": "/workspace"}
    if timeout_ms:
        body["timeout_ms"] = timeout_ms
    t, b = c.call("EXEC_START", body)
    assert t == REPLY, b
    return b["exec_id"]


def wait_exit(c, eid):
    """(EXEC_EXIT body, stdout bytes) of exec eid, from the pushes on c."""
    out = b""
    i = 0
    while True:
        while i >= len(c.pushes):
            f = c.read()
            assert f is not None, "connection closed"
            c.pushes.append(f)
        t, _, b = c.pushes[i]
        i += 1
        if t == MSG_EXEC_OUTPUT and b["exec_id"] == eid and b["stream"] == 1:
            out += b["data"]
        if t == MSG_EXEC_EXIT and b["exec_id"] == eid:
            return b, out


def procs(marker):
    """{pid: argv} of live processes with marker in their command line."""
    found = {}
    for pid in host_pids(marker):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found[pid] = [a.decode() for a in f.read().split(b"\0") if a]
        except OSError:
            pass
    return found


def cgroup2_of(pid):
    with open(f"/proc/{pid}/cgroup") as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return None


def unified_dir(s, key):
    """The sandbox's cgroup2 directory (v2, or the unified hierarchy of a hybrid host)."""
    for d in sandbox_cgroups(s, key):
        if d.startswith("/sys/fs/cgroup/unified/") or \
                os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
            return d
    return None


LEAF_POOL = 2  # shim-int.h: the exec leaves a sandbox keeps made ahead


def leaf_empty(d, name):
    try:
        with open(os.path.join(d, name, "cgroup.procs")) as f:
            return f.read().strip() == ""
    except FileNotFoundError:
        return True


def leaves(s, key):
    """The exec leaves of the sandbox, less the ones made ahead for the next
    execs (shim-leafpool.c): those are empty and hold the highest ids (an
    exec takes the oldest, and gets a fresh id only when none is left), so
    up to LEAF_POOL empty leaves at the top are left out. A leaf an ended
    exec left behind is below them, and still counted."""
    d = unified_dir(s, key)
    if not d:
        return []
    try:
        ids = sorted(int(e[1:]) for e in os.listdir(d) if re.fullmatch(r"e\d+", e))
    except FileNotFoundError:
        return []
    for _ in range(LEAF_POOL):
        if ids and leaf_empty(d, f"e{ids[-1]}"):
            ids.pop()
    return sorted(f"e{i}" for i in ids)


def instance_dirs(s):
    """Every directory below the shim's instance directories, in every hierarchy."""
    inst = "runwarden." + hashlib.sha256(os.path.join(s.dir, "state").encode()).hexdigest()[:12]
    out = set()
    for base in glob.glob("/sys/fs/cgroup/**/" + inst, recursive=True):
        for root, dirs, _ in os.walk(base):
            out.update(os.path.join(root, d) for d in dirs)
    return out


SETSID = ("setsid bash -c 'trap \"\" TERM HUP; touch /workspace/{tag}-up; "
          "while :; do sleep 1; done' {m}-setsid & ")
DAEMON = ("(nohup bash -c 'trap \"\" TERM HUP; exec -a {m}-daemon sleep 9999' "
          "</dev/null >/dev/null 2>&1 &); ")


def test_kill_takes_every_descendant_of_one_exec_only(s):
    key = "t-ecg-kill"
    c = client(s)
    sid = ensure(c, key)
    ma, mb = f"rwmark-ecg-a-{os.getpid()}", f"rwmark-ecg-b-{os.getpid()}"
    b = start(c, sid, "while [ ! -e /workspace/gate ]; do sleep 0.05; done; echo B-done", mb)
    a = start(c, sid, SETSID.format(tag="a", m=ma) + DAEMON.format(m=ma) + "echo up; wait", ma)
    assert a != b

    def ready():
        p = procs(ma)
        return (any(v and v[0] == f"{ma}-daemon" for v in p.values()) and
                any(f"{ma}-setsid" in v for v in p.values()))
    assert poll(ready, 15), procs(ma)
    # born in their exec's leaf, the setsid'd and the double-forked ones too
    cg = "sb-" + cgroup_id(s, key)
    for pid in procs(ma):
        assert cgroup2_of(pid).endswith(f"/{cg}/e{a}"), (pid, cgroup2_of(pid))
    for pid in procs(mb):
        assert cgroup2_of(pid).endswith(f"/{cg}/e{b}"), (pid, cgroup2_of(pid))
    assert leaves(s, key) == sorted([f"e{a}", f"e{b}"]), leaves(s, key)
    # SIGTERM is ignored by both descendants: only the cgroup gets them
    for pid, argv in procs(ma).items():
        if argv and argv[0] == f"{ma}-daemon" or f"{ma}-setsid" in argv:  # not the leader
            os.kill(pid, signal.SIGTERM)
    assert ready(), procs(ma)

    t, body = c.call("EXEC_KILL", {"exec_id": a, "signal": 9})
    assert t == REPLY, body
    ex, out = wait_exit(c, a)
    assert ex["reason"] == "killed" and ex["signal"] == 9, ex
    assert out == b"up\n", out
    # EXEC_EXIT of a killed exec comes once its leaf is empty
    assert procs(ma) == {}, procs(ma)
    assert procs(mb), "the other exec was killed too"
    assert poll(lambda: leaves(s, key) == [f"e{b}"], 10), leaves(s, key)
    open(os.path.join(workspace(s, key), "gate"), "w").close()
    ex, out = wait_exit(c, b)
    assert ex["reason"] == "exit" and ex["exit_code"] == 0, ex
    assert out == b"B-done\n", out
    assert poll(lambda: leaves(s, key) == [], 10), leaves(s, key)
    c.close()


def test_the_sandbox_cannot_reach_the_cgroupfs(s):
    """The delegated cgroup.procs files are usable only through the cgroupfs,
    which is not mounted inside; the exec sees itself at the root of its own
    leaf's namespace view."""
    key = "t-ecg-view"
    c = client(s)
    sid = ensure(c, key)
    m = f"rwmark-ecg-view-{os.getpid()}"
    e = start(c, sid, "grep -c cgroup /proc/self/mountinfo; ls /sys/fs/cgroup 2>&1 | wc -l; "
              "grep '^0::' /proc/self/cgroup", m)
    ex, out = wait_exit(c, e)
    assert ex["exit_code"] == 0, (ex, out)
    lines = out.decode().splitlines()
    assert lines[0] == "0", out  # no cgroup or cgroup2 mount
    assert lines[2] == f"0::/e{e}", out  # its leaf, relative to the sandbox cgroup
    c.close()


def test_kill_via_shimctl_kill_after(s):
    key = "t-ecg-shimctl"
    m = f"rwmark-ecg-sc-{os.getpid()}"
    script = ("while [ ! -e /workspace/sc-up ]; do sleep 0.05; done; echo up; wait")
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    p = subprocess.Popen([SHIMCTL, sock, key, "--kill-after", "4000", "--", "bash", "-c",
                          SETSID.format(tag="sc", m=m) + script, m],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert poll(lambda: any(f"{m}-setsid" in v for v in procs(m).values()), 15), procs(m)
    out, err = p.communicate(timeout=60)
    assert out == "up\n", (out, err)
    assert re.search(r"exec \d+: killed \(exit_code 137, signal 9\)", err), err
    assert procs(m) == {}, procs(m)
    assert poll(lambda: leaves(s, key) == [], 10), leaves(s, key)


def test_timeout_kills_the_setsid_descendant(s):
    key = "t-ecg-timeout"
    c = client(s)
    sid = ensure(c, key)
    m = f"rwmark-ecg-to-{os.getpid()}"
    e = start(c, sid, SETSID.format(tag="to", m=m) + "echo up; wait", m, timeout_ms=3000)
    ex, out = wait_exit(c, e)
    assert ex["reason"] == "timeout" and ex["signal"] == 9, ex
    assert out == b"up\n", out
    assert os.path.exists(os.path.join(workspace(s, key), "to-up")), "the descendant never ran"
    assert procs(m) == {}, procs(m)
    assert poll(lambda: leaves(s, key) == [], 10), leaves(s, key)
    # the sandbox goes on
    e2 = start(c, sid, "echo fine", m + "-2")
    ex, out = wait_exit(c, e2)
    assert (ex["reason"], ex["exit_code"], out) == ("exit", 0, b"fine\n"), (ex, out)
    c.close()


def test_fork_bomb_in_one_exec_is_killed_and_the_shim_answers(s):
    s.expected_errors += [r"pids"]
    key = "t-ecg-bomb"
    c = client(s)
    sid = ensure(c, key)
    m = f"rwmark-ecg-bomb-{os.getpid()}"
    e = start(c, sid, "b() { b | b & }; b; while :; do sleep 1; done", m)
    # until the sandbox's pids.max was hit
    pids_dirs = [d for d in sandbox_cgroups(s, key)
                 if os.path.exists(os.path.join(d, "pids.events"))]
    assert pids_dirs, sandbox_cgroups(s, key)

    def hit():
        with open(os.path.join(pids_dirs[0], "pids.events")) as f:
            return int(f.read().split()[1]) > 0
    assert poll(hit, 30)
    t, body = c.call("SANDBOX_STATS", {"sandbox_id": sid})  # the shim answers
    assert t == REPLY and body["procs"] > 1, body
    t, body = c.call("EXEC_KILL", {"exec_id": e, "signal": 9})
    assert t == REPLY, body
    ex, _ = wait_exit(c, e)
    assert ex["reason"] == "pids_limit" and ex["signal"] == 9, ex
    assert procs(m) == {}, len(procs(m))
    assert poll(lambda: c.call("SANDBOX_STATS", {"sandbox_id": sid})[1]["procs"] == 1, 10)
    e2 = start(c, sid, "echo alive", m + "-after")
    ex, out = wait_exit(c, e2)
    assert (ex["exit_code"], out) == (0, b"alive\n"), (ex, out)
    c.close()


def test_leaves_go_with_the_sandbox_and_cycles_leak_nothing(s):
    key = "t-ecg-leak"
    before = instance_dirs(s)
    c = client(s)
    sid = ensure(c, key)
    m = f"rwmark-ecg-leak-{os.getpid()}"
    # a background process outlives its exec: the leaf stays while it lives
    e = start(c, sid, SETSID.format(tag="lk", m=m) + "echo bg", m)
    ex, out = wait_exit(c, e)
    assert (ex["exit_code"], out) == (0, b"bg\n"), (ex, out)
    assert poll(lambda: any(f"{m}-setsid" in v for v in procs(m).values()), 10), procs(m)
    assert leaves(s, key) == [f"e{e}"], leaves(s, key)
    t, body = c.call("SANDBOX_STATS", {"sandbox_id": sid})
    assert t == REPLY and body["procs"] >= 2, body  # the leaf's members count
    cgs = sandbox_cgroups(s, key)
    assert cgs
    t, body = c.call("SANDBOX_DESTROY", {"sandbox_id": sid})
    assert t == REPLY, body
    assert procs(m) == {}, procs(m)
    assert poll(lambda: not any(os.path.exists(d) for d in cgs), 10), cgs
    c.close()
    r = shimctl(s, "t-ecg-cycle", "--fresh", "100", "--", "true", timeout=300)
    assert r.returncode == 0, r.stderr
    assert poll(lambda: instance_dirs(s) - before == set(), 10), instance_dirs(s) - before


def test_cancel_kills_only_the_cancelled_run(s):
    thread = "t-ecg-cancel"
    ma, mb = f"rwmark-ecg-ca-{os.getpid()}", f"rwmark-ecg-cb-{os.getpid()}"
    ra = s.start_run(f": {ma}; " + SETSID.format(tag="ca", m=ma) + "echo a-up; wait",
                     thread=thread)
    assert poll(lambda: any(f"{ma}-setsid" in v for v in procs(ma).values()), 15), procs(ma)
    rb = s.start_run(f": {mb}; while [ ! -e /workspace/gate-b ]; do sleep 0.05; done; "
                     "seq 1 3000", thread=thread)
    assert poll(lambda: procs(mb), 15)
    # one sandbox, two leaves
    pa = [p for p, v in procs(ma).items() if f"{ma}-setsid" in v][0]
    pb = list(procs(mb))[0]
    ca, cb = cgroup2_of(pa), cgroup2_of(pb)
    assert os.path.dirname(ca) == os.path.dirname(cb) and ca != cb, (ca, cb)
    st, rec = s.http("POST", f"/runs/{ra}/cancel?threadId={thread}")
    assert st == 202, (st, rec)
    assert rec["status"] == "aborted" and rec.get("cancelRequested") is True, rec
    assert procs(ma) == {}, procs(ma)
    events, status, _, _ = s.tail(ra, thread=thread)
    last = events[-1]["chunk"]
    assert last == {"type": "RUN_ERROR", "message": "run cancelled", "code": "aborted",
                    "runId": ra, "metadata": {"tanstack": {"threadId": thread, "runId": ra}},
                    "timestamp": last["timestamp"]}, last
    assert procs(mb), "the other run's exec was killed too"
    open(os.path.join(workspace(s, thread), "gate-b"), "w").close()
    events, status, _, _ = s.tail(rb, thread=thread)
    assert status["status"] == "completed", (status, events[-1])
    assert stdout_text(events) == "".join(f"{i}\n" for i in range(1, 3001))


def test_adopted_exec_is_killed_by_its_leaf(s):
    """Last test of the module: kills and restarts the shim."""
    s.expected_errors += [r"containerd-shim"]
    key = "t-ecg-adopt"
    m = f"rwmark-ecg-ad-{os.getpid()}"
    r = shimctl(s, key, "--detach", "--", "bash", "-c", SETSID.format(tag="ad", m=m) + "wait", m)
    assert r.returncode == 0, r.stderr
    eid = int(re.fullmatch(r"exec_id=(\d+)\n", r.stdout).group(1))
    assert poll(lambda: any(f"{m}-setsid" in v for v in procs(m).values()), 15), procs(m)
    before = procs(m)
    s.kill("containerd-shim", signal.SIGKILL)
    assert procs(m) == before
    s.start_daemon("containerd-shim")
    assert poll(lambda: f"Re-adopted exec {eid} (running)" in s.log("containerd-shim"), 15), \
        s.log("containerd-shim")[-2000:]
    s.wait_ready()
    assert leaves(s, key) == [f"e{eid}"], leaves(s, key)
    c = client(s)
    t, body = c.call("EXEC_KILL", {"exec_id": eid, "signal": 9})
    assert t == REPLY, body
    assert poll(lambda: procs(m) == {}, 10), procs(m)
    assert poll(lambda: leaves(s, key) == [], 10), leaves(s, key)
    c.close()
