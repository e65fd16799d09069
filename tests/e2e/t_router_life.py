# SPDX-License-Identifier: MIT
"""routerd's lifecycle: systemd socket activation (LISTEN_FDS), SIGTERM
(tails closed with 1001, exit within 5 s), and the HELLO deadline on the
coordinator link. The extra routerds here share the suite's coordinatord."""
import os
import signal
import socket
import subprocess
import tempfile
import time

from rwtest import BUILD
from t_router_lib import OP_CLOSE, WsClient, connect

# the raw requests below name the server "x"
SUITE_CONF = """[routerd]
server_names = x
"""


def activated_routerd(s, extra_env=None, conf=None):
    """routerd on a listening socket passed as fd 3 (LISTEN_PID=$$ from the
    shell that execs it). Returns (proc, port, sock, logpath)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(64)
    port = ls.getsockname()[1]
    log = os.path.join(s.dir, f"routerd-act-{port}.log")
    env = dict(os.environ, **(extra_env or {}))
    env.pop("NOTIFY_SOCKET", None)
    cmd = (f'LISTEN_PID=$$ LISTEN_FDS=1 exec "{BUILD}/routerd" --config "{conf or s.conf_path}" '
           f'3<&{ls.fileno()}')
    with open(log, "w") as lf:
        p = subprocess.Popen(["/bin/sh", "-c", cmd], pass_fds=(ls.fileno(),), stdout=lf,
                             stderr=subprocess.STDOUT, env=env)
    ls.close()  # routerd holds its own copy now
    return p, port, log


def wait_healthz(port, p, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert p.poll() is None, "routerd exited"
        try:
            c = connect(port, timeout=1)
            c.sendall(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
            if c.recv(100).startswith(b"HTTP/1.1 200"):
                c.close()
                return
            c.close()
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("activated routerd not ready")


def http_on(port, method, path, body=None):
    import http.client
    import json
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, json.loads(data) if data else None


def test_socket_activation_serves_the_passed_socket(s):
    p, port, log = activated_routerd(s)
    try:
        wait_healthz(port, p)
        st, js = http_on(port, "POST", "/runs", {"threadId": "t-act", "messages": [
            {"role": "user", "content": "echo via-activation"}]})
        assert st == 202, (st, js)
        st, rec = http_on(port, "GET", f"/runs/{js['runId']}?threadId=t-act")
        assert st == 200 and rec["runId"] == js["runId"]
        text = open(log).read()
        assert "socket-activated" in text and f"127.0.0.1:{port}" in text, text
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0, open(log).read()


def test_sigterm_closes_tails_with_1001_and_exits_fast(s):
    p, port, log = activated_routerd(s)
    try:
        wait_healthz(port, p)
        st, js = http_on(port, "POST", "/runs", {"threadId": "t-term", "messages": [
            {"role": "user", "content": "sleep 30"}]})
        run = js["runId"]
        tails = [WsClient(port, f"/runs/{run}/stream?threadId=t-term") for _ in range(5)]
        sse = connect(port)
        sse.sendall(f"GET /runs/{run}/stream?threadId=t-term HTTP/1.1\r\nHost: x\r\n"
                    f"Accept: text/event-stream\r\n\r\n".encode())
        time.sleep(0.3)
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        for w in tails:
            code, reason = w.expect_close(timeout=5)
            assert code == 1001, (code, reason)
            w.send(b"\x88\x82abcd" + bytes(a ^ b for a, b in zip(b"\x03\xe9", b"ab")))
            assert w.expect_eof(2)
            w.close()
        sse.settimeout(5)
        data = b""
        while True:
            b = sse.recv(65536)
            if not b:
                break
            data += b
        sse.close()
        assert b"event: error" in data and b"shutting_down" in data, data[-300:]
        rc = p.wait(timeout=5)
        assert rc == 0 and time.time() - t0 < 5, (rc, time.time() - t0)
        try:
            connect(port, timeout=1).close()
            refused = False
        except OSError:
            refused = True
        assert refused, "still accepting after SIGTERM"
        # the run goes on: routerd is stateless
        st, rec = s.http("GET", f"/runs/{run}?threadId=t-term")
        assert st == 200 and rec["status"] == "running", rec
        s.http("POST", f"/runs/{run}/cancel?threadId=t-term")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_sigterm_with_a_client_that_never_answers_the_close(s):
    p, port, log = activated_routerd(s)
    try:
        wait_healthz(port, p)
        st, js = http_on(port, "POST", "/runs", {"threadId": "t-term2", "messages": [
            {"role": "user", "content": "sleep 30"}]})
        run = js["runId"]
        w = WsClient(port, f"/runs/{run}/stream?threadId=t-term2")
        time.sleep(0.2)
        t0 = time.time()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=5)   # the client never closes: routerd does not wait for it
        assert rc == 0 and time.time() - t0 < 5
        code, _ = w.expect_close(timeout=2)
        assert code == 1001
        w.close()
        s.http("POST", f"/runs/{run}/cancel?threadId=t-term2")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_activation_refuses_non_loopback_socket_without_tokens(s):
    ls = socket.socket()
    ls.bind(("0.0.0.0", 0))
    ls.listen(1)
    log = os.path.join(s.dir, "routerd-act-nl.log")
    cmd = f'LISTEN_PID=$$ LISTEN_FDS=1 exec "{BUILD}/routerd" --config "{s.conf_path}" 3<&{ls.fileno()}'
    with open(log, "w") as lf:
        p = subprocess.run(["/bin/sh", "-c", cmd], pass_fds=(ls.fileno(),), stdout=lf,
                           stderr=subprocess.STDOUT, timeout=10)
    ls.close()
    assert p.returncode != 0
    assert "without authentication" in open(log).read()


def test_hello_timeout_reconnects(s):
    d = tempfile.mkdtemp(prefix="rw-hello-")
    os.makedirs(d + "/run")
    silent = socket.socket(socket.AF_UNIX)
    silent.bind(d + "/run/coordinatord.sock")
    silent.listen(16)
    conf = os.path.join(d, "r.conf")
    with open(conf, "w") as f:
        f.write(f"[runwarden]\nruntime_dir = {d}/run\nstate_dir = {d}/state\n"
                f"[routerd]\nlisten = 127.0.0.1:8799\ncoord_timeout_ms = 300\n")
    p, port, log = activated_routerd(s, conf=conf)
    try:
        held = []
        silent.settimeout(5)
        t0 = time.time()
        for _ in range(3):  # it connects, gets no HELLO, gives up, comes back
            c, _ = silent.accept()
            held.append(c)
        assert time.time() - t0 < 4
        st, body = http_on(port, "GET", "/readyz")
        assert st == 503 and body["code"] == "not_ready", (st, body)
        st, body = http_on(port, "GET", "/healthz")
        assert st == 200
        assert "sent no HELLO" in open(log).read()
        for c in held:
            c.close()
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=10) == 0
        silent.close()
