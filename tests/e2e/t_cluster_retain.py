# SPDX-License-Identifier: MIT
"""Issue 14: retention, the watchdog and metrics cluster-wide (docs/CLUSTER.md
"Retention", "The watchdog", "Metrics"). Three NATS JetStream servers on
loopback and two runwarden nodes:

- r prunes every terminal run at once (size retention with a 1 MiB map and a
  1 % mark): a finished run's subject disappears from JetStream and its
  record from rw_runs after its local prune; the streams' max age is the
  one the retention settings give;
- w fails a silent run with its stall watchdog (2 s): JetStream's log of the
  run is its local log, ending with the watchdog's RUN_ERROR (stalled), and
  its rw_runs record says failed/stalled;
- /metrics of a node carries the cluster's gauges and counters.

In order (one NATS cluster, two suites)."""
import json
import os
import signal
import subprocess
import time

from rwcluster import READER, Cluster, check_logs
from rwtest import poll

NO_SUITE = True  # the suites need the NATS cluster's ports: made here

C = Cluster()
stop_all = C.stop_all

# the same retention settings on both nodes: the streams' max age is
# cluster-wide (the last node to start sets it)
RETENTION = """[coordinatord]
retention_interval_ms = 200
"""
R_CONF = RETENTION + """map_size = 1M
size_retention_high_water = 1
map_warn_percent = 99
"""
W_CONF = RETENTION + """stall_timeout_ms = 2000
stall_action = kill
"""
# retention_days 30 + max_run_ms 2 h + retention_interval_ms + 1 h of slack
MAX_AGE_MS = 30 * 86400000 + 7200000 + 200 + 3600000


def test_a_pruned_run_leaves_jetstream_and_rw_runs():
    try:
        r = C.node("r", R_CONF)
        assert f"RW_RUNS: max age {MAX_AGE_MS} ms" in r.log("coordinatord"), \
            [ln for ln in r.log("coordinatord").splitlines() if "max age" in ln]
        assert f"KV_rw_runs: max age {MAX_AGE_MS} ms" in r.log("coordinatord")
        run = r.start_run("echo kept-for-now; sleep 1.5", thread="t-ret")
        # while it runs: its events are in JetStream, its record in rw_runs
        assert poll(lambda: len(C.jetstream_events(run)) >= 2, timeout=20), \
            C.jetstream_events(run)
        rec = C.run_record(run)
        assert rec and rec["status"] == "running" and rec["node"] == "r", rec
        # it ends, retention prunes it here, and the cluster's copy goes too
        assert poll(lambda: r.http("GET", f"/runs/{run}?threadId=t-ret")[0] == 404,
                    timeout=30), r.http("GET", f"/runs/{run}?threadId=t-ret")
        assert poll(lambda: C.jetstream_events(run) == [] and C.run_record(run) is None,
                    timeout=20), (C.jetstream_events(run)[-2:], C.run_record(run))
        assert "Retention: pruned" in r.log("coordinatord")
        assert poll(lambda: r.metric("runwarden_cluster_runs_purged_total") >= 1, timeout=10)
        assert r.metric("runwarden_cluster_purge_failures_total") == 0
        # the thread goes on: a new run of it starts an empty subject again
        run2 = r.start_run("echo again", thread="t-ret")
        assert poll(lambda: C.jetstream_events(run2) == [] and C.run_record(run2) is None
                    and r.http("GET", f"/runs/{run2}?threadId=t-ret")[0] == 404,
                    timeout=30), C.jetstream_events(run2)
    except Exception:
        stop_all()
        raise


def test_the_watchdogs_end_is_replicated():
    try:
        w = C.node("w", W_CONF)
        run = w.start_run("sleep 40", thread="t-stall")
        rec = w.wait_terminal(run, thread="t-stall", timeout=40)
        assert rec["status"] == "failed" and "watchdog" in rec["error"]["message"], rec
        events, _, _, _ = w.tail(run, thread="t-stall", timeout=30)
        logs = check_logs(C, {run: events})
        last = logs[run][-1][1]
        assert last["type"] == "RUN_ERROR" and last["code"] == "stalled", last
        # JetStream's log is the local log, byte for byte
        assert C.jetstream_events(run) == C.lmdb_events(w, run)
        # the shell run's tool call was open: closed before the end
        types = [ch["type"] for _, ch, _ in logs[run]]
        assert types[-2] == "TOOL_CALL_RESULT", types
        assert logs[run][-2][1]["content"].find("interrupted") >= 0, logs[run][-2]
        mirrored = poll(lambda: (lambda x: x if x and x["status"] == "failed" else None)(
            C.run_record(run)), timeout=10)
        assert mirrored and "watchdog" in mirrored["error"]["message"], C.run_record(run)
        assert mirrored["lastSeq"] == len(logs[run]) - 1, mirrored
        assert w.metric("runwarden_watchdog_kills_total") == 1
    except Exception:
        stop_all()
        raise


