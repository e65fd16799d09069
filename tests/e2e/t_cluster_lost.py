# SPDX-License-Identifier: MIT
"""Issue 35 I: a node whose daemons are all gone is lost within node_ttl_ms
plus a pass, whatever its sandboxes do and whether or not anything else
reads rw_nodes (docs/CLUSTER.md "Thread ownership and node liveness").

Three NATS servers on loopback. The rw_nodes bucket is made by an earlier
configuration (node x, node_ttl_ms 120 s, started and stopped: a bucket's
MaxAge is whichever configuration created it), then three nodes a, b, c
run with the default heartbeat (1 s) and TTL (10 s): c runs a shell loop;
every daemon of c is killed -9 while the loop's processes live on. Nothing
reads the rw_nodes bucket meanwhile (no `runwarden cluster status`, no
listing): a or b must log c lost and end its run node_lost, in JetStream,
within the TTL and a margin. Before the fix, the survivors waited for the
server to expire c's key (here after the bucket's 120 s; in issue 35's runs,
for minutes until a listing of the bucket came); the loss is now judged by
the entry's revision staying the same for node_ttl_ms."""
import json
import os
import signal
import subprocess
import time

from rwcluster import Cluster, check_logs
from rwtest import poll

NO_SUITE = True  # the suites need the NATS cluster's ports: made here

TTL_MS = 10000
C = Cluster(heartbeat_ms=1000, node_ttl_ms=TTL_MS)
MARK = "sleep 0.2391"


def loop_pids():
    out = subprocess.run(["pgrep", "-f", MARK], capture_output=True, text=True).stdout.split()
    return [int(p) for p in out if int(p) != os.getpid()]


def test_owner_daemons_killed_sandbox_alive_is_lost_within_ttl():
    try:
        C.node_ttl_ms = 120000  # the earlier configuration makes rw_nodes
        x = C.node("x")
        C.nodes.pop("x")
        assert not x.stop(), x.log("coordinatord")[-1500:]
        x.cleanup()
        C.node_ttl_ms = TTL_MS
        a, b, c = C.node("a"), C.node("b"), C.node("c")
        run = c.start_run(f"for i in $(seq 1 2000); do echo tick$i; {MARK}; done",
                          thread="t-lost")
        events, _, _, _ = c.tail(run, thread="t-lost", limit=4, timeout=30)
        assert poll(loop_pids, timeout=10)
        # a and b have seen c beat for a while (the watcher's first puts)
        time.sleep(2)
        t0 = time.time()
        C.kill_node("c")
        assert loop_pids(), "the run's processes must outlive the node"

        def lost():
            return any("node c lost" in s.log("coordinatord") for s in (a, b))
        # the TTL, then a pass of the sweep and its look-up: 2 × TTL is
        # ample; before the fix, minutes
        assert poll(lost, timeout=2 * TTL_MS / 1000, interval=0.2), \
            ("c never declared lost", time.time() - t0, a.log("coordinatord")[-1500:])
        took = time.time() - t0
        assert took >= TTL_MS / 1000 * 0.9, ("lost before its TTL", took)

        def ended():
            log = C.jetstream_log(run)
            return log and json.loads(log[-1][1]).get("type") == "RUN_ERROR" and log
        assert poll(ended, timeout=30, interval=0.3), C.jetstream_log(run)[-2:]
        log = check_logs(C, {run: events})[run]
        assert log[-1][1]["code"] == "node_lost", log[-1]
        print(f"    c lost {took:.1f} s after its daemons died (node_ttl_ms {TTL_MS})")
    finally:
        for p in loop_pids():
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_zz_stop():
    C.stop_all()
