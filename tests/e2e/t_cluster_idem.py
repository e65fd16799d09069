# SPDX-License-Identifier: MIT
"""Issue 35 F: one run per Idempotency-Key across the cluster
(docs/CLUSTER.md "Idempotency keys across owners"). Three NATS servers on
loopback and three nodes a, b, c:

- a keyed run posted through c (c claims the thread) completes; every
  daemon of c is killed -9; a or b takes the thread over; the same key
  posted through a and through b answers c's run, and no second run is
  made (before: the new owner's log did not know the key, a second run);
- one key posted through a and b at once on a new thread: one run id."""
import threading
import time

from rwcluster import Cluster
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


def test_zz_stop():
    C.stop_all()
