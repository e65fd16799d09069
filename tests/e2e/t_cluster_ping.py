# SPDX-License-Identifier: MIT
"""Issue 35, B: a node leaves a silent NATS server (docs/CLUSTER.md,
"Connections"). Two nodes a and b on a three-server cluster (TTL 15 s,
heartbeats every second). The server a's heartbeat connection is on is
stopped (SIGSTOP: its sockets stay open and nothing is answered, as a server
cut off by the network):

- both of a's connections (the main one and the heartbeat's) leave it for
  another server of the list within a few ping intervals ([cluster]
  ping_interval_ms, by default node_ttl_ms / (2 × (max_pings_out + 1)));
- a is not declared lost (past the TTL since the stop), keeps its thread,
  and its next run completes.

Without client pings (libnats' default: every 2 minutes) a stayed on the
stopped server and b declared it lost at the TTL."""
import time

from rwcluster import Cluster
from rwtest import poll

NO_SUITE = True  # the suites need the NATS cluster's ports: made here

TTL_MS = 15000
C = Cluster(servers=3, heartbeat_ms=1000, node_ttl_ms=TTL_MS)


def test_a_silent_server_is_left_and_the_node_is_not_lost():
    paused = None
    try:
        a, b = C.node("a"), C.node("b")
        run = a.start_run("echo before", thread="t-ping")
        assert a.wait_terminal(run, thread="t-ping")["status"] == "completed"
        paused = poll(lambda: C.server_of("a.heartbeat"), timeout=10)
        main = C.server_of("a")
        assert paused and main, (paused, main)
        log_at = len(b.log("coordinatord"))
        t0 = time.monotonic()
        C.pause_nats(paused)
        others = [f"n{i}" for i in (1, 2, 3) if f"n{i}" != paused]

        def moved():
            on = {n: C.connections(n) or [] for n in others}
            return all(any(c in v for v in on.values()) for c in ("a", "a.heartbeat"))

        # detection: (max_pings_out + 1) pings of 2.5 s; then a reconnect
        assert poll(moved, timeout=TTL_MS / 1000, interval=0.5), \
            ("a did not leave the silent server", paused,
             {n: C.connections(n) for n in others})
        took = time.monotonic() - t0
        print(f"a left the silent server {paused} in {took:.1f} s (TTL {TTL_MS} ms)")
        # past the TTL since the stop: b declared nothing lost
        time.sleep(max(0.0, TTL_MS / 1000 + 2 - (time.monotonic() - t0)))
        since = b.log("coordinatord")[log_at:]
        assert "node a lost" not in since, [
            ln for ln in since.splitlines() if "luster" in ln or "lost" in ln][:40]
        assert C.owner("t-ping", "b") == "a"
        run = a.start_run("echo after", thread="t-ping")
        assert a.wait_terminal(run, thread="t-ping", timeout=60)["status"] == "completed"
    finally:
        if paused:
            C.resume_nats(paused)
        C.stop_all()
