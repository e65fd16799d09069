# SPDX-License-Identifier: MIT
"""The sandbox API's execs through any node of a cluster (docs/CLUSTER.md
"Execs"): a three-server NATS JetStream cluster, runwarden nodes a and b
(rwcluster.Cluster); thread c-own is a's (a file written through a claims
it). Through b:

- POST /sandboxes/c-own/exec streams stdout and stderr in order and ends
  with the exit code; the command ran in a's sandbox (a's workspace has what
  it wrote, b's has nothing); 600 KiB of output (several polls, past one
  answer's chunk) arrives whole and in order; a missing binary is 127; the
  body's stdin reaches the command;
- a WebSocket exec through b: stdin, stdout and a kill by the WebSocket;
- GET …/processes through b lists a's exec, POST …/processes/{pid}/kill
  through b kills it (and what it backgrounded);
- closing the HTTP connection to b kills the foreground exec on a;
- a background exec started through b: its output read through a and b;
- a thread no node owns yet: b's exec claims it (served by b itself)."""
import json
import os
import subprocess

from rwcluster import Cluster
from rwtest import poll
from t_files import jreq, workspace
from t_sandbox_exec import exec_open, exit_of, lines_of, output, run_exec, ws_exec

NO_SUITE = True  # the suites need the NATS cluster's ports: made here

C = Cluster(servers=3, node_ttl_ms=15000)
node = C.node


def own(a, thread):
    st, js = jreq(a, "PUT", f"/threads/{thread}/files/claim.txt", b"a's\n")
    assert st == 201, (st, js)


def test_exec_through_b_runs_on_the_owner():
    try:
        a, b = node("a"), node("b")
        own(a, "c-own")
        st, objs = run_exec(b, "c-own", {"command": "echo out1; echo err1 >&2; echo out2; "
                                         "echo from-b > through-b.txt; exit 7"})
        assert st == 200, (st, objs)
        e = exit_of(objs)
        assert (e["exitCode"], e["reason"]) == (7, "exit"), e
        assert output(objs) == b"out1\nout2\n" and output(objs, "stderr") == b"err1\n", objs
        with open(os.path.join(workspace(a, "c-own"), "through-b.txt"), "rb") as f:
            assert f.read() == b"from-b\n"
        assert not os.path.exists(os.path.join(workspace(b, "c-own"), "through-b.txt"))
        # more than one poll's answer (256 KiB a stream), in order
        st, objs = run_exec(b, "c-own", {"command": "seq 1 100000"})
        assert st == 200 and exit_of(objs)["exitCode"] == 0, (st, objs[-1])
        assert output(objs) == b"".join(b"%d\n" % i for i in range(1, 100001))
        st, objs = run_exec(b, "c-own", {"argv": ["no-such-binary-rw"]})
        assert st == 200 and exit_of(objs)["exitCode"] == 127, objs
        st, objs = run_exec(b, "c-own", {"command": "tr a-z A-Z", "stdin": "through b\n"})
        assert st == 200 and output(objs) == b"THROUGH B\n", objs
        # streamed as it comes: the first line before the command ends
        c, r = exec_open(b, "c-own", {"command": "echo early; sleep 30"})
        try:
            it = lines_of(r)
            started = next(it)
            assert started["type"] == "started", started
            assert next(it) == {"type": "stdout", "data": "early\n"}
            # listed and killed through b, a's process
            st, js = b.http("GET", "/sandboxes/c-own/processes")
            assert st == 200 and started["pid"] in [p["pid"] for p in js["processes"]], js
            st, js = b.http("POST", f"/sandboxes/c-own/processes/{started['pid']}/kill")
            assert st == 200, (st, js)
            e = next(it)
            assert e["type"] == "exit" and e["signal"] == 9, e
        finally:
            c.close()
    except Exception:
        C.stop_all()
        raise


def sleepers(mark):
    return subprocess.run(["pgrep", "-f", mark], capture_output=True).returncode == 0


def test_closing_the_connection_to_b_kills_the_exec_on_a():
    try:
        b = node("b")
        c, r = exec_open(b, "c-own", {"command": "sleep 1013 & sleep 1013"})
        assert r.status == 200
        assert next(lines_of(r))["type"] == "started"
        assert poll(lambda: sleepers("sleep 1013"), 10)
        r.close()
        c.close()
        assert poll(lambda: not sleepers("sleep 1013"), 15)
    except Exception:
        C.stop_all()
        raise


def test_websocket_exec_through_b():
    try:
        b = node("b")

        async def cat(ws):
            await ws.send(json.dumps({"argv": ["cat"]}))
            started = json.loads(await ws.recv())
            assert started["type"] == "started", started
            await ws.send(b"hello\n")
            o = json.loads(await ws.recv())
            assert o == {"type": "stdout", "data": "hello\n"}, o
            await ws.send(json.dumps({"type": "eof"}))
            return json.loads(await ws.recv())

        e, code = ws_exec(b, "c-own", cat)
        assert (e["type"], e["exitCode"]) == ("exit", 0), e

        async def kill(ws):
            await ws.send(json.dumps({"command": "echo ready; sleep 1017"}))
            assert json.loads(await ws.recv())["type"] == "started"
            assert json.loads(await ws.recv())["data"] == "ready\n"
            await ws.send(json.dumps({"type": "kill", "signal": "SIGTERM"}))
            return json.loads(await ws.recv())

        e, code = ws_exec(b, "c-own", kill)
        assert e["type"] == "exit" and e["signal"] == 15, e
    except Exception:
        C.stop_all()
        raise


def test_background_exec_through_b_and_its_output():
    try:
        a, b = node("a"), node("b")
        st, js = b.http("POST", "/sandboxes/c-own/exec",
                        {"command": "echo bg-out; echo bg-err >&2", "background": True})
        assert st == 202, (st, js)
        pid = js["pid"]

        def out(via):
            st, o = via.http("GET", f"/sandboxes/c-own/processes/{pid}/output")
            assert st == 200, (st, o)
            return o

        assert poll(lambda: not out(b)["running"], 10)
        for via in (a, b):
            o = out(via)
            assert (o["stdout"], o["stderr"], o["exitCode"]) == ("bg-out\n", "bg-err\n", 0), o
    except Exception:
        C.stop_all()
        raise


def test_a_new_thread_is_claimed_by_the_node_asked():
    try:
        a, b = node("a"), node("b")
        st, objs = run_exec(b, "c-new", {"command": "echo new > n.txt; echo done"})
        assert st == 200 and output(objs) == b"done\n", objs
        assert os.path.exists(os.path.join(workspace(b, "c-new"), "n.txt"))
        # and through a it is b's
        st, objs = run_exec(a, "c-new", {"command": "cat n.txt"})
        assert st == 200 and output(objs) == b"new\n", objs
    finally:
        C.stop_all()
