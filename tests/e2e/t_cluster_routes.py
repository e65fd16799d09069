# SPDX-License-Identifier: MIT
"""Issue 14: any node's routerd serves every route for every thread
(docs/CLUSTER.md "Forwarding" and "Reading runs other nodes own"). A
three-server NATS JetStream cluster and three runwarden nodes a, b, c
(rwcluster.Cluster):

- a run started through a, tailed over WebSocket through a, b and c at once:
  the same events with the same seqs; a tail through b dropped after a few
  events resumes with lastSeq; SSE through c gives the same events;
- a run posted through b for a thread a owns runs on a (forwarded); its GET
  through c is a's record; a cancel through c stops it; files PUT and GET
  through b land in a's workspace (past NATS's max_payload: 413 too_large);
  a snapshot through c and a restore through b are a's shim's answers;
- b and c race to claim one new thread through their routerds, again and
  again: exactly one of them claims it each time, and both requests are
  served;
- a node lost (kill -9 of every daemon): its threads are listed by GET
  /threads, and their runs by GET /threads/{id}/runs (with the status
  filter, read by id and tailed from a lastSeq) through every node, also
  after the taker's coordinatord restarted and after the thread's next run;
- a's coordinatord stopped (SIGSTOP): a forwarded request answers 503
  owner_unreachable within the forwarding timeout, nothing crashes; after
  SIGCONT the same request works;
- the owner's own reads show nothing JetStream has not acknowledged (NATS
  stopped under a running run: its log grows, its reads do not).

The tests build on each other (one NATS cluster, three suites), in order."""
import json
import os
import re
import signal
import subprocess
import threading
import time

from rwcluster import Cluster, coord_call
from rwtest import assert_gapfree, poll, stdout_text
from t_chat import body_for, post_chat, sse_events
from t_files import jreq, req, workspace
from t_router_sse import sse_open, sse_read

NO_SUITE = True  # the suites need the NATS cluster's ports: made here

# node_ttl_ms well above the SIGSTOP below (another node could otherwise see
# a lost and take its threads: not what this module tests)
C = Cluster(node_ttl_ms=15000)
node = C.node
stop_all = C.stop_all

SLOW = "for i in $(seq 1 30); do echo line$i; sleep 0.05; done"


local_run = C.local_record


