# SPDX-License-Identifier: MIT
"""Snapshot and restore jobs off the shim's event loop (snapjob.c): the archive
and the unpack run in a child process of the shim ("rw-snapshot",
"rw-restore") while the shim keeps serving other sandboxes, the snapshotted
sandbox frozen until the job ends; a second job of a key is 409 busy; ENSUREs of a key being restored wait for it and EXEC_STARTs
into it are refused; a killed job fails typed and thaws the sandbox;
backups_keep prunes the oldest backups, whose restore is then 404
backup_not_found.

Ordering, not times: the test stops the job's child (SIGSTOP) while it checks
that other requests are answered, then lets it go on."""
import hashlib
import http.client
import json
import urllib.error
import urllib.request
import os
import signal
import subprocess
import tarfile
import threading
import time

from ipc import Ipc, IpcError
from rwtest import stdout_text

KEEP = 3
SUITE_CONF = f"""[containerd-shim]
backups_keep = {KEEP}
"""

BIG = 256 << 20  # incompressible bytes written by a run


def sandbox_id(thread):
    return hashlib.sha256(thread.encode()).hexdigest()[:16]


def workspace_parent(s, thread):
    return os.path.join(s.dir, "state", "sandboxes", sandbox_id(thread))


def backups(s, thread):
    return os.path.join(s.dir, "state", "backups", sandbox_id(thread))


def run_ok(s, thread, cmd):
    run = s.start_run(cmd, thread=thread)
    events, status, _, _ = s.tail(run, thread=thread, timeout=120)
    assert status["status"] == "completed", (status, stdout_text(events, "process.stderr"))
    return stdout_text(events)


def snapshot(s, thread, label=None):
    st, js = s.http("POST", f"/threads/{thread}/snapshots", {} if label is None else {"label": label})
    assert st == 201, (st, js)
    return js["snapshotId"], json.loads(js["snapshotId"])


def restore(s, thread, sid):
    return s.http("POST", f"/threads/{thread}/restore", {"snapshotId": sid})


