# SPDX-License-Identifier: MIT
"""Issue 6 through the whole stack: a harness with an egress allowlist reaches
an allowlisted TLS server on the host through the proxy the shim opens in its
sandbox (HTTPS_PROXY), and nothing else; a harness with host tools calls them
from inside its sandbox over the MCP bridge, through the loopback forward to
routerd, with the token from its 0600 file."""
import os
import re
import signal
import ssl
import subprocess
import tempfile
import threading
import time
from http.server import HTTPServer

from rwtest import free_port, stdout_text, text_handler
from t_sandbox import host_pids

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tools")


# Every ~200 ms: one HTTPS request through $HTTPS_PROXY and one MCP request
# through the bridge forward; "after" once the test restarted the shim
# (SIGUSR1). SIGHUP (while the shim is away): it takes the proxy's port itself.
# SIGUSR2: the end. (Signals, not files: when this test was written, a
# re-adopted sandbox's /workspace lost its bind after a shim restart — fixed
# since, with its own test in t_sandbox_readopt — and signals keep this test
# independent of the workspace.)
LOOP = r'''
import json, os, signal, socket, subprocess, sys, time, urllib.request
cfg = json.load(open(os.environ["RUNWARDEN_MCP_CONFIG"]))["mcpServers"]["tanstack"]
flags = set()
for sig, name in ((signal.SIGUSR1, "restarted"), (signal.SIGUSR2, "stop"), (signal.SIGHUP, "grab")):
    signal.signal(sig, lambda *a, name=name: flags.add(name))
print("ports", os.environ["HTTPS_PROXY"], cfg["url"], flush=True)
def bridge():
    body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).encode()
    req = urllib.request.Request(cfg["url"], data=body, method="POST",
                                 headers=dict(cfg["headers"], **{"Content-Type": "application/json"}))
    try:
        res = json.load(urllib.request.urlopen(req, timeout=3))
        return [t["name"] for t in res["result"]["tools"]] == ["echo"]
    except Exception as e:
        print("bridge:", type(e).__name__, e, file=sys.stderr, flush=True)
        return False
def proxy():
    r = subprocess.run(["curl", "-sk", "--max-time", "3", "https://localhost:%s/" % os.environ["TLS_PORT"]],
                       capture_output=True, text=True)
    return r.stdout == "hello from the allowlisted host\n"
held = None
while "stop" not in flags:
    if held is None and "grab" in flags:
        held = socket.socket()
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", int(os.environ["HTTPS_PROXY"].rsplit(":", 1)[1])))
        held.listen()
        print("grabbed", flush=True)
    phase = "after" if "restarted" in flags else "before"
    ok = lambda b: "ok" if b else "fail"
    print(phase, "proxy=%s bridge=%s" % (ok(proxy()), ok(bridge())), flush=True)
    time.sleep(0.2)
print("end", flush=True)
'''


TLS_PORT = free_port()

SUITE_CONF = f"""[harness.egressy]
adapter = shell
egress = localhost:{TLS_PORT}
egress_allow_private = 127.0.0.1/32

[harness.strict]
adapter = shell
egress = localhost:{TLS_PORT}

[harness.tooly]
adapter = shell
tools = echo

[harness.both]
adapter = shell
egress = localhost:{TLS_PORT}
egress_allow_private = 127.0.0.0/8, ::1
tools = echo

[tool.echo]
command = ["{TOOLS}/echo-tool"]
description = Echo the arguments
"""

CALL_BRIDGE = r'''
import json, os, urllib.request
cfg = json.load(open(os.environ["RUNWARDEN_MCP_CONFIG"]))["mcpServers"]["tanstack"]
def rpc(msg):
    req = urllib.request.Request(cfg["url"], data=json.dumps(msg).encode(), method="POST",
                                 headers=dict(cfg["headers"], **{"Content-Type": "application/json"}))
    return json.load(urllib.request.urlopen(req, timeout=10))
rpc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
names = [t["name"] for t in rpc({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]["tools"]]
res = rpc({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "echo", "arguments": {"from": "inside"}}})
print(names, json.loads(res["result"]["content"][0]["text"])["echo"])
'''


Hello = text_handler(b"hello from the allowlisted host\n")


