# SPDX-License-Identifier: MIT
"""Issue 14: cluster mode wired into coordinatord (docs/CLUSTER.md). A
three-server NATS JetStream cluster on loopback (tests/cluster/natscluster.py)
and two runwarden nodes pointing at it:

- a run's events in JetStream are exactly its log in LMDB (same seqs, same
  bytes), read back with tests/cluster/rw-cluster-read;
- a second node forwards a run of a thread the first owns to it;
- a run another writer took over in JetStream is fenced: its processes are
  stopped and it is failed locally (code fenced), and JetStream's log of it
  ends with the other writer's event;
- with every NATS server stopped, /readyz fails and a new run is refused.

The tests build on each other (one NATS cluster, two suites), in order."""
import json
import os
import subprocess
import time

import rwtest
from ipc import Ipc, IpcError, append_value
from rwcluster import READER, Cluster, coord_call
from rwtest import poll

NO_SUITE = True  # the suites need the NATS cluster's ports: made here

C = Cluster()
node = C.node
stop_all = C.stop_all
nats = C.nats
jetstream_events = C.jetstream_events
lmdb_events = C.lmdb_events


def test_events_in_jetstream_are_the_runs_log():
    try:
        a = node("a")
        st_, ready = a.http("GET", "/readyz")
        assert st_ == 200, ready
        t0 = time.time()
        run = a.start_run("for i in 1 2 3 4 5; do echo line$i; done", thread="t-js")
        events, status, _, _ = a.tail(run, thread="t-js", timeout=30)
        assert status["status"] == "completed", status
        rwtest.assert_gapfree(events)
        local = lmdb_events(a, run)
        assert local[0][0] == 0 and len(local) == len(events), (local[:2], len(events))
        # a direct get may be answered by a replica a moment behind the
        # acknowledgement (docs/CLUSTER.md "Reading a run's events")
        remote = poll(lambda: (lambda r: r if len(r) >= len(local) else None)(jetstream_events(run)),
                      timeout=5) or jetstream_events(run)
        assert [q for q, _ in remote] == [q for q, _ in local], (remote, local)
        for (q, rb), (_, lb) in zip(remote, local):
            assert rb == lb, (q, rb, lb)
        assert time.time() - t0 < 60
    except Exception:
        stop_all()
        raise


def test_second_node_forwards_a_thread_the_first_owns():
    try:
        b = node("b")
        # a's thread through b: forwarded to a, where it runs (t_cluster_routes
        # covers the routes; this is the behaviour that replaced 409 not_owner)
        run = b.start_run("echo x", thread="t-js")
        rec = b.wait_terminal(run, thread="t-js")
        assert rec["status"] == "completed", rec
        assert C.local_record(C.nodes["a"], run), "the run did not run on a"
        # the tenant routerd named (b's) is in the record on the owner and in rw_runs
        assert C.local_record(C.nodes["a"], run)["tenant"] == "default"
        assert poll(lambda: (C.run_record(run) or {}).get("tenant") == "default", timeout=10)
        # a thread of its own is b's
        run = b.start_run("echo mine", thread="t-b")
        _, status, _, _ = b.tail(run, thread="t-b", timeout=30)
        assert status["status"] == "completed", status
        # and b's thread through a runs on b
        run = C.nodes["a"].start_run("echo x", thread="t-b")
        assert C.nodes["a"].wait_terminal(run, thread="t-b")["status"] == "completed"
        assert C.local_record(b, run) and not C.local_record(C.nodes["a"], run)
    except Exception:
        stop_all()
        raise


def host_procs(marker):
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [p for p in out if int(p) != os.getpid()]


