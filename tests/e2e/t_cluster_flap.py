# SPDX-License-Identifier: MIT
"""Issue 35, D: no takeover of a node that beats again (docs/CLUSTER.md
"Node loss and takeover"). Two nodes a and b (TTL 4 s, heartbeats 0.5 s);
a runs a long run on its thread. b's event loop is held (ptrace of its main
thread, as t_cluster_stall does), then a's coordinatord is stopped
(SIGSTOP) past the TTL: its key expires. a is let go and beats again, and
only then is b's loop let go: b handles the loss it was told of late, while
a is alive. b logs the loss, but takes nothing: a keeps its thread and its
run ends normally.

Before the fix, b took a's thread over (the loss's steps never looked at
rw_nodes again) and a's healthy run was fenced."""
import time

from rwcluster import Cluster
from rwtest import poll
from t_cluster_stall import LoopStalled

NO_SUITE = True  # the suites need the NATS cluster's ports: made here

TTL_MS = 4000
C = Cluster(servers=3, heartbeat_ms=500, node_ttl_ms=TTL_MS)


def attempt(a, b, th):
    """One try: a stopped past the TTL, b's loop held as soon as it logs the
    loss, a let go and beating, b let go. Returns (conclusive, b's log of
    it, a's run): conclusive when b had not started its takes yet when its
    loop was held (the loss's listings are a few round trips: the hold may
    come too late, then the try says nothing)."""
    run = a.start_run("for i in $(seq 1 60); do echo x$i; sleep 0.25; done", thread=th)
    assert poll(lambda: a.http("GET", f"/runs/{run}?threadId={th}")[1].get("status")
                == "running", timeout=15)
    assert C.owner(th, "b") == "a"
    b_at = len(b.log("coordinatord"))
    coord = a.procs["coordinatord"]
    stall = None
    coord.send_signal(19)  # SIGSTOP: every thread, its heartbeats too
    try:
        lost = poll(lambda: "node a lost" in b.log("coordinatord")[b_at:],
                    timeout=TTL_MS / 1000 + 10, interval=0.002)
        stall = LoopStalled(b.procs["coordinatord"].pid)
        stall.__enter__()
        conclusive = "taking over its" not in b.log("coordinatord")[b_at:]
    finally:
        coord.send_signal(18)  # SIGCONT
    try:
        assert lost, b.log("coordinatord")[b_at:][-3000:]
        # a beats again (its key is back) while b's loop is held
        assert poll(lambda: "a" in C.status("a")["nodes"], timeout=5), "a does not beat"
    finally:
        stall.__exit__(None, None, None)
    time.sleep(3)  # b goes on with a's loss, a alive
    return conclusive, b.log("coordinatord")[b_at:], run


def test_a_node_beating_again_keeps_its_threads():
    try:
        # b keeps its NATS connection while its loop is held (a loop held
        # past 3 pings would reconnect, and the new watch of rw_nodes
        # would find a alive: no loss to handle)
        a, b = C.node("a"), C.node("b", "ping_interval_ms = 60000")
        for i in range(6):
            th = f"t-flap-{i}"
            conclusive, since, run = attempt(a, b, th)
            if conclusive:
                break
            print(f"    try {i}: b's loop held after its takes began; again")
        assert conclusive, "b's loop was never held before its takes"
        assert "Thread taken over" not in since, since[-3000:]
        assert "not taken over: the node beats again" in since, since[-3000:]
        assert C.owner(th, "b") == "a"
        rec = a.wait_terminal(run, thread=th, timeout=60)
        assert rec["status"] == "completed", (rec, a.log("coordinatord")[-2000:])
    finally:
        C.stop_all()
