# SPDX-License-Identifier: MIT
"""Issue 14, placement by capacity (docs/CLUSTER.md "Placement"): two nodes
p and q on one NATS server, each with [cluster] max_runs = 1.

- p busy (a sleeping run): a new thread's first run posted through p is
  claimed for q, the live node with room per its heartbeat, and runs there
  (q's log holds it, p's does not; its rw_runs record names q); the thread's
  next run through p goes to q too (its owner);
- q busy as well: a new thread's first run through p stays on p (no node has
  room: its shim's queue waits), as before placement by capacity."""
import json
import os
import subprocess
import time

import rwtest

from rwcluster import Cluster
from rwtest import poll

NO_SUITE = True  # the suites need the NATS cluster's ports: made here

C = Cluster()
local_run = C.local_record


def heartbeat(name, via):
    """Node NAME's last heartbeat as VIA's configuration reads rw_nodes, or {}."""
    n = C.status(via)["nodes"].get(name)
    try:
        return json.loads(n["value"]) if n else {}
    except ValueError:
        return {}


def wait_load(name, via, runs):
    assert poll(lambda: heartbeat(name, via).get("runs") == runs, timeout=20), \
        (name, heartbeat(name, via))
    time.sleep(1.0)  # the watch of rw_nodes of the other node has it too


def sleeping(s, tag):
    return subprocess.run(["pgrep", "-f", f"sleep {tag}"], capture_output=True).returncode == 0


def test_a_busy_node_places_a_new_thread_on_a_node_with_room():
    try:
        p, q = C.node("p", "max_runs = 1\n"), C.node("q", "max_runs = 1\n")
        wait_load("q", "p", 0)
        assert heartbeat("q", "p")["max_runs"] == 1, heartbeat("q", "p")
        # runwarden cluster status (text) shows each node's capacity
        out = subprocess.run([os.path.join(rwtest.BUILD, "runwarden"), "cluster", "status",
                              "--config", p.conf_path], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0, out
        lines = out.stdout.splitlines()
        assert lines[0].split() == ["NODE", "STATE", "RUNS", "MAX_RUNS", "SANDBOXES",
                                    "THREADS"], out.stdout
        rows = {ln.split()[0]: ln.split() for ln in lines[1:3]}
        assert rows["p"][3] == "1" and rows["q"][3] == "1", out.stdout
        busy_p = p.start_run("sleep 30.61", thread="cap-busy-p")
        assert poll(lambda: sleeping(p, "30.61"), timeout=20)
        assert local_run(p, busy_p), "below capacity, a new thread stays where it was posted"

        run = p.start_run("echo placed", thread="cap-new")
        rec = p.wait_terminal(run, thread="cap-new")
        assert rec["status"] == "completed", rec
        assert local_run(q, run) and not local_run(p, run), "the run did not go to q"
        assert poll(lambda: (C.run_record(run) or {}).get("node") == "q", timeout=10), \
            C.run_record(run)
        assert C.owner("cap-new", "p") == "q"
        assert "the new thread goes to node 'q'" in p.log("coordinatord")
        # the thread's next run goes to its owner, q
        again = p.start_run("echo again", thread="cap-new")
        assert p.wait_terminal(again, thread="cap-new")["status"] == "completed"
        assert local_run(q, again) and not local_run(p, again)

        # q busy too: no node has room, the new thread stays on p
        busy_q = q.start_run("sleep 30.62", thread="cap-busy-q")
        assert poll(lambda: sleeping(q, "30.62"), timeout=20)
        assert local_run(q, busy_q)
        wait_load("q", "p", 1)
        full = p.start_run("echo stays", thread="cap-full")
        assert p.wait_terminal(full, thread="cap-full")["status"] == "completed"
        assert local_run(p, full) and not local_run(q, full), "the run left p"
        assert C.owner("cap-full", "p") == "p"
        assert "no other live node has room; the new thread stays here" in p.log("coordinatord")

        for s, r, t in ((p, busy_p, "cap-busy-p"), (q, busy_q, "cap-busy-q")):
            st, body = s.http("POST", f"/runs/{r}/cancel?threadId={t}")
            assert st in (200, 202), (st, body)
            assert s.wait_terminal(r, thread=t, timeout=20)["status"] == "aborted"
    finally:
        C.stop_all()