def tls_server():
    d = tempfile.mkdtemp(prefix="rw-tls-")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
                    "-days", "1", "-keyout", f"{d}/key.pem", "-out", f"{d}/cert.pem"],
                   check=True, capture_output=True)
    srv = HTTPServer(("127.0.0.1", TLS_PORT), Hello)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(f"{d}/cert.pem", f"{d}/key.pem")
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def run(s, harness, command, thread):
    st, js = s.http("POST", "/runs", {"threadId": thread, "metadata": {"harness": harness},
                                      "messages": [{"role": "user", "content": command}]})
    assert st == 202, (st, js)
    events, status, _, _ = s.tail(js["runId"], thread=thread, timeout=60)
    return stdout_text(events), status


def test_egress_goes_only_through_the_allowlist(s):
    s.expected_errors += [r"refus", r"denied", r"not allowed"]
    srv = tls_server()
    try:
        out, status = run(s, "egressy",
                          f"curl -sk --max-time 5 https://localhost:{TLS_PORT}/; echo rc=$?; "
                          f"curl -sk --max-time 5 https://127.0.0.1:{TLS_PORT}/ >/dev/null; echo ip=$?; "
                          f"curl -sk --max-time 5 https://example.invalid/ >/dev/null; echo other=$?; "
                          f"curl -sk --max-time 5 --noproxy '*' https://localhost:{TLS_PORT}/ >/dev/null; echo direct=$?",
                          "t-egress")
        lines = out.split("\n")
        assert lines[0] == "hello from the allowlisted host", out
        assert "rc=0" in lines
        assert "ip=0" not in out and "other=0" not in out and "direct=0" not in out, out
        assert status["status"] == "completed", status
        # the same name without egress_allow_private: localhost is loopback, refused
        out, status = run(s, "strict",
                          f"curl -sk --max-time 5 https://localhost:{TLS_PORT}/ >/dev/null; echo rc=$?; "
                          "python3 -c 'import os, socket; p = int(os.environ[\"HTTPS_PROXY\"].rsplit(\":\", 1)[1]); "
                          "c = socket.create_connection((\"127.0.0.1\", p)); "
                          f"c.sendall(b\"CONNECT localhost:{TLS_PORT} HTTP/1.1\\r\\n\\r\\n\"); "
                          "print(c.recv(4096).decode().splitlines()[0])'",
                          "t-egress")
        assert out.split("\n")[:2] == ["rc=56", "HTTP/1.1 403 Forbidden"], out
        assert "a loopback address" in s.log("containerd-shim")
        # a harness without an allowlist has no proxy and no way out
        out, _ = run(s, "shell", f"echo \"[$HTTPS_PROXY]\"; curl -sk --max-time 5 https://localhost:{TLS_PORT}/ >/dev/null; echo rc=$?",
                     "t-egress")
        assert out.startswith("[]\n") and "rc=0" not in out, out
    finally:
        srv.shutdown()


def test_host_tools_from_inside_the_sandbox(s):
    out, status = run(s, "tooly", "python3 -c '" + CALL_BRIDGE.replace("'", "'\"'\"'") + "'", "t-mcp")
    assert out == "['echo'] {'from': 'inside'}\n", (out, status)
    assert status["status"] == "completed"


def wait_stdout(s, run_id, thread, text, timeout=30):
    """Until coordinatord committed text on the run's stdout."""
    deadline = time.time() + timeout
    out = ""
    while time.time() < deadline:
        st, rec = s.http("GET", f"/runs/{run_id}?threadId={thread}")
        assert st == 200, rec
        ev = s.tail(run_id, thread=thread, last_seq=-1, limit=rec["lastSeq"] + 1, timeout=15)[0]
        out = stdout_text(ev)
        if text in out:
            return out
        time.sleep(0.05)
    err = stdout_text(ev, "process.stderr")
    raise AssertionError(f"no {text!r} on the stdout of {run_id}: {out[-600:]!r}\n"
                         f"stderr: {err[-600:]!r}\n"
                         + s.log("coordinatord")[-1500:])


def listening(pid, port):
    """A LISTEN socket on 127.0.0.1:port in the network namespace of pid."""
    with open(f"/proc/{pid}/net/tcp") as f:
        return any(line.split()[1] == f"0100007F:{port:04X}" and line.split()[3] == "0A"
                   for line in f.readlines()[1:])