class Background:
    """One HTTP request in a thread, with a long timeout (a big archive)."""

    def __init__(self, s, method, path, body):
        self.result = None
        self.done = threading.Event()

        def go():
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=600)
            c.request(method, path, body=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            payload = r.read()
            c.close()
            self.result = (r.status, json.loads(payload) if payload else None)
            self.done.set()

        self.t = threading.Thread(target=go, daemon=True)
        self.t.start()

    def wait(self, timeout=600):
        assert self.done.wait(timeout), "no reply"
        return self.result


def shim_pid(s):
    return s.procs["containerd-shim"].pid


def shim_children(s):
    pid = shim_pid(s)
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            pass
    return out


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except (FileNotFoundError, ProcessLookupError):  # gone, or gone between open and read
        return None


def job_child(s, name, bg):
    """The shim's child running the job `name`, found while bg still waits for
    its reply; it is stopped (SIGSTOP) before it is returned."""
    deadline = time.time() + 60
    while time.time() < deadline:
        for pid in shim_children(s):
            if comm(pid) == name:
                os.kill(pid, signal.SIGSTOP)
                assert not bg.done.is_set(), ("the job replied before it was stopped", bg.result)
                return pid
        assert not bg.done.is_set(), ("replied without a job child", bg.result)
        time.sleep(0.002)
    raise AssertionError(f"no {name} child of the shim")


def wait_gone(pid):
    deadline = time.time() + 30
    while time.time() < deadline:
        if comm(pid) is None:
            return
        time.sleep(0.01)
    raise AssertionError(f"job child {pid} still there")


def grows(path, size):
    """Wait until the file at path is larger than size."""
    deadline = time.time() + 30
    while time.time() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > size:
            return
        time.sleep(0.01)
    raise AssertionError(f"{path} did not grow past {size}")


def wait_log(s, needle, start):
    deadline = time.time() + 30
    while time.time() < deadline:
        if needle in s.log("containerd-shim")[start:]:
            return
        time.sleep(0.01)
    raise AssertionError(f"no '{needle}' in the shim log")


def shim_ipc(s):
    return Ipc(os.path.join(s.dir, "run", "containerd-shim.sock"))


def archive_member_sha(path, name):
    """sha256 and size of one member of a .tar.zst, streamed."""
    z = subprocess.Popen(["zstd", "-dc", path], stdout=subprocess.PIPE)
    with tarfile.open(fileobj=z.stdout, mode="r|") as tf:
        for m in tf:
            if m.name == name:
                h = hashlib.sha256()
                f = tf.extractfile(m)
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
                z.stdout.close()
                z.wait()
                return h.hexdigest(), m.size
    z.wait()
    raise AssertionError(f"{name} not in {path}")


def ls(path):
    """The names in a directory; none when it does not exist (a job stopped
    before it created its key's backup directory)."""
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def no_leftovers(s, thread):
    """Neither a temporary archive nor a staging directory stays behind (the
    staging of a killed restore is removed by a cleanup child: wait for it)."""
    deadline = time.time() + 30
    while True:
        tmp = [n for n in ls(backups(s, thread)) if n.endswith(".tmp")]
        stg = [n for n in ls(workspace_parent(s, thread)) if n.startswith(".restore")]
        if not tmp and not stg:
            return
        assert time.time() < deadline, (tmp, stg)
        time.sleep(0.02)


def test_big_snapshot_runs_while_other_sandboxes_are_served(s):
    t, other = "t-job-big", "t-job-other"
    assert run_ok(s, other, "echo ready") == "ready\n"
    out = run_ok(s, t, f"head -c {BIG} /dev/urandom > /workspace/big.bin && "
                       "sha256sum /workspace/big.bin | cut -c1-64")
    digest = out.strip()
    ticks = os.path.join(workspace_parent(s, t), "workspace", "ticks")
    ticker = s.start_run("while :; do echo x >> /workspace/ticks; sleep 0.02; done", thread=t)
    grows(ticks, 0)
    bg = Background(s, "POST", f"/threads/{t}/snapshots", {"label": "big"})
    child = job_child(s, "rw-snapshot", bg)
    try:
        # the sandbox stays frozen while its job runs: nothing it writes moves
        n = os.path.getsize(ticks)
        time.sleep(0.3)
        assert os.path.getsize(ticks) == n
        # the job is in flight (stopped): the shim serves everybody else
        assert run_ok(s, other, "echo other-ran; echo err >&2") == "other-ran\n"
        ipc = shim_ipc(s)
        st = ipc.call("SANDBOX_STATS", {"sandbox_id": sandbox_id(other)})
        assert st["procs"] >= 1, st
        # a second job of the same key is busy, through routerd as 409
        st, js = s.http("POST", f"/threads/{t}/snapshots", {})
        assert st == 409 and js["code"] == "conflict" and "busy" in js["error"], (st, js)
        # ... and directly on the shim's socket (a restore through routerd is
        # 409 already in coordinatord: the ticker run is active)
        for name, body in (("SANDBOX_SNAPSHOT", {"key": t}),
                           ("SANDBOX_RESTORE", {"key": t, "record": "{}"})):
            try:
                ipc.call(name, body)
                raise AssertionError(f"second job accepted: {name}")
            except IpcError as e:
                assert e.code == -16 and e.message.startswith("busy:"), (name, e.code, e.message)
                assert e.reason == "thread_busy", (name, e.reason)
        ipc.close()
        # the file API reads the workspace but does not change it meanwhile
        st, _ = s.http("GET", f"/threads/{t}/files/ticks")
        assert st == 200, st
        req = urllib.request.Request(f"http://127.0.0.1:{s.port}/threads/{t}/files/late.txt",
                                     data=b"late", method="PUT")
        try:
            urllib.request.urlopen(req, timeout=10)
            raise AssertionError("a file was written during the snapshot")
        except urllib.error.HTTPError as e:
            js = json.loads(e.read())
            assert e.code == 409 and js["code"] == "busy", (e.code, js)
        assert not os.path.exists(os.path.join(workspace_parent(s, t), "workspace", "late.txt"))
        assert not bg.done.is_set(), bg.result  # ordering: all of that came first
    finally:
        os.kill(child, signal.SIGCONT)
    st, js = bg.wait()
    assert st == 201, (st, js)
    rec = json.loads(js["snapshotId"])
    assert rec["label"] == "big" and rec["files"] == 2 and rec["bytes"] > BIG, rec
    wait_gone(child)
    grows(ticks, os.path.getsize(ticks))  # thawed after the job
    assert s.http("POST", f"/runs/{ticker}/cancel?threadId={t}")[0] == 202
    s.wait_terminal(ticker, thread=t)
    path = os.path.join(backups(s, t), rec["id"] + ".tar.zst")
    assert archive_member_sha(path, "big.bin") == (digest, BIG)
    # thawed; the big snapshot restores (in a child too)
    run_ok(s, t, "head -c 10 /dev/zero > /workspace/big.bin && echo new > /workspace/n")
    st, js = restore(s, t, js["snapshotId"])
    assert st == 200, (st, js)
    assert run_ok(s, t, "ls /workspace; sha256sum /workspace/big.bin | cut -c1-64") == \
        f"big.bin\nticks\n{digest}\n"
    no_leftovers(s, t)


def test_pruning_keeps_the_newest(s):
    t, other = "t-job-prune", "t-job-prune-other"
    osid, _ = snapshot(s, other)
    sids = []
    for i in range(KEEP + 2):
        run_ok(s, t, f"echo {i} > /workspace/gen")
        sids.append(snapshot(s, t)[0])
    ids = [json.loads(x)["id"] for x in sids]
    names = sorted(os.listdir(backups(s, t)))
    # each kept archive with its record (<uuid>.json, for the list and restores by id)
    assert names == sorted([i + ".tar.zst" for i in ids[2:]] + [i + ".json" for i in ids[2:]] +
                           [i + ".pruned" for i in ids[:2]]), names
    assert all(os.path.getsize(os.path.join(backups(s, t), i + ".pruned")) == 0 for i in ids[:2])
    for sid in sids[:2]:
        st, js = restore(s, t, sid)
        assert st == 404 and js["code"] == "backup_not_found", (st, js)
        assert "pruned" in js["error"], js
    assert run_ok(s, t, "cat /workspace/gen") == f"{KEEP + 1}\n"  # untouched by the refusals
    for i in (2, KEEP + 1):
        st, js = restore(s, t, sids[i])
        assert st == 200, (i, st, js)
        assert run_ok(s, t, "cat /workspace/gen") == f"{i}\n"
    # a record that never was ours is still 400, not 404
    forged = dict(json.loads(sids[0]), id="00000000-0000-4000-8000-000000000000")
    st, js = restore(s, t, json.dumps(forged))
    assert st == 400 and js["code"] == "not_a_backup_record", (st, js)
    # another thread's backups are its own
    assert sorted(os.listdir(backups(s, other))) == [json.loads(osid)["id"] + ".json",
                                                     json.loads(osid)["id"] + ".tar.zst"]
    assert restore(s, other, osid)[0] == 200


def test_killed_snapshot_fails_typed_and_thaws(s):
    t = "t-job-kill"
    run_ok(s, t, f"head -c {BIG // 2} /dev/urandom > /workspace/b && echo 1 > /workspace/n")
    bg = Background(s, "POST", f"/threads/{t}/snapshots", {})
    child = job_child(s, "rw-snapshot", bg)
    # no run is active: the shim's busy comes through coordinatord and routerd
    st, js = restore(s, t, "{}")
    assert st == 409 and js["code"] == "conflict" and js["error"].startswith("busy:"), (st, js)
    os.kill(child, signal.SIGKILL)
    st, js = bg.wait()
    assert st == 500 and js["code"] == "job_killed", (st, js)
    assert "killed by signal 9" in js["error"], js
    wait_gone(child)
    # the sandbox was thawed: it runs, its files are intact; no partial archive
    assert run_ok(s, t, "wc -c < /workspace/b; cat /workspace/n") == f"{BIG // 2}\n1\n"
    assert [n for n in ls(backups(s, t)) if not n.startswith(".")] == []
    no_leftovers(s, t)
    # the key is free again
    sid, rec = snapshot(s, t)
    assert rec["files"] == 2, rec


def test_restore_holds_ensures_and_refuses_execs(s):
    t = "t-job-restore"
    run_ok(s, t, f"head -c {BIG // 4} /dev/urandom > /workspace/b && echo restored > /workspace/m")
    sid, _ = snapshot(s, t)
    run_ok(s, t, "echo before > /workspace/m")
    # a restore that is killed: the workspace stays as it was, the held run goes on
    bg = Background(s, "POST", f"/threads/{t}/restore", {"snapshotId": sid})
    child = job_child(s, "rw-restore", bg)
    mark = len(s.log("containerd-shim"))
    run = s.start_run("cat /workspace/m", thread=t)
    wait_log(s, f"Request for '{t}' waits for its snapshot/restore", mark)
    ipc = shim_ipc(s)
    try:
        ipc.call("EXEC_START", {"sandbox_id": sandbox_id(t), "argv": ["true"], "env": [],
                                "cwd": "/workspace"})
        raise AssertionError("exec started during a restore")
    except IpcError as e:
        assert e.code == -16 and "being restored" in e.message, (e.code, e.message)
    assert s.http("GET", f"/runs/{run}?threadId={t}")[1]["status"] != "completed"
    os.kill(child, signal.SIGKILL)
    st, js = bg.wait()
    assert st == 500 and js["code"] == "job_killed", (st, js)
    events, status, _, _ = s.tail(run, thread=t, timeout=60)
    assert status["status"] == "completed" and stdout_text(events) == "before\n", status
    no_leftovers(s, t)
    # a restore that completes: the run that came in meanwhile sees only the result
    bg = Background(s, "POST", f"/threads/{t}/restore", {"snapshotId": sid})
    child = job_child(s, "rw-restore", bg)
    mark = len(s.log("containerd-shim"))
    run = s.start_run("cat /workspace/m; ls /workspace", thread=t)
    wait_log(s, f"Request for '{t}' waits for its snapshot/restore", mark)
    os.kill(child, signal.SIGCONT)
    st, js = bg.wait()
    assert st == 200, (st, js)
    events, status, _, _ = s.tail(run, thread=t, timeout=60)
    assert status["status"] == "completed", status
    assert stdout_text(events) == "restored\nb\nm\n", stdout_text(events)
    ipc.close()
    no_leftovers(s, t)
