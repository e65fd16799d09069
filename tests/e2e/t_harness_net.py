# SPDX-License-Identifier: MIT
"""Issue 6 through the whole stack: a harness with an egress allowlist reaches
an allowlisted TLS server on the host through the proxy the shim opens in its
sandbox (HTTPS_PROXY), and nothing else; a harness with host tools calls them
from inside its sandbox over the MCP bridge, through the loopback forward to
routerd, with the token from its 0600 file."""
import os
import socket
import ssl
import subprocess
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

from rwtest import stdout_text

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tools")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


TLS_PORT = free_port()

SUITE_CONF = f"""[coordinatord]
bridge_target = 127.0.0.1:@PORT@

[harness.egressy]
adapter = shell
egress = localhost:{TLS_PORT}

[harness.tooly]
adapter = shell
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


class Hello(BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from the allowlisted host\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


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