def relisten_run(s, thread, grab):
    """The LOOP run across a kill -9 of the shim: (stdout, record, proxy port, bridge port)."""
    s.expected_errors += [r"containerd-shim"]
    marker = f"rwmarker-relisten-{thread}-{os.getpid()}"
    srv = tls_server()
    try:
        cmd = (f"TLS_PORT={TLS_PORT} python3 -c '" + LOOP.replace("'", "'\"'\"'") + f"' {marker}")
        st, js = s.http("POST", "/runs", {"threadId": thread, "metadata": {"harness": "both"},
                                          "messages": [{"role": "user", "content": cmd}]})
        assert st == 202, (st, js)
        run_id = js["runId"]
        out = wait_stdout(s, run_id, thread, "before proxy=ok bridge=ok\n")
        pport = int(re.match(r"ports http://127\.0\.0\.1:(\d+) ", out).group(1))
        pids = [p for p in host_pids(marker) if open(f"/proc/{p}/comm").read().startswith("python3")]
        assert len(pids) == 1, pids
        s.kill("containerd-shim", signal.SIGKILL)
        if grab:  # the proxy's listener died with the shim: the harness takes its port
            os.kill(pids[0], signal.SIGHUP)
            deadline = time.time() + 15
            while not listening(pids[0], pport):
                assert time.time() < deadline, "the harness did not take the port"
                time.sleep(0.02)
        time.sleep(0.3)
        attached = s.log("coordinatord").count("Re-attached to exec")
        s.start_daemon("containerd-shim")
        deadline = time.time() + 30
        while s.log("coordinatord").count("Re-attached to exec") == attached:
            assert time.time() < deadline, s.log("coordinatord")[-2000:]
            time.sleep(0.02)
        os.kill(pids[0], signal.SIGUSR1)
        if not grab:
            wait_stdout(s, run_id, thread, "after proxy=ok bridge=ok\n", timeout=60)
        else:
            wait_stdout(s, run_id, thread, "after proxy=fail bridge=ok\n", timeout=60)
        os.kill(pids[0], signal.SIGUSR2)
        events, status, _, _ = s.tail(run_id, thread=thread, last_seq=0, timeout=60)
    finally:
        srv.shutdown()
    out = stdout_text(events)
    m = re.match(r"ports http://127\.0\.0\.1:(\d+) http://127\.0\.0\.1:(\d+)/", out)
    assert m, out[:300]
    return out, status, int(m.group(1)), int(m.group(2)), run_id


def test_proxy_and_forward_come_back_on_the_same_ports_after_a_shim_crash(s):
    out, status, pport, bport, run_id = relisten_run(s, "t-relisten", grab=False)
    assert status["status"] == "completed", (status, out[-500:])
    assert out.endswith("after proxy=ok bridge=ok\nend\n"), out[-500:]
    lines = out.split("\n")
    # the same environment, the same ports: once back, every request succeeds
    after = [line for line in lines if line.startswith("after")]
    first_ok = after.index("after proxy=ok bridge=ok")
    assert set(after[first_ok:]) == {"after proxy=ok bridge=ok"}, after
    log = s.log("coordinatord")
    assert f"Re-opened the egress proxy on sandbox port {pport}" in log, log[-2000:]
    assert f"Re-opened the bridge forward on sandbox port {bport}" in log, log[-2000:]
    shim = s.log("containerd-shim")
    assert shim.count(f"Forwarding sandbox port {bport} to") == 2, shim[-2000:]


def test_a_taken_port_is_not_replaced_by_another(s):
    """The harness listens on the proxy's port while the shim is away: the
    re-listen fails, coordinatord warns and the run goes on without a proxy."""
    out, status, pport, bport, run_id = relisten_run(s, "t-relisten-grab", grab=True)
    assert status["status"] == "completed", (status, out[-500:])
    assert out.endswith("after proxy=fail bridge=ok\nend\n"), out[-500:]
    assert "after proxy=ok" not in out, out[-1000:]
    log = s.log("coordinatord")
    assert re.search(rf"Cannot re-open the egress proxy on sandbox port {pport} after the "
                     r"containerd-shim restart, continuing without: Address already in use",
                     log), log[-2000:]
    assert f"Re-opened the bridge forward on sandbox port {bport}" in log, log[-2000:]
