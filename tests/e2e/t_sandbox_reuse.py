# SPDX-License-Identifier: MIT
"""reuse = none (ARCHITECTURE.md "Sandboxes", issue 5): every run gets a fresh
sandbox with an empty /workspace (keyed "run:<runId>", as TanStack keys
threadId:runId), and the sandbox and its directory are gone when the run
ends. Also: a pooled sandbox (pool_size, the default) serves such runs."""
import os
import subprocess
import time

from rwtest import BUILD, stdout_text, poll

SUITE_CONF = """[coordinatord]
reuse = none
"""



def created(events):
    return [e["chunk"]["value"]["sandboxId"] for e in events
            if e["chunk"]["type"] == "CUSTOM" and e["chunk"]["name"] == "sandbox.created"]


def sandbox_dirs(s):
    d = os.path.join(s.dir, "state", "sandboxes")
    return sorted(n for n in os.listdir(d) if not n.startswith("."))


def test_each_run_gets_a_fresh_sandbox_and_workspace(s):
    r1 = s.start_run("echo one > /workspace/note; ls /workspace", thread="t-none")
    ev1, st1, _, _ = s.tail(r1, thread="t-none")
    assert st1["status"] == "completed" and stdout_text(ev1) == "note\n", ev1
    r2 = s.start_run("ls -A /workspace | wc -l; cat /workspace/note", thread="t-none")
    ev2, st2, _, _ = s.tail(r2, thread="t-none")
    # an empty workspace: the first run's file is not there
    assert st2["status"] == "failed", st2
    assert stdout_text(ev2) == "0\n", ev2
    (a,), (b,) = created(ev1), created(ev2)
    assert a != b, (a, b)


def test_the_sandbox_and_its_files_go_when_the_run_ends(s):
    r = s.start_run("dd if=/dev/zero of=/workspace/blob bs=1k count=64 2>/dev/null; echo ok",
                    thread="t-gone")
    ev, st, _, _ = s.tail(r, thread="t-gone")
    assert st["status"] == "completed" and stdout_text(ev) == "ok\n", ev
    (sid,) = created(ev)
    # the directory <state>/sandboxes/<id> (its workspace) is removed, and the
    # shim no longer knows the sandbox
    assert poll(lambda: sid not in sandbox_dirs(s), 10), sandbox_dirs(s)
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    shimctl = os.path.join(BUILD, "tools", "shimctl")
    out = subprocess.run([shimctl, sock, "run:" + r, "--stats"], capture_output=True, text=True,
                         timeout=10)
    assert out.returncode != 0, out.stdout


def test_concurrent_runs_of_a_thread_do_not_share(s):
    runs = [s.start_run(f"echo {i} > /workspace/mine; sleep 1; ls /workspace; cat /workspace/mine",
                        thread="t-par") for i in range(2)]
    outs = []
    sids = set()
    for r in runs:
        ev, st, _, _ = s.tail(r, thread="t-par")
        assert st["status"] == "completed", ev
        outs.append(stdout_text(ev))
        sids.update(created(ev))
    assert sorted(outs) == ["mine\n0\n", "mine\n1\n"], outs
    assert len(sids) == 2, sids


def test_a_cancelled_run_leaves_no_directory(s):
    r = s.start_run("echo x > /workspace/f; sleep 60", thread="t-cancel")
    assert poll(lambda: len(sandbox_dirs(s)) > 0 and any(
        os.path.exists(os.path.join(s.dir, "state", "sandboxes", d, "workspace", "f"))
        for d in sandbox_dirs(s)), 10)
    st, _ = s.http("POST", f"/runs/{r}/cancel?threadId=t-cancel", body={})
    assert st in (200, 202), st
    assert s.wait_terminal(r, thread="t-cancel")["status"] == "aborted"
    assert poll(lambda: sandbox_dirs(s) == [], 10), sandbox_dirs(s)


def test_runs_are_served_from_the_pool_and_it_refills(s):
    """pool_size = 2 (the default): a run's sandbox is a pre-started one (the
    "created" line names its cgroup), and the shim starts another in its place."""
    import re
    shim_pid = s.procs["containerd-shim"].pid

    def inits():
        with open(f"/proc/{shim_pid}/task/{shim_pid}/children") as f:
            return set(f.read().split())
    before = poll(lambda: inits() if len(inits()) == 2 else None, 10)
    assert before, inits()
    r = s.start_run("echo pooled", thread="t-pool")
    ev, st, _, _ = s.tail(r, thread="t-pool")
    assert st["status"] == "completed" and stdout_text(ev) == "pooled\n", ev
    (sid,) = created(ev)
    assert re.search(r"Sandbox " + sid + r" created \([^)]*from the pool, cgroup sb-[0-9a-f]{16}\)",
                     s.log("containerd-shim")), s.log("containerd-shim")[-2000:]
    # its init was one of the pool's; the pool is back to two new ones
    def refilled():  # one reading of the children per try: they change between reads
        now = inits()
        return now if len(now) == 2 and not (now & before) == before else None
    after = poll(refilled, 10)
    assert after and len(after - before) >= 1, (before, inits())


def test_thread_files_and_snapshots_are_refused(s):
    """A thread has no workspace of its own under reuse = none: its file API and
    snapshots answer 409 rather than act on a directory no run sees."""
    st, body = s.http("GET", "/threads/t-none/files/note")
    assert st == 409 and body["code"] == "reuse_none", (st, body)
    st, body = s.http("POST", "/threads/t-none/snapshots", body={})
    assert st == 409 and body["code"] == "conflict", (st, body)


def test_every_new_sandbox_sees_its_own_workspace_under_load(s):
    """Pooled and freshly built sandboxes, created back to back from 8 clients:
    each one's first exec writes into /workspace and reads it back (a claim
    never hands over a sandbox that shows the empty pool mount point)."""
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    shimctl = os.path.join(BUILD, "tools", "shimctl")
    ps = [subprocess.Popen([shimctl, sock, f"t-load-{w}", "--fresh", "12", "--", "/bin/sh", "-c",
                            "echo $$ > /workspace/me && test -s /workspace/me && "
                            "test $(stat -c %u /workspace) = $(id -u)"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
          for w in range(8)]
    for p in ps:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    log = s.log("containerd-shim")
    assert "from the pool" in log


def test_destroyed_sandboxes_leave_no_pool_mount_point(s):
    """A claimed sandbox keeps its pool mount point <sandbox_dir>/.pool/<id>
    while it lives; destroyed, the shim unmounts and removes it. After 16
    sandboxes made and destroyed by 4 clients at once, .pool holds the mount
    points of the two pooled sandboxes only, and the shim's mount namespace
    has no other."""
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    shimctl = os.path.join(BUILD, "tools", "shimctl")
    shim_pid = s.procs["containerd-shim"].pid
    pool_root = os.path.join(s.dir, "state", "sandboxes", ".pool")
    ps = [subprocess.Popen([shimctl, sock, f"t-release-{w}", "--fresh", "4", "--", "/bin/true"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
          for w in range(4)]
    for p in ps:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err

    def pool_state():
        names = set(os.listdir(pool_root))
        with open(f"/proc/{shim_pid}/mountinfo") as f:
            mounted = {ln.split()[4].rsplit("/", 1)[1] for ln in f
                       if os.path.dirname(ln.split()[4]) == pool_root}
        return names, mounted

    def settled():  # one reading per try: the refill changes .pool between reads
        state = pool_state()
        return state if len(state[0]) == 2 else None
    names, mounted = poll(settled, 15) or pool_state()
    assert len(names) == 2 and mounted == names, (names, mounted)
