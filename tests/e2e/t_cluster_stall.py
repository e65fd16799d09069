# SPDX-License-Identifier: MIT
"""Issue 30, X2: liveness never waits behind work (docs/CLUSTER.md
"Heartbeats"). Two NATS-backed nodes a and b (rwcluster.Cluster, TTL 4 s,
heartbeats every 500 ms). coordinatord's event loop is stalled on purpose —
its main thread alone is stopped with ptrace (PTRACE_SEIZE + PTRACE_INTERRUPT
of that one thread; a SIGSTOP would stop every thread), as a request that
holds the loop would — while its other threads run:

- past node_ttl_ms (2 × TTL): a is not declared lost, b takes nothing over,
  a's run (which ended during the stall) completes, a keeps the thread and
  its workspace (a file written before is read through b, and by a's next
  run);
- a node whose loop is stuck past [cluster] loop_stall_max_ms stops its
  heartbeats and is declared lost node_ttl_ms later, as a crashed one; its
  heartbeats resume when the loop runs again."""
import ctypes
import os
import time

from rwcluster import Cluster
from rwtest import poll, stdout_text

NO_SUITE = True  # the suites need the NATS cluster's ports: made here

TTL_MS = 4000
C = Cluster(servers=3, heartbeat_ms=500, node_ttl_ms=TTL_MS)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
_libc.ptrace.restype = ctypes.c_long
PTRACE_DETACH, PTRACE_SEIZE, PTRACE_INTERRUPT = 17, 0x4206, 0x4207
WALL = 0x40000000


def _ptrace(req, tid):
    if _libc.ptrace(req, tid, None, None) < 0:
        e = ctypes.get_errno()
        raise OSError(e, f"ptrace({req:#x}, {tid}): {os.strerror(e)}")


class LoopStalled:
    """Stop the main thread (the event loop) of process pid, and only it."""

    def __init__(self, pid):
        self.tid = pid

    def __enter__(self):
        _ptrace(PTRACE_SEIZE, self.tid)
        _ptrace(PTRACE_INTERRUPT, self.tid)
        os.waitpid(self.tid, WALL)  # stopped
        return self

    def __exit__(self, *exc):
        _ptrace(PTRACE_DETACH, self.tid)


def test_loop_stalled_past_ttl_keeps_the_node():
    try:
        a, b = C.node("a"), C.node("b")
        st, js = a.http("PUT", "/threads/t-stall/files/precious.txt", raw_body=b"precious\n")
        assert st == 201, (st, js)
        run = a.start_run("sleep 2; cat /workspace/precious.txt", thread="t-stall")
        assert poll(lambda: a.http("GET", f"/runs/{run}?threadId=t-stall")[1].get("status")
                    == "running", timeout=15)
        b_at = len(b.log("coordinatord"))
        t0 = time.time()
        with LoopStalled(a.procs["coordinatord"].pid):
            # a's loop answers nothing now; its heartbeats go on
            time.sleep(2 * TTL_MS / 1000)
            alive = C.status("b")["nodes"]
        held = time.time() - t0
        assert "a" in alive, alive
        rec = a.wait_terminal(run, thread="t-stall", timeout=60)
        assert rec["status"] == "completed", (rec, a.log("coordinatord")[-2000:])
        events, _, _, _ = a.tail(run, thread="t-stall", timeout=30)
        assert stdout_text(events) == "precious\n", events
        since = b.log("coordinatord")[b_at:]
        assert "node a lost" not in since and "taken over" not in since, since[-3000:]
        assert C.owner("t-stall", "b") == "a"
        st, body = b.http("GET", "/threads/t-stall/files/precious.txt")
        assert st == 200 and body == b"precious\n", (st, body)
        run2 = a.start_run("cat /workspace/precious.txt", thread="t-stall")
        rec = a.wait_terminal(run2, thread="t-stall", timeout=30)
        assert rec["status"] == "completed", rec
        assert stdout_text(a.tail(run2, thread="t-stall", timeout=30)[0]) == "precious\n"
        print(f"    a's loop held {held:.1f} s (TTL {TTL_MS} ms): a kept its node, "
              f"thread, run and workspace")
    except Exception:
        C.stop_all()
        raise


def test_hung_loop_stops_the_heartbeats():
    try:
        b = C.node("b")
        c = C.node("c", "loop_stall_max_ms = 1000")
        assert poll(lambda: "c" in C.status("b")["nodes"], timeout=15)
        b_at = len(b.log("coordinatord"))
        t0 = time.time()
        with LoopStalled(c.procs["coordinatord"].pid):
            lost = poll(lambda: "node c lost" in b.log("coordinatord")[b_at:],
                        timeout=1 + TTL_MS / 1000 + 15, interval=0.2)
            took = time.time() - t0
        assert lost, b.log("coordinatord")[b_at:][-3000:]
        assert took >= TTL_MS / 1000, took  # not before its key could expire
        assert "stops its heartbeats" in c.log("coordinatord"), c.log("coordinatord")[-2000:]
        assert poll(lambda: "heartbeats resume" in c.log("coordinatord"), timeout=15)
        assert poll(lambda: "c" in C.status("b")["nodes"], timeout=15)
        print(f"    c's loop stuck: lost {took:.1f} s later (guard 1 s, TTL {TTL_MS} ms)")
    finally:
        C.stop_all()
