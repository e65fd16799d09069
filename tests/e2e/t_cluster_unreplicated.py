# SPDX-License-Identifier: MIT
"""Issue 35 H: a run that failed here because the cluster did not
acknowledge its events (replication_failed: JetStream silent past the
publish deadline) while this node stays alive is ended in the cluster too,
once JetStream answers again — a RUN_ERROR replication_failed after the
cluster's last event of it, and its record in rw_runs. Before, the
cluster's copy of the run stayed open for good: rw_runs and every other
node said `running` (the nemesis' `converge` and `terminal` checks, with
nats-server 2.15.1, flap).

Three NATS servers on loopback, two nodes with a TTL far above the pause (no
node is lost meanwhile: nobody else may end the run). A direct-log run on a
gets three events acknowledged; then every server is stopped (SIGSTOP) past
the publish deadline (30 s), and an append waits for its acknowledgement
until a fails the run locally; the servers go on; the run's end must reach
JetStream and rw_runs, and b must read it ended."""
import json
import os
import threading
import time

from ipc import Ipc, IpcError, append_value
from rwcluster import Cluster, coord_call
from rwtest import poll

NO_SUITE = True  # the suites need the NATS cluster's ports: made here

C = Cluster(heartbeat_ms=500, node_ttl_ms=300000)
SERVERS = ("n1", "n2", "n3")


def test_run_failed_unreplicated_is_ended_in_the_cluster():
    paused = False
    try:
        a, b = C.node("a"), C.node("b")
        a.expected_errors += [r"did not acknowledge", r"Run failed", r"could not be replicated",
                              r"heartbeat"]
        b.expected_errors += [r"heartbeat"]
        run = coord_call(a, "RUN_OPEN", {"thread_id": "t-unrepl"})["run_id"]
        c = Ipc(os.path.join(a.dir, "run", "coordinatord.sock"), timeout=90)
        for i in range(3):
            append_value(c, run, i)
        assert poll(lambda: len(C.jetstream_events(run)) == 3, timeout=20)
        for s in SERVERS:
            C.pause_nats(s)
        paused = True
        got = {}

        def append():
            try:
                got["reply"] = append_value(c, run, 3)
            except (IpcError, OSError) as e:
                got["error"] = e
        t = threading.Thread(target=append, daemon=True)
        t.start()

        def failed():
            rec = C.local_record(a, run)
            return rec and rec["status"] == "failed" and rec
        rec = poll(failed, timeout=60, interval=0.5)
        assert rec and rec["error"]["code"] == "replication_failed", \
            (rec, a.log("coordinatord")[-1500:])
        t.join(30)
        assert "error" in got, got  # never acknowledged
        t0 = time.time()
        for s in SERVERS:
            C.resume_nats(s)
        paused = False

        def ended_in_cluster():
            try:  # JetStream may say "temporarily unavailable" for a while
                r = C.run_record(run)
                log = C.jetstream_log(run)
            except AssertionError:
                return None
            if not r or r.get("status") != "failed" or not log:
                return None
            last = json.loads(log[-1][1])
            return last.get("type") == "RUN_ERROR" and (r, log)
        out = poll(ended_in_cluster, timeout=45, interval=0.5)
        assert out, (C.run_record(run), C.jetstream_log(run)[-2:], a.log("coordinatord")[-2000:])
        r, log = out
        assert r["error"]["code"] == "replication_failed" and r["node"] == "a", r
        last = json.loads(log[-1][1])
        assert last["code"] == "replication_failed", last
        # one terminal event, the last, seqs gap-free
        seqs = [q for q, _, _ in log]
        assert seqs == list(range(len(seqs))), seqs
        terminals = [q for q, e, _ in log if json.loads(e).get("type") in ("RUN_FINISHED", "RUN_ERROR")]
        assert terminals == [seqs[-1]], terminals
        # the other node reads it ended (RUN_OPEN claims no thread: no GET by thread)
        body = coord_call(b, "RUN_READ", {"run_id": run, "from_seq": -1, "max": 1000})
        rb = json.loads(body["record"])
        assert rb["status"] == "failed" and rb["lastSeq"] == seqs[-1], rb
        assert json.loads(body["events"][-1])["code"] == "replication_failed", body["events"]
        print(f"    the run's end in the cluster {time.time() - t0:.1f} s after JetStream "
              f"answered again")
        c.close()
    finally:
        if paused:
            for s in SERVERS:
                C.resume_nats(s)
        C.stop_all()