def test_a_fenced_run_is_stopped_and_failed_here():
    try:
        a = node("a")
        run = a.start_run("while :; do echo tick; sleep 0.217; done", thread="t-fence")
        assert poll(lambda: len(jetstream_events(run)) >= 3, timeout=20), jetstream_events(run)
        assert poll(lambda: host_procs("sleep 0.217"), timeout=5), \
            ("the run's command is not running", a.http("GET", f"/runs/{run}?threadId=t-fence"))
        # another writer appends to the run, as a new owner would
        stolen = None
        for _ in range(5):
            out = subprocess.run([READER, nats(), run, "steal"], capture_output=True, text=True,
                                 timeout=30)
            if out.returncode == 0:
                stolen = int(out.stdout.strip())
                break
        assert stolen is not None, out.stderr
        assert poll(lambda: "Run fenced" in a.log("coordinatord"), timeout=10), \
            a.log("coordinatord")[-2000:]
        assert poll(lambda: not host_procs("sleep 0.217"), timeout=10), "its processes live on"
        # the local end is a local diagnostic (a tool's RUN_GET); through the
        # API the run is the cluster's (issue 35, A): up to the stolen seq
        loc = C.local_record(a, run)
        assert loc["status"] == "failed" and loc["error"]["code"] == "fenced", loc
        code, rec = a.http("GET", f"/runs/{run}?threadId=t-fence")
        assert code == 200 and rec["lastSeq"] == stolen, (code, rec, stolen)
        assert rec.get("error", {}).get("code") != "fenced", rec
        # JetStream's log: one writer after the steal, gap-free
        remote = poll(lambda: (lambda r: r if r and r[-1][0] >= stolen else None)(jetstream_events(run)),
                      timeout=5) or jetstream_events(run)
        assert [q for q, _ in remote] == list(range(len(remote))), remote
        assert remote[-1][0] == stolen and b"rw.test.steal" in remote[-1][1], remote[-1]
    except Exception:
        stop_all()
        raise


def test_a_fenced_direct_log_run_refuses_its_next_append():
    """A direct-log client's append goes to JetStream while its commit is
    flushed; when another writer moved the run meanwhile, JetStream refuses
    it: the client gets not_owner, the run is failed here (fenced), and the
    cluster's log is the other writer's, without the refused event."""
    try:
        a = node("a")
        run = coord_call(a, "RUN_OPEN", {"thread_id": "t-fence-log"})["run_id"]
        c = Ipc(os.path.join(a.dir, "run", "coordinatord.sock"))
        for i in range(3):
            append_value(c, run, i)
        assert poll(lambda: len(jetstream_events(run)) == 3, timeout=20)
        out = subprocess.run([READER, nats(), run, "steal"], capture_output=True, text=True,
                             timeout=30)
        assert out.returncode == 0, out.stderr
        stolen = int(out.stdout.strip())
        try:
            append_value(c, run, 3)
            raise AssertionError("an append refused by JetStream was acknowledged")
        except IpcError as e:
            assert e.reason == "not_owner", e
        finally:
            c.close()
        assert "Run fenced" in a.log("coordinatord")
        rec = C.local_record(a, run)
        assert rec["status"] == "failed" and rec["error"]["code"] == "fenced", rec
        remote = jetstream_events(run)
        assert [q for q, _ in remote] == [0, 1, 2, 3] and stolen == 3, remote
        assert b"rw.test.steal" in remote[-1][1], remote[-1]
    except Exception:
        stop_all()
        raise


