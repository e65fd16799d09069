# SPDX-License-Identifier: MIT
"""Sandbox lifecycle (ARCHITECTURE.md "Sandboxes", issue 5): max_instances with
a FIFO queue (CUSTOM run.queued), idle sandboxes stopped to make room, the
queue_timeout, sleep_after (workspace kept), and "a sandbox with a live exec is
never idle" (processes a run left behind are killed at its end). Small limits so that it all happens within seconds."""
import os
import subprocess
import time

from rwtest import BUILD, stdout_text, poll
from t_sandbox import host_pids

SUITE_CONF = """[containerd-shim]
max_instances = 2
queue_timeout_ms = 2000
sleep_after_ms = 1000
"""

SHIMCTL = os.path.join(BUILD, "tools", "shimctl")


def shimctl(s, key, *args):
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    return subprocess.run([SHIMCTL, sock, key, *args], capture_output=True, text=True,
                          timeout=30)



def has_sandbox(s, run_id, thread):
    st, rec = s.http("GET", f"/runs/{run_id}?threadId={thread}")
    return st == 200 and "sandboxId" in rec


def customs(events, name):
    return [e["chunk"]["value"] for e in events
            if e["chunk"]["type"] == "CUSTOM" and e["chunk"]["name"] == name]


def test_queue_is_fifo_and_idle_sandboxes_make_room(s):
    a = s.start_run("sleep 1; echo A", thread="q-a")
    b = s.start_run("sleep 1; echo B", thread="q-b")
    assert poll(lambda: has_sandbox(s, a, "q-a") and has_sandbox(s, b, "q-b"), 10)
    c = s.start_run("echo C", thread="q-c")
    d = s.start_run("echo D", thread="q-d")
    ev_c, st_c, _, _ = s.tail(c, thread="q-c")
    ev_d, st_d, _, _ = s.tail(d, thread="q-d")
    assert st_c["status"] == "completed" and stdout_text(ev_c) == "C\n", st_c
    assert st_d["status"] == "completed" and stdout_text(ev_d) == "D\n", st_d
    # both waited, C first in line, D behind it (then first once C got a slot)
    assert customs(ev_c, "run.queued")[0] == {"position": 1}, customs(ev_c, "run.queued")
    assert customs(ev_d, "run.queued")[0] == {"position": 2}, customs(ev_d, "run.queued")
    assert {"position": 1} in customs(ev_d, "run.queued")
    # queued before the sandbox came
    names = [e["chunk"].get("name") for e in ev_c]
    assert names.index("run.queued") < names.index("sandbox.created"), names
    for run_id, thread in ((a, "q-a"), (b, "q-b")):
        assert s.wait_terminal(run_id, thread=thread)["status"] == "completed"


def test_queue_timeout_fails_the_waiting_run(s):
    a = s.start_run("sleep 4", thread="q-a")
    b = s.start_run("sleep 4", thread="q-b")
    assert poll(lambda: has_sandbox(s, a, "q-a") and has_sandbox(s, b, "q-b"), 10)
    t0 = time.time()
    c = s.start_run("echo never", thread="q-c")
    events, status, _, _ = s.tail(c, thread="q-c")
    took = time.time() - t0
    assert status["status"] == "failed", status
    assert status["error"]["code"] == "queue_timeout", status
    assert 1.8 < took < 3.5, took
    assert customs(events, "run.queued") == [{"position": 1}]
    assert stdout_text(events) == ""
    for run_id, thread in ((a, "q-a"), (b, "q-b")):
        assert s.wait_terminal(run_id, thread=thread)["status"] == "completed"


def test_sleep_after_stops_idle_sandbox_keeps_workspace(s):
    run = s.start_run("echo kept > /workspace/f", thread="q-sleep")
    assert s.wait_terminal(run, thread="q-sleep")["status"] == "completed"
    t0 = time.time()
    assert shimctl(s, "q-sleep", "--stats").returncode == 0
    assert poll(lambda: shimctl(s, "q-sleep", "--stats").returncode == 2, 5)
    assert time.time() - t0 > 0.7  # sleep_after_ms = 1000 after the run ended
    run = s.start_run("cat /workspace/f", thread="q-sleep")
    events, status, _, _ = s.tail(run, thread="q-sleep")
    assert status["status"] == "completed" and stdout_text(events) == "kept\n"
    assert customs(events, "sandbox.created"), "a stopped sandbox is created anew"


def test_a_live_exec_is_never_idle_and_leftovers_do_not_count(s):
    # what a run leaves running is killed at its end (issue 12: it used to
    # keep the sandbox "busy" forever); t_sandbox_slots.py has the rest
    run = s.start_run("setsid sleep 30.417 </dev/null >/dev/null 2>&1 & echo bg", thread="q-live")
    assert s.wait_terminal(run, thread="q-live")["status"] == "completed"
    assert not host_pids("30.417")
    # a running exec keeps its sandbox up past sleep_after_ms (2.5 x)
    run = s.start_run("sleep 2.5; echo done", thread="q-live")
    assert poll(lambda: s.http("GET", f"/runs/{run}?threadId=q-live")[1].get("sandboxId"), 10)
    while s.http("GET", f"/runs/{run}?threadId=q-live")[1]["status"] == "running":
        r = shimctl(s, "q-live", "--stats")
        assert r.returncode == 0, r.stdout + r.stderr
        time.sleep(0.1)
    events, status, _, _ = s.tail(run, thread="q-live")
    assert status["status"] == "completed" and stdout_text(events) == "done\n", status
    assert shimctl(s, "q-live", "--destroy").returncode == 0