def test_cluster_metrics():
    try:
        r, w = C.node("r"), C.node("w")
        st, text = w.http("GET", "/metrics")
        assert st == 200, st
        text = text.decode() if isinstance(text, bytes) else str(text)
        for name in ("runwarden_cluster_ready", "runwarden_cluster_nodes_alive",
                     "runwarden_cluster_threads_owned",
                     "runwarden_cluster_runs_taken_over_total",
                     "runwarden_cluster_runs_fenced_total",
                     "runwarden_cluster_replication_failures_total",
                     "runwarden_cluster_runs_purged_total",
                     "runwarden_cluster_purge_failures_total",
                     "runwarden_cluster_publish_seconds_count"):
            assert f"# TYPE {name.replace('_count', '')} " in text, name
        assert 'runwarden_cluster_publish_seconds_bucket{le="+Inf"}' in text
        assert w.metric("runwarden_cluster_ready") == 1
        assert poll(lambda: w.metric("runwarden_cluster_nodes_alive") == 2, timeout=10), \
            w.metric("runwarden_cluster_nodes_alive")
        assert w.metric("runwarden_cluster_threads_owned") >= 1  # t-stall
        n = w.metric("runwarden_cluster_publish_seconds_count")
        assert n >= 2, n  # the stalled run's batches, each acknowledged
        assert w.metric("runwarden_cluster_publish_seconds_sum") > 0
        assert w.metric("runwarden_cluster_runs_fenced_total") == 0
        assert w.metric("runwarden_cluster_replication_failures_total") == 0
        assert w.metric("runwarden_cluster_runs_taken_over_total") == 0
        assert r.metric("runwarden_cluster_nodes_alive") == 2
    finally:
        stop_all()


def nats_signal(sig):
    for f in os.listdir(C.dir):
        if f.endswith(".pid"):
            with open(os.path.join(C.dir, f)) as fp:
                os.kill(int(fp.read().strip()), sig)


def test_a_stop_waits_for_publishes_in_flight_boundedly():
    """SIGTERM waits for what the cluster has not acknowledged yet — at most
    3 s, then says so — and what it left is published after the restart."""
    try:
        d = C.node("d")
        run = d.start_run("for i in $(seq 1 400); do echo line$i; sleep 0.01; done",
                          thread="t-drain")
        assert poll(lambda: len(C.jetstream_log(run)) >= 5, timeout=20)
        nats_signal(signal.SIGSTOP)  # nothing is acknowledged any more
        try:
            time.sleep(0.5)  # a few commits wait for JetStream
            t0 = time.time()
            d.kill("coordinatord", signal.SIGTERM)
            took = time.time() - t0
        finally:
            nats_signal(signal.SIGCONT)
        assert 2.5 <= took <= 9, took
        assert "not acknowledged by the cluster within 3000 ms" in d.log("coordinatord"), \
            d.log("coordinatord")[-2000:]
        d.start_daemon("coordinatord")
        # routerd reconnects with backoff; until then it answers 503
        assert poll(lambda: d.http("GET", "/readyz")[0] == 200, timeout=30), \
            d.log("coordinatord")[-2000:]
        rec = d.wait_terminal(run, thread="t-drain", timeout=60)
        assert rec["status"] == "completed", rec
        check_logs(C, {run: []})
    finally:
        stop_all()


def test_a_run_that_ended_unreplicated_is_published_at_start():
    """A run that ended here but whose events the cluster lacks (its owner
    died before their acknowledgement; here: purged from the cluster while
    the node was down) is published by the node's next start."""
    try:
        e = C.node("e")
        # two commits at least: the republished events (one message) can
        # never carry the Msg-Id of a message the stream saw before the purge
        # (it keeps those ids for its duplicate window)
        run = e.start_run("echo one; sleep 0.3; echo two", thread="t-start")
        rec = e.wait_terminal(run, thread="t-start", timeout=30)
        assert rec["status"] == "completed", rec
        local = C.lmdb_events(e, run)
        assert poll(lambda: len(C.jetstream_log(run)) == len(local), timeout=20)
        e.kill("coordinatord", signal.SIGTERM)
        out = subprocess.run([READER, C.nats(), run, "purge"], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0, out.stderr
        assert C.jetstream_log(run) == []
        e.start_daemon("coordinatord")
        assert poll(lambda: C.jetstream_events(run) == local, timeout=30), \
            (C.jetstream_events(run), local, e.log("coordinatord")[-2000:])
        assert "its end is not in the cluster; publishing it" in e.log("coordinatord")
        assert poll(lambda: (C.run_record(run) or {}).get("status") == "completed", timeout=20)
        assert poll(lambda: e.http("GET", "/readyz")[0] == 200, timeout=30)
        check_logs(C, {run: []})
    finally:
        stop_all()