def test_a_fenced_run_is_read_from_the_cluster():
    """Issue 35, A: a run fenced here is read through this node from
    JetStream — RUN_READ, RUN_GET of its thread, and a watch that was on it
    when it was fenced — never from the local log, whose refused event and
    local RUN_ERROR fenced are another history than the cluster's."""
    try:
        a = node("a")
        th = "t-fence-read"
        run = coord_call(a, "RUN_OPEN", {"thread_id": th})["run_id"]
        c = Ipc(os.path.join(a.dir, "run", "coordinatord.sock"))
        watcher = Ipc(os.path.join(a.dir, "run", "coordinatord.sock"))
        try:
            watcher.call("RUN_WATCH", {"run_id": run, "thread_id": th})
            for i in range(3):
                append_value(c, run, i)
            assert poll(lambda: len(jetstream_events(run)) == 3, timeout=20)
            out = subprocess.run([READER, nats(), run, "steal"], capture_output=True,
                                 text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            try:
                append_value(c, run, 3)
                raise AssertionError("an append refused by JetStream was acknowledged")
            except IpcError as e:
                assert e.reason == "not_owner", e
            # the local log: the refused event at 3, its local end at 4
            local = C.local_record(a, run)
            assert local["error"]["code"] == "fenced" and local["lastSeq"] == 4, local
            # reads through a: the cluster's history (the stealer's event at 3)
            body = coord_call(a, "RUN_READ", {"run_id": run, "thread_id": th,
                                              "from_seq": -1, "max": 100})
            evs = [e.encode() if isinstance(e, str) else e for e in body["events"]]
            assert len(evs) == 4 and b"rw.test.steal" in evs[3], evs
            assert json.loads(body["record"])["lastSeq"] == 3, body["record"]
            rec = json.loads(coord_call(a, "RUN_GET", {"run_id": run,
                                                      "thread_id": th})["record"])
            assert rec["lastSeq"] == 3 and rec.get("error", {}).get("code") != "fenced", rec
            # the watch that was on it: events 0..2, then the stealer's 3, and
            # never the local fenced end
            def pushed():
                watcher.sock.settimeout(0.5)
                try:
                    while True:
                        t, rid, b = watcher.recv()
                        watcher.pushes.append((t, rid, b))
                except (TimeoutError, OSError):
                    pass
                seen = {}
                for _, _, b in watcher.pushes:
                    if isinstance(b, dict) and "events" in b:
                        for k, e in enumerate(b["events"]):
                            seen[b["first_seq"] + k] = e.encode() if isinstance(e, str) else e
                return seen if 3 in seen else None
            seen = poll(pushed, timeout=15) or pushed() or {}
            assert sorted(seen) == [0, 1, 2, 3], seen
            assert b"rw.test.steal" in seen[3] and b"fenced" not in seen[3], seen
        finally:
            c.close()
            watcher.close()
    except Exception:
        stop_all()
        raise


def test_a_run_finished_here_then_fenced_is_read_from_the_cluster():
    """Issue 35, A (the nemesis, owner-cut with aggressive server pings): a
    node ends its run (RUN_FINISH completed) after another node wrote the
    run in the cluster: the finish's publish is refused, the local record
    keeps its first terminal status (completed, not fenced), and reads of
    the run through the node gave its local RUN_FINISHED where the cluster
    has the other writer's event. They are the cluster's now."""
    try:
        a = node("a")
        th = "t-finish-fenced"
        run = coord_call(a, "RUN_OPEN", {"thread_id": th})["run_id"]
        c = Ipc(os.path.join(a.dir, "run", "coordinatord.sock"))
        try:
            for i in range(3):
                append_value(c, run, i)
            assert poll(lambda: len(jetstream_events(run)) == 3, timeout=20)
            out = subprocess.run([READER, nats(), run, "steal"], capture_output=True,
                                 text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            try:
                c.call("RUN_FINISH", {"run_id": run, "status": "completed"})
            except IpcError:
                pass  # refused or not: the local commit came first
            assert poll(lambda: "Run fenced" in a.log("coordinatord") and
                        run in a.log("coordinatord"), timeout=20)
            local = C.local_record(a, run)
            assert local["status"] == "completed" and local["lastSeq"] == 3, local
            body = coord_call(a, "RUN_READ", {"run_id": run, "thread_id": th,
                                              "from_seq": -1, "max": 100})
            evs = [e.encode() if isinstance(e, str) else e for e in body["events"]]
            assert len(evs) == 4 and b"rw.test.steal" in evs[3], evs
        finally:
            c.close()
    except Exception:
        C.stop_all()
        raise


def test_nats_down_readyz_fails_and_runs_are_refused():
    try:
        a = node("a")
        C.stop_nats()
        assert poll(lambda: a.http("GET", "/readyz")[0] == 503, timeout=15), "/readyz stayed 200"
        code, body = a.http("GET", "/readyz")
        assert code == 503 and "cluster" in json.dumps(body), (code, body, a.log("routerd")[-3000:])
        code, body = a.http("POST", "/runs", {"threadId": "t-new", "messages": [
            {"role": "user", "content": "echo never"}]})
        assert code == 503, (code, body)
        assert "cluster" in json.dumps(body), body
    finally:
        stop_all()
