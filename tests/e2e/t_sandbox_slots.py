# SPDX-License-Identifier: MIT
"""No run can pin a sandbox slot (issue 12, item 3; docs/DESIGN.md "Left-behind
processes"): at the end of a run its exec cgroup is killed (what it left running
with `&`, nohup or setsid goes with it) unless its harness says keep_processes;
only a live exec keeps a sandbox busy, so a sandbox with no run can always be
stopped for a queued request, even while kept processes linger; and the queue
is served round-robin over threads.

Left-behind processes are `sleep 1000.<unique>`: found on the host by that
argument (t_sandbox.host_pids), so no other test's sleep is mistaken for one."""
import os
import random
import signal
import subprocess
import time

from helpers.mpack import MSG, REPLY, Client
from rwtest import BUILD, poll, stdout_text
from t_sandbox import host_pids, workspace

SUITE_CONF = """[containerd-shim]
max_instances = 5
# the starvation this module checks for shows as queue_timeout: fail in a
# minute rather than ten
queue_timeout_ms = 60000
pool_size = 0

[harness.keep]
adapter = shell
keep_processes = true
"""

ENV = ["PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace"]
TAG = f"{random.randrange(10**6):06d}"
_n = 0


def sleeper_arg():
    """A fresh `sleep` argument: 1000.<module tag><counter> seconds."""
    global _n
    _n += 1
    return f"1000.{TAG}{_n:03d}"


def leave_behind(args):
    """A shell command that leaves `sleep` processes running (one per arg, in
    turn: backgrounded, nohup'd, setsid'd) and exits 0 at once."""
    forms = ["sleep {} &", "nohup sleep {} >/dev/null 2>&1 &", "setsid sleep {} &"]
    return " ".join(forms[i % 3].format(a) for i, a in enumerate(args)) + " echo left"


def alive(args):
    return [a for a in args if host_pids(a)]


def test_left_behind_processes_are_killed_and_never_pin_a_slot(s):
    # five threads fill max_instances = 5, each leaving sleepers behind
    left = {}
    for i in range(5):
        thread = f"slot-{TAG}-{i}"
        args = [sleeper_arg() for _ in range(3)]
        left[thread] = args
        run = s.start_run(leave_behind(args), thread=thread)
        rec = s.wait_terminal(run, thread=thread, timeout=90)
        assert rec["status"] == "completed", rec
        # the run's end killed its exec cgroup: none of its sleepers outlived it
        assert alive(args) == [], (thread, alive(args))
    # a sixth thread gets a slot: a sandbox with no run is stopped for it
    t0 = time.monotonic()
    run = s.start_run("echo six", thread=f"slot-{TAG}-6")
    events, status, _, _ = s.tail(run, thread=f"slot-{TAG}-6", timeout=90)
    assert status["status"] == "completed", status
    assert stdout_text(events) == "six\n"
    print(f"   [measure] a sixth thread's run with 5 of 5 slots left with sleepers: completed "
          f"in {time.monotonic() - t0:.2f} s (issue 12, before: queue_timeout after 10 min)")
    for args in left.values():
        assert alive(args) == [], alive(args)


def test_kept_processes_survive_the_run_but_not_slot_pressure(s):
    # a keep_processes harness: its sleepers outlive the run
    kept = [sleeper_arg() for _ in range(3)]
    keep_thread = f"keep-{TAG}"
    run = s.start_run(leave_behind(kept), thread=keep_thread, metadata={"harness": "keep"})
    rec = s.wait_terminal(run, thread=keep_thread, timeout=90)
    assert rec["status"] == "completed", rec
    assert poll(lambda: len(alive(kept)) == 3, 10), alive(kept)
    # four runs that go on (live execs) take the other four slots
    busy = {}
    for i in range(4):
        thread, arg = f"busy-{TAG}-{i}", sleeper_arg()
        busy[thread] = (s.start_run(f"exec sleep {arg}", thread=thread), arg)
    assert poll(lambda: all(host_pids(a) for _, a in busy.values()), 60), busy
    assert alive(kept), "kept processes went before any slot was needed"
    # a sixth thread: the sandbox whose processes were kept is the one stopped
    run = s.start_run("echo six", thread=f"keep-{TAG}-6")
    events, status, _, _ = s.tail(run, thread=f"keep-{TAG}-6", timeout=90)
    assert status["status"] == "completed", status
    assert stdout_text(events) == "six\n"
    assert poll(lambda: alive(kept) == [], 10), alive(kept)
    # the running ones were not touched
    for thread, (run_id, arg) in busy.items():
        st, rec = s.http("GET", f"/runs/{run_id}?threadId={thread}")
        assert st == 200 and rec["status"] == "running", rec
        assert host_pids(arg), arg
    for thread, (run_id, arg) in busy.items():
        st, rec = s.http("POST", f"/runs/{run_id}/cancel?threadId={thread}")
        assert st == 202 and rec["status"] == "aborted", rec
        assert host_pids(arg) == [], arg