def in_parallel(*fns):
    out = [None] * len(fns)
    errs = []

    def go(i, fn):
        try:
            out[i] = fn()
        except Exception as e:  # re-raised below
            errs.append(e)

    ts = [threading.Thread(target=go, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    if errs:
        raise errs[0]
    return out



def kill_node_and_its_loop(node, mark):
    """Every daemon of node killed -9, and its run's shell loop and sleep
    (matched by mark in their command line: not the node's children, they
    outlive it)."""
    C.kill_node(node)
    for pid in subprocess.run(["pgrep", "-f", mark], capture_output=True,
                              text=True).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass

def test_a_run_through_a_is_tailed_through_a_b_and_c():
    try:
        # c: the SSE helper's Host is "x"
        a, b, c = node("a"), node("b"), node("c", "[routerd]\nserver_names = x\n")
        run = a.start_run(SLOW, thread="t-tail")
        # live: three tails at once while the run writes
        ta, tb, tc = in_parallel(lambda: a.tail(run, thread="t-tail", timeout=60),
                                 lambda: b.tail(run, thread="t-tail", timeout=60),
                                 lambda: c.tail(run, thread="t-tail", timeout=60))
        for events, status, code, _ in (ta, tb, tc):
            assert code == 1000 and status["status"] == "completed", (code, status)
            assert_gapfree(events)
        assert stdout_text(ta[0]) == "".join(f"line{i}\n" for i in range(1, 31))
        assert tb[0] == ta[0] and tc[0] == ta[0], "the nodes' tails differ"
        assert tb[1]["lastSeq"] == ta[1]["lastSeq"] == len(ta[0]) - 1, (tb[1], ta[1])
        full = ta[0]
        # a tail through b dropped after 5 events resumes with lastSeq
        part, _, _, _ = b.tail(run, thread="t-tail", limit=5)
        assert part == full[:5]
        rest, status, code, _ = b.tail(run, thread="t-tail", last_seq=4)
        assert code == 1000 and status["status"] == "completed", (code, status)
        assert part + rest == full
        # SSE through c
        conn = sse_open(c, f"/runs/{run}/stream?threadId=t-tail")
        head, evs, eof, _ = sse_read(conn)
        conn.close()
        assert head.startswith("HTTP/1.1 200") and eof, head
        data = [d for _, ev, d, _ in evs if ev is None]
        assert data == full, "SSE through c differs"
        assert evs[-1][1] == "status" and evs[-1][2]["record"]["status"] == "completed", evs[-1]
        # the run is a's alone; another thread's token sees nothing of it through c
        assert local_run(a, run) and not local_run(b, run) and not local_run(c, run)
        conn = sse_open(c, f"/runs/{run}/stream?threadId=t-other")
        head, _, _, _ = sse_read(conn)
        conn.close()
        assert head.startswith("HTTP/1.1 404"), head
    except Exception:
        stop_all()
        raise


def test_a_run_posted_through_b_runs_on_the_owner():
    try:
        a, b, c = node("a"), node("b"), node("c")
        first = a.start_run("echo claim", thread="t-own")  # a owns t-own
        a.wait_terminal(first, thread="t-own")
        run = b.start_run("echo through-b", thread="t-own")
        rec = c.wait_terminal(run, thread="t-own")
        assert rec["status"] == "completed", rec
        assert local_run(a, run) and not local_run(b, run), "the run did not run on a"
        st, arec = a.http("GET", f"/runs/{run}?threadId=t-own")
        assert st == 200 and arec == rec, (arec, rec)
        events, status, _, _ = c.tail(run, thread="t-own")
        assert stdout_text(events) == "through-b\n" and status["status"] == "completed"
        # tailed through b or c the moment b's POST returns: the run may not
        # have an event in the stream yet (its RUN_START was answered first;
        # a race bench/cluster-routes-bench.py hit once in 40, not reliably
        # reproduced here)
        for i in range(8):
            quick = b.start_run(f"echo quick{i}", thread="t-own")
            events, status, code, reason = (b, c)[i % 2].tail(quick, thread="t-own")
            assert code == 1000 and status["status"] == "completed", (i, code, reason)
            assert stdout_text(events) == f"quick{i}\n"
        # the thread's runs through c are a's
        st, runs = c.http("GET", "/threads/t-own/runs")
        assert st == 200, (st, runs)
        # cancel through c stops it on a
        long = b.start_run("sleep 31.77", thread="t-own")
        assert poll(lambda: subprocess.run(["pgrep", "-f", "sleep 31.77"],
                                           capture_output=True).returncode == 0, timeout=20)
        st, body = c.http("POST", f"/runs/{long}/cancel?threadId=t-own")
        assert st in (200, 202), (st, body)
        rec = b.wait_terminal(long, thread="t-own", timeout=20)
        assert rec["status"] == "aborted", rec
        assert poll(lambda: subprocess.run(["pgrep", "-f", "sleep 31.77"],
                                           capture_output=True).returncode != 0, timeout=10)
        # files through b are a's workspace's
        st, js = jreq(b, "PUT", "/threads/t-own/files/through-b.txt", b"hello from b\n")
        assert st == 201, (st, js)
        st, _, data = req(b, "GET", "/threads/t-own/files/through-b.txt")
        assert st == 200 and data == b"hello from b\n", (st, data)
        assert req(a, "GET", "/threads/t-own/files/through-b.txt")[2] == b"hello from b\n"
        with open(os.path.join(workspace(a, "t-own"), "through-b.txt"), "rb") as f:
            assert f.read() == b"hello from b\n"
        assert not os.path.exists(os.path.join(workspace(b, "t-own"), "through-b.txt"))
        # past NATS's max_payload (1 MiB here) a request or an answer is
        # refused as too large, not left to time out
        big = os.urandom(1536 * 1024)
        st, js = jreq(b, "PUT", "/threads/t-own/files/big.bin", big)
        assert st == 413 and js["code"] == "too_large", (st, js)
        assert jreq(a, "PUT", "/threads/t-own/files/big.bin", big)[0] == 201
        st, _, data = req(b, "GET", "/threads/t-own/files/big.bin")
        assert st == 413, (st, data[:200])
        assert req(a, "GET", "/threads/t-own/files/big.bin")[2] == big
        # snapshots of a's thread through c, a restore through b: a's shim's
        # answers, relayed (its errors too)
        st, body = c.http("POST", "/threads/t-own/snapshots", {"label": "through-c"})
        if st == 501:
            print("SKIP snapshot through c: coordinatord answers 501 (EOPNOTSUPP)")
        else:
            assert st == 201 and isinstance(body["snapshotId"], str), (st, body)
        st, body = b.http("POST", "/threads/t-own/restore", {"snapshotId": "not-ours"})
        assert (st == 501 or st == 400 and body["code"] == "not_a_backup_record"), (st, body)
    except Exception:
        stop_all()
        raise


def test_two_nodes_race_to_claim_a_new_thread():
    try:
        b, c = node("b"), node("c")
        t0 = time.time()
        n = 0
        while n < 100 and time.time() - t0 < 30:
            thread = f"t-race-{n}"
            path = f"/threads/{thread}/files/nothing-here"
            (sb, _, _), (sc, _, _) = in_parallel(lambda: req(b, "GET", path),
                                                 lambda: req(c, "GET", path))
            assert sb == 404 and sc == 404, (thread, sb, sc)
            n += 1
        # exactly one claim per thread, by one of the two
        claimed = {}
        for name, s in (("b", b), ("c", c)):
            for line in s.log("coordinatord").splitlines():
                if "Thread claimed for this node" in line:
                    for i in range(n):
                        if f"THREAD_ID='t-race-{i}'" in line:
                            claimed.setdefault(i, []).append(name)
        assert sorted(claimed) == list(range(n)), (n, sorted(claimed))
        assert all(len(v) == 1 for v in claimed.values()), claimed
        print(f"{n} races: b won {sum(v == ['b'] for v in claimed.values())}, "
              f"c won {sum(v == ['c'] for v in claimed.values())}")
        assert n >= 20, n
        # runs of a raced thread, through both: they run on its one owner
        for i in range(3):
            thread = f"t-race-run-{i}"
            rb, rc = in_parallel(lambda: b.start_run("echo b", thread=thread),
                                 lambda: c.start_run("echo c", thread=thread))
            owner = b if local_run(b, rb) else c
            assert local_run(owner, rb) and local_run(owner, rc), (thread, rb, rc)
            for r in (rb, rc):
                assert b.wait_terminal(r, thread=thread)["status"] == "completed"
    except Exception:
        stop_all()
        raise


def ndjson_join(s, rid):
    """GET /chat?runId=RID&offset=-1 as NDJSON through s: (status, [envelopes])."""
    st, raw = s.http("GET", f"/chat?runId={rid}&offset=-1&format=ndjson")
    if st != 200:
        return st, raw
    text = raw.decode() if isinstance(raw, bytes) else json.dumps(raw)
    return st, [json.loads(x) for x in text.splitlines() if x.strip()]


def test_chat_join_by_run_id_alone_through_any_node():
    """/chat's join names the run alone (RUN_GET any_thread): through a node
    that does not hold the run, by the /chat client's run id (an alias, asked
    of every node) and by the run's own id (its rw_runs record names the
    thread): the whole run, the same chunks as the POST's stream."""
    try:
        a, b = node("a"), node("b")
        c = node("c", "[routerd]\nserver_names = x\n")
        head, raw = post_chat(c, body_for("t-chat-join", "run-join-1", "echo j1; echo j2"),
                              {"X-Run-Id": "run-join-1"})
        assert head.startswith("HTTP/1.1 200"), head
        ev = sse_events(raw)
        run_id = ev[0][1]["runId"]
        assert local_run(c, run_id) and not local_run(a, run_id)
        assert poll(lambda: (C.run_record(run_id) or {}).get("status") == "completed",
                    timeout=10), C.run_record(run_id)
        for s in (a, b, c):
            for rid in ("run-join-1", run_id):
                st, lines = ndjson_join(s, rid)
                assert st == 200, (s.name if hasattr(s, "name") else s, rid, st, lines)
                assert [x["id"] for x in lines] == [e[0] for e in ev], (rid, lines)
                assert [x["chunk"] for x in lines] == [e[1] for e in ev], rid
        # a run that is still running, joined by its own id through b: live
        run = c.start_run(SLOW, thread="t-chat-join")
        st, lines = ndjson_join(b, run)
        assert st == 200 and lines[-1]["chunk"]["type"] == "RUN_FINISHED", (st, lines[-3:])
        assert "".join(x["chunk"].get("value", {}).get("text", "") for x in lines
                       if x["chunk"].get("name") == "process.stdout").count("line") == 30
        # unknown ids: 404 through every node (an alias no node has, a run id
        # no record has)
        for s in (a, b):
            assert s.http("GET", "/chat?runId=no-such-run&offset=-1")[0] == 404
            st, js = s.http("GET", "/chat?runId=00000000-0000-4000-8000-000000000000"
                                   "&offset=-1")
            assert st == 404, (st, js)
    except Exception:
        stop_all()
        raise


def thread_pages(s, prefix, limit):
    """Every page of GET /threads?prefix=PREFIX&limit=LIMIT through s."""
    out, cursor = [], None
    for _ in range(50):
        q = f"/threads?prefix={prefix}&limit={limit}" + (f"&cursor={cursor}" if cursor else "")
        st, js = s.http("GET", q)
        assert st == 200, (st, js)
        out.append(js["threads"])
        cursor = js["nextCursor"]
        if not cursor:
            return out
    raise AssertionError("no last page")


def test_thread_list_through_any_node_lists_every_thread():
    """THREAD_LIST (GET /threads) through any node: the threads of every
    node, newest activity first, each once with its latest run, paged."""
    try:
        a, b, c = node("a"), node("b"), node("c", "[routerd]\nserver_names = x\n")
        latest = {}
        for s, th in ((a, "t-list-a"), (b, "t-list-b"), (c, "t-list-c"), (c, "t-list-c2"),
                      (a, "t-list-a")):
            r = s.start_run(f"echo {th}", thread=th)
            assert s.wait_terminal(r, thread=th)["status"] == "completed"
            latest[th] = r
            time.sleep(0.02)  # distinct startedAt
        # a run of t-list-b posted through a runs on b (its owner): b's log
        r = a.start_run("echo again", thread="t-list-b")
        assert a.wait_terminal(r, thread="t-list-b")["status"] == "completed"
        assert local_run(b, r)
        latest["t-list-b"] = r
        order = ["t-list-b", "t-list-a", "t-list-c2", "t-list-c"]
        for s in (a, b, c):
            for limit in (1, 3, 10):
                pages = thread_pages(s, "t-list-", limit)
                items = [t for p in pages for t in p]
                assert [t["threadId"] for t in items] == order, (limit, items)
                assert all(len(p) <= limit for p in pages), pages
                for t in items:
                    assert t["latestRun"]["runId"] == latest[t["threadId"]], t
                    assert t["latestRun"]["status"] == "completed", t
        # a status filter, through a: every node's completed threads
        st, js = a.http("GET", "/threads?prefix=t-list-&status=completed")
        assert st == 200 and len(js["threads"]) == 4, js
    except Exception:
        stop_all()
        raise



def test_thread_list_lists_a_lost_nodes_threads_after_takeover():
    """A node lost (every daemon killed -9): its threads, whose runs all ran
    on it, are listed by GET /threads through every node once they are taken
    over (the taker lists them with their latest run, from rw_runs), each
    once, also after the taker's coordinatord restarted; a running run's
    entry ends failed/node_lost; the thread's next run replaces the entry.
    A /chat run's thread taken over hydrates (GET /chat?threadId=) through
    every node as before the loss: its user message from rw_inputs, its
    assistant message from the run's JetStream subject."""
    try:
        a, b, c, d = node("a"), node("b"), node("c"), node("d")
        head, _ = post_chat(d, body_for("u-gone-chat", "run-gone-chat", "echo hi"),
                            {"X-Run-Id": "run-gone-chat", "Host": f"127.0.0.1:{d.port}"})
        assert head.startswith("HTTP/1.1 200"), head
        st, chat = a.http("GET", "/chat?threadId=u-gone-chat")
        assert st == 200 and [m["role"] for m in chat["messages"]] == ["user", "assistant"], chat
        assert chat["messages"][0]["parts"] == [{"type": "text", "content": "echo hi"}], chat
        done = d.start_run("echo gone", thread="t-gone-done")
        assert d.wait_terminal(done, thread="t-gone-done")["status"] == "completed"
        time.sleep(0.02)
        run = d.start_run("for i in $(seq 1 400); do echo t$i; sleep 0.239; done",
                          thread="t-gone-run")
        events, _, _, _ = d.tail(run, thread="t-gone-run", limit=3, timeout=30)
        assert len(events) == 3, events
        order = ["t-gone-run", "t-gone-done"]
        pages = thread_pages(a, "t-gone-", 10)
        assert [t["threadId"] for p in pages for t in p] == order, pages
        kill_node_and_its_loop("d", "sleep 0.239")
        # taken over (the TTL is 15 s), the running run ended node_lost
        assert poll(lambda: (C.run_record(run) or {}).get("status") == "failed",
                    timeout=45, interval=0.5), (C.run_record(run), a.log("coordinatord")[-2000:])
        owners = {th: C.owner(th, "a") for th in order}
        assert set(owners.values()) <= {"a", "b", "c"}, owners
        latest = {"t-gone-run": run, "t-gone-done": done}
        for s in (a, b, c):
            got = poll(lambda: (lambda r: r[1] if r[0] == 200 and r[1] == chat else None)(
                s.http("GET", "/chat?threadId=u-gone-chat")), timeout=20)
            assert got, (s.http("GET", "/chat?threadId=u-gone-chat"), chat)

        def listed(s, limit):
            items = [t for p in thread_pages(s, "t-gone-", limit) for t in p]
            ok = [t["threadId"] for t in items] == order and \
                items[0]["latestRun"]["status"] == "failed"
            return ok and items
        for s in (a, b, c):
            for limit in (1, 10):
                items = poll(lambda: listed(s, limit), timeout=10)
                assert items, (limit, thread_pages(s, "t-gone-", limit))
                for t in items:
                    assert t["latestRun"]["runId"] == latest[t["threadId"]], t
                assert items[0]["latestRun"]["error"]["code"] == "node_lost", items[0]
                assert items[1]["latestRun"]["status"] == "completed", items[1]
        st, js = b.http("GET", "/threads?prefix=t-gone-&status=failed")
        assert st == 200 and [t["threadId"] for t in js["threads"]] == ["t-gone-run"], js
        st, js = c.http("GET", "/threads?prefix=t-gone-&status=running")
        assert st == 200 and js["threads"] == [], js
        # the taker's coordinatord killed -9 and restarted (its key does not
        # expire): it still lists them (kept in its state dir)
        o = C.nodes[owners["t-gone-run"]]
        o.kill("coordinatord", signal.SIGKILL)
        o.start_daemon("coordinatord")
        assert poll(lambda: o.http("GET", "/readyz")[0] == 200, timeout=30)
        for s in (a, b, c):
            assert poll(lambda: listed(s, 10), timeout=20), thread_pages(s, "t-gone-", 10)
        # the thread's next run (through c: forwarded to its owner) is its
        # entry from then on, listed once
        nxt = c.start_run("echo back", thread="t-gone-done")
        assert c.wait_terminal(nxt, thread="t-gone-done")["status"] == "completed"
        assert local_run(C.nodes[owners["t-gone-done"]], nxt)
        for s in (a, b, c):
            for limit in (1, 10):
                items = [t for p in thread_pages(s, "t-gone-", limit) for t in p]
                assert [t["threadId"] for t in items] == ["t-gone-done", "t-gone-run"], items
                assert items[0]["latestRun"]["runId"] == nxt, items[0]
    except Exception:
        stop_all()
        raise

def test_thread_runs_list_a_lost_nodes_runs_after_takeover():
    """A node lost (every daemon killed -9) with a thread of three runs, one
    running: GET /threads/{id}/runs through every node lists the three
    (their records as rw_runs has them, the running one ended
    failed/node_lost by the taker), newest first, with the status filter;
    each is read by id (GET /runs/{id}?threadId=, a WebSocket tail from a
    lastSeq) through every node; the same after the taker's coordinatord
    restarted; the thread's next run (on the taker) is listed first, before
    the lost node's. The /chat hydrate (GET /chat?threadId=) through every
    node rebuilds the lost node's runs from JetStream: the same messages as
    before the loss, but the running run's tool call ended interrupted (the
    taker's events) and no run active; the next run's message follows."""
    th = "t-lost-runs"
    loop = "for i in $(seq 1 400); do echo r$i; sleep 0.241; done"
    try:
        a, b, c, e = node("a"), node("b"), node("c"), node("e")
        r1 = e.start_run("echo one", thread=th)
        assert e.wait_terminal(r1, thread=th)["status"] == "completed"
        time.sleep(0.02)
        r2 = e.start_run("echo two; exit 3", thread=th)
        assert e.wait_terminal(r2, thread=th)["status"] == "failed"
        time.sleep(0.02)
        r3 = e.start_run(loop, thread=th)
        events, _, _, _ = e.tail(r3, thread=th, limit=3, timeout=30)
        assert len(events) == 3, events
        order = [r3, r2, r1]

        def ids(s, q=""):
            st, js = s.http("GET", f"/threads/{th}/runs{q}")
            assert st == 200, (st, js)
            return [r["runId"] for r in js]
        assert ids(a) == order
        full = {r: e.tail(r, thread=th, timeout=30)[0] for r in (r1, r2)}

        def hydrate(s):
            st, js = s.http("GET", f"/chat?threadId={th}")
            assert st == 200, (st, js)
            return js
        chat = hydrate(a)
        assert [m["id"] for m in chat["messages"]] == [r1, r2, r3], chat
        assert chat["activeRun"] == {"runId": r3}, chat
        kill_node_and_its_loop("e", "sleep 0.241")
        assert poll(lambda: (C.run_record(r3) or {}).get("status") == "failed",
                    timeout=45, interval=0.5), (C.run_record(r3), a.log("coordinatord")[-2000:])
        taker = C.owner(th, "a")
        assert taker in ("a", "b", "c"), taker

        def check_runs(s, first=()):
            want = list(first) + order
            got = poll(lambda: (lambda g: g if g == want else None)(ids(s)), timeout=10)
            assert got == want, (ids(s), want)
            st, js = s.http("GET", f"/threads/{th}/runs")
            recs = {r["runId"]: r for r in js}
            assert recs[r3]["status"] == "failed" and \
                recs[r3]["error"]["code"] == "node_lost", recs[r3]
            assert recs[r3]["node"] == "e" and recs[r3]["endedBy"] == taker, recs[r3]
            assert recs[r1]["status"] == "completed" and recs[r2]["status"] == "failed"
            done = [r for r in want if recs[r]["status"] == "completed"]
            assert ids(s, "?status=completed") == done
            assert ids(s, "?status=failed") == [r for r in want if r in (r3, r2)]
            assert ids(s, "?status=running") == []

        def check_reads(s):
            for r in order:
                st, rec = s.http("GET", f"/runs/{r}?threadId={th}")
                assert st == 200 and rec["runId"] == r, (r, st, rec)
                assert rec["status"] == {r1: "completed", r2: "failed", r3: "failed"}[r], rec
            st, rec = s.http("GET", f"/runs/{r3}?threadId={th}")
            assert rec["error"]["code"] == "node_lost", rec
            for r, evs in full.items():
                rest, status, code, _ = s.tail(r, thread=th, last_seq=1, timeout=30)
                assert code == 1000 and [x["seq"] for x in rest] == \
                    [x["seq"] for x in evs[2:]], (r, rest, evs)
                assert rest == evs[2:], (r, rest, evs)
            allr3, status, code, _ = s.tail(r3, thread=th, timeout=30)
            assert code == 1000 and status["status"] == "failed", (code, status)
            assert_gapfree(allr3)
            end = allr3[-1]["chunk"]
            assert end["type"] == "RUN_ERROR" and end["code"] == "node_lost", end
            rest, status, code, _ = s.tail(r3, thread=th, last_seq=2, timeout=30)
            assert code == 1000 and rest == allr3[3:], (rest[:3], allr3[3:6])
        def check_chat(s):
            got = hydrate(s)
            msgs = got["messages"]
            assert [m["id"] for m in msgs] == [r1, r2, r3], got
            assert msgs[:2] == chat["messages"][:2] and got["activeRun"] is None, (got, chat)
            call, result = msgs[2]["parts"]
            assert call["type"] == "tool-call" and call["state"] == "complete", call
            assert call["input"] == chat["messages"][2]["parts"][0]["input"], (call, chat)
            assert call["output"]["status"] == "interrupted", call
            assert "cluster node 'e' was lost" in call["output"]["error"], call
            assert result["type"] == "tool-result" and result["toolCallId"] == call["id"], result
            return got
        for s in (a, b, c):
            check_runs(s)
            check_reads(s)
            lost = check_chat(s)
        # a wrong thread is still refused
        st, _ = b.http("GET", f"/runs/{r1}?threadId=t-other-thread")
        assert st == 404, st
        # the taker's coordinatord killed -9 and restarted (its key does not
        # expire): it still lists them (kept in its state dir)
        o = C.nodes[taker]
        o.kill("coordinatord", signal.SIGKILL)
        o.start_daemon("coordinatord")
        assert poll(lambda: o.http("GET", "/readyz")[0] == 200, timeout=30)
        for s in (a, b, c):
            check_runs(s)
            check_chat(s)
        check_reads(o)
        # the thread's next run (through a node that is not its owner when
        # there is one) runs on the taker, listed first
        via = next(s for s in (a, b, c) if s is not o)
        nxt = via.start_run("echo next", thread=th)
        assert via.wait_terminal(nxt, thread=th)["status"] == "completed"
        assert local_run(o, nxt)
        for s in (a, b, c):
            check_runs(s, first=[nxt])
        for s in (a, b, c):
            got = hydrate(s)
            assert [m["id"] for m in got["messages"]] == [r1, r2, r3, nxt], got
            assert got["messages"][:3] == lost["messages"], (got, lost)
        items = [t for p in thread_pages(a, th, 10) for t in p]
        assert [t["threadId"] for t in items] == [th], items
        assert items[0]["latestRun"]["runId"] == nxt, items
    except Exception:
        stop_all()
        raise


def test_other_nodes_threads_are_remembered():
    """A node remembers which node owns a thread another node claimed: the
    thread's next runs and reads through it are forwarded without a claim
    (a KV create the cluster would refuse) or an owner look-up; a remembered
    owner that does not serve any more is forgotten and asked again."""
    try:
        a, b = node("a"), node("b")
        first = a.start_run("echo mine", thread="t-known")
        a.wait_terminal(first, thread="t-known")
        k0 = b.metric("runwarden_cluster_owner_known_total")
        runs = [b.start_run(f"echo known{i}", thread="t-known") for i in range(3)]
        for r in runs:
            rec = b.wait_terminal(r, thread="t-known")
            assert rec["status"] == "completed", rec
            assert local_run(a, r) and not local_run(b, r)
        k1 = b.metric("runwarden_cluster_owner_known_total")
        # the first POST claimed (refused: a's), every later request (POSTs,
        # GETs) went to a at once
        assert k1 - k0 >= 4, (k0, k1)
        assert b.metric("runwarden_cluster_owner_stale_total") == 0
        # a's coordinatord gone (kill -9, its heartbeat key still alive): b's
        # request on the remembered owner finds nobody serving it, forgets
        # it and asks again (the claim: a's still), then answers 503
        # Until the NATS servers have dropped the killed connection's
        # subscription (its own server at once, the routed servers a moment
        # later) a request can still be routed to it and is answered by the
        # forwarding timeout instead: outcome_unknown (a RUN_START that
        # timed out may have run), and the owner is kept. The next request
        # finds no responder: owner_unreachable.
        a.kill("coordinatord")
        for _ in range(3):
            st, js = b.http("POST", "/runs", {"threadId": "t-known", "messages": [
                {"role": "user", "content": "echo gone"}]})
            assert st == 503 and js["code"] in ("owner_unreachable", "outcome_unknown"), (st, js)
            if b.metric("runwarden_cluster_owner_stale_total") >= 1:
                break
        assert b.metric("runwarden_cluster_owner_stale_total") >= 1, js
        # back: the thread's next run through b runs on a again
        a.start_daemon("coordinatord")
        assert poll(lambda: a.http("GET", "/readyz")[0] == 200, timeout=30)
        r = poll(lambda: (lambda sj: sj[1]["runId"] if sj[0] == 202 else None)(
            b.http("POST", "/runs", {"threadId": "t-known", "messages": [
                {"role": "user", "content": "echo back"}]})), timeout=20)
        assert r and b.wait_terminal(r, thread="t-known")["status"] == "completed"
        assert local_run(a, r)
    except Exception:
        stop_all()
        raise


def coordinatord_pid(s):
    return s.procs["coordinatord"].pid


def test_owner_stopped_post_is_outcome_unknown():
    """A POST /runs forwarded to an owner that does not answer in time is
    503 outcome_unknown, not owner_unreachable: the request reached a
    coordinatord, which may have started the run (issue 35 F: the nemesis
    saw a key whose every POST was refused this way have a run)."""
    try:
        a, b = node("a"), node("b")
        run = a.start_run("echo before", thread="t-stop-post")
        a.wait_terminal(run, thread="t-stop-post")
        pid = coordinatord_pid(a)
        os.kill(pid, signal.SIGSTOP)
        try:
            st, body = b.http("POST", "/runs", {"threadId": "t-stop-post", "messages": [
                {"role": "user", "content": "echo stopped"}]})
        finally:
            os.kill(pid, signal.SIGCONT)
        assert st == 503 and body["code"] == "outcome_unknown", (st, body)
        assert "Idempotency-Key" in body["error"], body
    except Exception:
        stop_all()
        raise


def test_owner_stopped_answers_owner_unreachable():
    try:
        a, b = node("a"), node("b")
        run = a.start_run("echo before", thread="t-stop")
        a.wait_terminal(run, thread="t-stop")
        pid = coordinatord_pid(a)
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.time()
            st, body = b.http("GET", f"/runs/{run}?threadId=t-stop")
            dt = time.time() - t0
        finally:
            os.kill(pid, signal.SIGCONT)
        assert st == 503 and body["code"] == "owner_unreachable", (st, body)
        assert "'a'" in body["error"], body
        assert 3.5 < dt < 8, dt
        # resumed: the same request works; nothing crashed
        st, rec = poll(lambda: (lambda r: r if r[0] == 200 else None)(
            b.http("GET", f"/runs/{run}?threadId=t-stop")), timeout=10)
        assert st == 200 and rec["status"] == "completed", (st, rec)
        run2 = b.start_run("echo after", thread="t-stop")
        assert b.wait_terminal(run2, thread="t-stop")["status"] == "completed"
        assert local_run(a, run2)
        for s in (a, b):
            assert s.procs["coordinatord"].poll() is None
    except Exception:
        stop_all()
        raise


def commits(s):
    text = coord_call(s, "STATUS_GET", {})["metrics"]
    return int(re.search(r"^runwarden_commit_seconds_count (\d+)$", text, re.M).group(1))


def test_owner_shows_nothing_jetstream_has_not_acknowledged():
    """The owner's own reads stop at the replicated mark: with NATS gone, the
    run's output is still committed to a's log, but RUN_READ and RUN_GET show
    nothing past what JetStream acknowledged."""
    try:
        a = node("a")
        run = a.start_run("for i in $(seq 1 200); do echo tick$i; sleep 0.1; done",
                          thread="t-mark")
        assert poll(lambda: len(C.jetstream_events(run)) >= 3, timeout=20)
        C.stop_nats()
        time.sleep(1.5)  # what was in flight settled; later commits wait for NATS
        m1 = commits(a)
        r1 = coord_call(a, "RUN_READ", {"run_id": run, "from_seq": -1, "max": 1000})
        g1 = json.loads(coord_call(a, "RUN_GET", {"run_id": run})["record"])
        time.sleep(1.0)
        m2 = commits(a)
        r2 = coord_call(a, "RUN_READ", {"run_id": run, "from_seq": -1, "max": 1000})
        rec1, rec2 = json.loads(r1["record"]), json.loads(r2["record"])
        assert m2 > m1, ("the run's output is not being committed", m1, m2)
        assert rec2["lastSeq"] == rec1["lastSeq"] == g1["lastSeq"], (rec1, rec2, g1)
        assert len(r2["events"]) == rec2["lastSeq"] + 1, (len(r2["events"]), rec2)
        assert rec2["status"] == "running", rec2
    finally:
        stop_all()
