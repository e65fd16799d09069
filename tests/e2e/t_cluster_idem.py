# SPDX-License-Identifier: MIT
"""Issue 35 F: one run per Idempotency-Key across the cluster
(docs/CLUSTER.md "Idempotency keys across owners"). Three NATS servers on
loopback and three nodes a, b, c:

- a keyed run posted through c (c claims the thread) completes; every
  daemon of c is killed -9; a or b takes the thread over; the same key
  posted through a and through b answers c's run, and no second run is
  made (before: the new owner's log did not know the key, a second run);
- one key posted through a and b at once on a new thread: one run id;
- a key whose rw_idem entry names a run that never started (a create
  whose answer was lost: the POST was refused, the entry stored all the
  same) starts that run when the key is posted again; before, the POST
  answered 202 with its id and the run never existed (404 for good);
- (single host) a POST /runs coordinatord does not answer within routerd's
  coord_timeout_ms (stopped, SIGSTOP) is 503 outcome_unknown, not a
  failure: the run does start once coordinatord goes on, and the key
  answers it."""
import hashlib
import signal
import subprocess
import threading
import time

import rwtest
from rwcluster import READER, Cluster
from rwtest import poll

NO_SUITE = True  # the suites need the NATS cluster's ports: made here

TTL_MS = 3000
C = Cluster(heartbeat_ms=500, node_ttl_ms=TTL_MS)


def post(s, thread, key, cmd="echo keyed"):
    return s.http("POST", "/runs", {"threadId": thread, "messages": [
        {"role": "user", "content": cmd}]}, {"Idempotency-Key": key})


def test_key_reposted_after_a_takeover_answers_the_first_run():
    a, b, c = C.node("a"), C.node("b"), C.node("c")
    st, body = post(c, "t-idem", "k-takeover")
    assert st == 202, (st, body)
    first = body["runId"]
    assert c.wait_terminal(first, thread="t-idem")["status"] == "completed"
    st, again = post(c, "t-idem", "k-takeover")
    assert st == 202 and again["runId"] == first, (st, again)
    C.kill_node("c")

    def taken():
        return any("Thread taken over from lost node c" in s.log("coordinatord") and
                   "t-idem" in s.log("coordinatord") for s in (a, b))
    assert poll(taken, timeout=TTL_MS / 1000 + 30, interval=0.3), a.log("coordinatord")[-1500:]
    for s in (a, b):
        st, body = post(s, "t-idem", "k-takeover")
        assert st == 202 and body["runId"] == first, ("a second run for the key", st, body)
    # nothing new on the thread: its runs are c's one
    st, lst = a.http("GET", "/threads/t-idem/runs")
    assert st == 200, (st, lst)
    ids = {r["runId"] for r in (lst.get("runs", lst) if isinstance(lst, dict) else lst)}
    assert ids <= {first}, ids
    # a new key on the taken thread makes a new run, once
    st, body = post(a, "t-idem", "k-new")
    assert st == 202 and body["runId"] != first, (st, body)
    st, body2 = post(b, "t-idem", "k-new")
    assert st == 202 and body2["runId"] == body["runId"], (body, body2)


def test_one_key_through_two_nodes_at_once_is_one_run():
    a, b = C.node("a"), C.node("b")
    for n in range(3):
        out = [None, None]

        def go(i, s):
            out[i] = post(s, f"t-race{n}", f"k-race{n}")
        ts = [threading.Thread(target=go, args=(i, s)) for i, s in enumerate((a, b))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert [o[0] for o in out] == [202, 202], out
        assert out[0][1]["runId"] == out[1][1]["runId"], out


def test_key_of_a_run_that_never_started_starts_it():
    a = C.node("a")
    thread, key, run = "t-spent", "k-spent", "0badcafe-0000-4000-8000-00000000beef"
    h = hashlib.sha256(thread.encode() + b"\0" + key.encode()).hexdigest()
    out = subprocess.run([READER, C.nats(), h, "idem", run], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    st, body = post(a, thread, key)
    assert st == 202 and body["runId"] == run, (st, body)
    rec = a.wait_terminal(run, thread=thread)
    assert rec["status"] == "completed", rec
    st, again = post(a, thread, key)
    assert st == 202 and again["runId"] == run, (st, again)
    st, lst = a.http("GET", f"/threads/{thread}/runs")
    runs = lst.get("runs", lst) if isinstance(lst, dict) else lst
    assert [r["runId"] for r in runs] == [run], runs


def test_unanswered_start_is_outcome_unknown():
    s = rwtest.Suite("[routerd]\ncoord_timeout_ms = 1000\n").start()
    try:
        s.expected_errors = [r"RUN_START not answered"]
        s.procs["coordinatord"].send_signal(signal.SIGSTOP)
        try:
            st, body = post(s, "t-unknown", "k-unknown")
        finally:
            s.procs["coordinatord"].send_signal(signal.SIGCONT)
        assert st == 503 and body["code"] == "outcome_unknown", (st, body)

        def listed():
            st, lst = s.http("GET", "/threads/t-unknown/runs")
            runs = lst.get("runs", lst) if isinstance(lst, dict) else lst
            return st == 200 and [r["runId"] for r in runs]
        ran = poll(listed, timeout=10)
        assert ran and len(ran) == 1, ran  # it did start: "unknown" was right
        st, body = post(s, "t-unknown", "k-unknown")
        assert st == 202 and body["runId"] == ran[0], (st, body, ran)
    finally:
        problems = s.stop()
        s.cleanup()
    assert not problems, problems


def test_zz_stop():
    C.stop_all()