def shim_client(s):
    return Client(os.path.join(s.dir, "run", "containerd-shim.sock"), timeout=90)


def read_until(c, pred):
    """The first frame (t, req_id, body) on c satisfying pred (earlier pushes kept)."""
    for f in c.pushes:
        if pred(*f):
            c.pushes.remove(f)
            return f
    while True:
        f = c.read()
        assert f is not None, "connection closed"
        if pred(*f):
            return f
        c.pushes.append(f)


def test_queue_is_round_robin_over_threads(s):
    # Straight at the shim, a sandbox key per request (as reuse = none): five
    # sandboxes with a live exec each hold every slot; thread g queues three
    # requests, then thread h one. Each slot freed goes to the thread holding
    # the fewest sandboxes: g1, then h1 — not g2, g3 first.
    c = shim_client(s)
    execs = []
    try:
        for i in range(5):
            t, b = c.call("SANDBOX_ENSURE", {"key": f"rr-{TAG}-f{i}", "thread_id": f"rr-f{i}"})
            assert t == REPLY, b
            arg = sleeper_arg()
            t, b2 = c.call("EXEC_START", {"sandbox_id": b["sandbox_id"],
                                          "argv": ["sleep", arg], "env": ENV,
                                          "cwd": "/workspace"})
            assert t == REPLY, b2
            execs.append(b2["exec_id"])
        ids = {}
        for n, (key, thread) in enumerate([("g1", "rr-g"), ("g2", "rr-g"), ("g3", "rr-g"),
                                           ("h1", "rr-h")]):
            ids[key] = 1000 + n
            c.send(MSG["SANDBOX_ENSURE"], ids[key], {"key": f"rr-{TAG}-{key}", "thread_id": thread})
        # all four wait (SANDBOX_QUEUED, h last in line)
        read_until(c, lambda t, r, b: t == MSG["SANDBOX_QUEUED"] and b.get("position") == 4)
        want = {v: k for k, v in ids.items()}

        def served(t, r, b):
            return r in want
        for expect in ("g1", "h1"):
            t, b = c.call("EXEC_KILL", {"exec_id": execs.pop(0), "signal": 9})
            assert t == REPLY, b
            t, rid, b = read_until(c, served)
            assert t == REPLY and want.pop(rid) == expect, (t, rid, b, expect)
        for eid in execs:  # the slots go back for the tests after this one
            c.call("EXEC_KILL", {"exec_id": eid, "signal": 9})
    finally:
        c.close()


def test_bad_keep_processes_is_a_config_error(s):
    path = os.path.join(s.dir, f"bad-keep-{TAG}.conf")
    with open(path, "w") as f:
        f.write("[harness.k]\nadapter = shell\nkeep_processes = maybe\n")
    p = subprocess.run([os.path.join(BUILD, "coordinatord"),
                        "--check-config", "--config", path], capture_output=True, text=True,
                       timeout=30)
    assert p.returncode != 0, p.stderr
    assert f"{path}:3" in p.stderr and "keep_processes" in p.stderr, p.stderr


def test_a_readopted_exec_still_kills_what_it_left(s):
    # kill_leftovers is in the shim's adoption record: after a kill -9 and
    # restart of the shim, the run's end still kills its exec cgroup
    s.expected_errors += [r"containerd-shim"]
    thread, arg = f"ro-{TAG}", sleeper_arg()
    run = s.start_run(f"setsid sleep {arg} </dev/null >/dev/null 2>&1 & "
                      "while [ ! -e /workspace/go ]; do sleep 0.05; done; echo done",
                      thread=thread)
    assert poll(lambda: host_pids(arg), 60), arg
    s.kill("containerd-shim", signal.SIGKILL)
    s.start_daemon("containerd-shim")
    with open(os.path.join(workspace(s, thread), "go"), "w"):
        pass
    rec = s.wait_terminal(run, thread=thread, timeout=90)
    assert rec["status"] == "completed", rec
    assert host_pids(arg) == [], arg
