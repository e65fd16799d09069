# SPDX-License-Identifier: MIT
"""Issue 36 items 5 and 6. Live previews (docs/SANDBOX-API.md "Ports"): POST
/sandboxes/{id}/ports/{port} gives a URL on a listener of its own
([routerd] preview_listen), a host name per preview, through which a client
reaches an HTTP server listening on 127.0.0.1:<port> inside the sandbox —
python3 -m http.server, a header echo, a WebSocket echo — started by a run.
Another tenant's token is refused, unknown and expired previews are 404/410,
the API's Authorization header never reaches the sandbox, and headless
Chromium opens the URL and shows the page.

A sandbox's own egress (docs/SANDBOX-API.md "Egress"): PUT
/sandboxes/{id}/egress opens the sandbox's CONNECT proxy for the names asked,
each within the operator's [coordinatord] sandbox_egress_allow; a run in the
sandbox reaches a server on the host through it, and nothing else."""
import asyncio
import http.client
import json
import os
import socket
import subprocess
import tempfile
import threading
import time
from http.server import ThreadingHTTPServer
from urllib.parse import urlsplit

import websockets

from rwtest import free_port, poll, text_handler
from t_sandbox import shimctl

ADMIN, TA, TB = "ports-admin-token", "ports-tenant-a", "ports-tenant-b"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-ports-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"{ADMIN}\n{TA} threads=a-*\n{TB} threads=b-*\n")

PREVIEW_PORT = free_port()
HOST_PORT = free_port()  # a plain HTTP server on the host, reached through egress
TTL_MS = 5000
TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}
preview_listen = 127.0.0.1:{PREVIEW_PORT}
preview_ttl_ms = {TTL_MS}

[coordinatord]
sandbox_egress_allow = localhost:{HOST_PORT} other.example
sandbox_egress_allow_private = 127.0.0.1/32

[harness.keep]
adapter = shell
keep_processes = true
"""

THREAD = "a-web"
STATIC, ECHO, WS = 8000, 8001, 8002

# A header echo: the request as the sandbox's server saw it, as JSON.
ECHO_PY = r'''
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self, body=b""):
        out = json.dumps({"method": self.command, "path": self.path,
                          "headers": [[k, v] for k, v in self.headers.items()],
                          "body": body.decode()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def do_GET(self):
        self.answer()
    def do_POST(self):
        if self.headers.get("Transfer-Encoding") == "chunked":
            body = b""
            while True:
                n = int(self.rfile.readline().strip(), 16)
                if n == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(n)
                self.rfile.readline()
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.answer(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''

WS_PY = r'''
import asyncio, sys, websockets
async def echo(ws, path=None):
    async for m in ws:
        await ws.send("echo:" + m)
async def main():
    async with websockets.serve(echo, "127.0.0.1", int(sys.argv[1])):
        await asyncio.Future()
asyncio.run(main())
'''

# Starts the three servers in sessions of their own and returns once each
# accepts connections.
LAUNCH_PY = r'''
import os, socket, subprocess, sys, time
def up(port):
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
        return True
    except OSError:
        return False
cmds = [["python3", "-m", "http.server", "%d", "--bind", "127.0.0.1", "--directory", "."],
        ["python3", "echo.py", "%d"], ["python3", "ws.py", "%d"]]
for c in cmds:
    subprocess.Popen(c, start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=open("server.log", "a"))
for i in range(200):
    if all(up(p) for p in (%d, %d, %d)):
        print("up")
        sys.exit(0)
    time.sleep(0.05)
print("not up"); sys.exit(1)
''' % (STATIC, ECHO, WS, STATIC, ECHO, WS)

PAGE = "<!doctype html><title>preview</title><h1 id=t>hello from the sandbox</h1>\n"


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


def put_file(s, thread, rel, data, tok=ADMIN):
    st, js = s.http("PUT", f"/threads/{thread}/files/{rel}", raw_body=data.encode(),
                    headers=auth(tok))
    assert st in (200, 201, 204), (rel, st, js)


def run_cmd(s, thread, command, tok=ADMIN):
    st, js = s.http("POST", "/runs", {"threadId": thread, "metadata": {"harness": "keep"},
                                      "messages": [{"role": "user", "content": command}]},
                    headers=auth(tok))
    assert st == 202, (st, js)
    run = js["runId"]

    def done():
        st, rec = s.http("GET", f"/runs/{run}?threadId={thread}", headers=auth(tok))
        return st == 200 and rec["status"] in ("completed", "failed", "aborted") and rec
    rec = poll(done, 60, 0.05)
    assert rec and rec["status"] == "completed", rec
    return rec


_started = set()


def servers(s, thread=THREAD):
    """The three servers inside thread's sandbox (once per suite)."""
    if thread in _started:
        return
    put_file(s, thread, "index.html", PAGE)
    put_file(s, thread, "echo.py", ECHO_PY)
    put_file(s, thread, "ws.py", WS_PY)
    put_file(s, thread, "launch.py", LAUNCH_PY)
    run_cmd(s, thread, "cd /workspace && python3 launch.py")
    _started.add(thread)


def preview(s, port, thread=THREAD, tok=TA):
    st, js = s.http("POST", f"/sandboxes/{thread}/ports/{port}", headers=auth(tok))
    assert st == 200, (st, js)
    assert js["headers"] == {}, js
    return js


def fetch(url, path="/", method="GET", headers=None, body=None, host=None):
    """A request to the preview listener with the preview's Host, over real TCP."""
    u = urlsplit(url)
    c = http.client.HTTPConnection("127.0.0.1", u.port, timeout=10)
    h = {"Host": host or u.netloc}
    h.update(headers or {})
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), data


def test_preview_serves_the_sandbox_page(s):
    servers(s)
    js = preview(s, STATIC)
    u = urlsplit(js["url"])
    assert u.scheme == "http" and u.port == PREVIEW_PORT, js
    label, _, domain = u.hostname.partition(".")
    assert domain == "preview.localhost" and len(label) == 48, js
    int(label, 16)
    assert js["expiresAt"] > time.time() * 1000, js
    st, hdrs, data = fetch(js["url"], "/index.html")
    assert st == 200, (st, data)
    assert data.decode() == PAGE
    # a second POST for the same port renews the same preview
    assert preview(s, STATIC)["url"] == js["url"]


def test_preview_origin_is_not_the_api_origin(s):
    servers(s)
    url = preview(s, STATIC)["url"]
    u = urlsplit(url)
    assert (u.hostname, u.port) != ("127.0.0.1", s.port) and u.port != s.port
    # the preview listener serves no API route, whatever the path ...
    st, _, data = fetch(url, "/runs?threadId=a-web", headers=auth(ADMIN))
    assert b"ports-admin-token" not in data
    # ... and the API's listener no preview host
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    c.request("GET", "/index.html", headers={"Host": u.netloc, **auth(ADMIN)})
    r = c.getresponse()
    r.read()
    assert r.status == 421, r.status
    # no CORS for anyone on the preview listener's own answers
    st, hdrs, _ = fetch(url.replace(u.hostname.split(".")[0], "0" * 48), "/",
                        headers={"Origin": "http://127.0.0.1:%d" % s.port})
    assert st == 404 and not any(k.lower().startswith("access-control") for k in hdrs), hdrs


def test_api_token_is_not_forwarded(s):
    servers(s)
    url = preview(s, ECHO)["url"]
    u = urlsplit(url)
    # two requests on one keep-alive connection, both carrying the API token
    c = http.client.HTTPConnection("127.0.0.1", u.port, timeout=10)
    seen = []
    for path, body, extra in (("/one", None, {}), ("/two", b"a body", {}),
                              ("/three", iter([b"chunk-1,", b"chunk-2"]), {})):
        h = {"Host": u.netloc, "X-Probe": path, "Proxy-Authorization": "Basic eDp5",
             **auth(ADMIN), **extra}
        c.request("POST" if body is not None else "GET", path, body=body, headers=h,
                  encode_chunked=path == "/three")
        r = c.getresponse()
        assert r.status == 200, r.status
        seen.append(json.loads(r.read()))
    c.close()
    for req, path in zip(seen, ("/one", "/two", "/three")):
        names = [k.lower() for k, _ in req["headers"]]
        assert "authorization" not in names and "proxy-authorization" not in names, req
        assert ["X-Probe", path] in req["headers"], req
        assert req["path"] == path
    assert seen[1]["body"] == "a body" and seen[2]["body"] == "chunk-1,chunk-2", seen


def test_websocket_through_the_preview(s):
    servers(s)
    u = urlsplit(preview(s, WS)["url"])

    async def go():
        sock = socket.create_connection(("127.0.0.1", u.port), 10)
        async with websockets.connect(f"ws://{u.netloc}/hmr", sock=sock,
                                      extra_headers=auth(ADMIN), open_timeout=10) as ws:
            out = []
            for m in ("one", "two"):
                await ws.send(m)
                out.append(await asyncio.wait_for(ws.recv(), 10))
            return out
    assert asyncio.run(go()) == ["echo:one", "echo:two"]


def test_another_tenants_token_is_refused(s):
    for tok in (TB,):
        st, js = s.http("POST", f"/sandboxes/{THREAD}/ports/{STATIC}", headers=auth(tok))
        assert (st, js["code"]) == (403, "thread_forbidden"), (st, js)
    st, js = s.http("POST", f"/sandboxes/{THREAD}/ports/{STATIC}")
    assert st == 401, (st, js)
    # tenant B's own sandbox works for B
    st, js = s.http("POST", f"/sandboxes/b-x/ports/{STATIC}", headers=auth(TB))
    assert st == 200, (st, js)


def test_bad_requests(s):
    for port in ("0", "65536", "80a", "-1", "00080"):
        st, js = s.http("POST", f"/sandboxes/{THREAD}/ports/{port}", headers=auth(TA))
        assert (st, js["code"]) == (400, "bad_request"), (port, st, js)
    st, js = s.http("GET", f"/sandboxes/{THREAD}/ports/{STATIC}", headers=auth(TA))
    assert st == 405, (st, js)
    # a body must be JSON (no cross-site form post)
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    c.request("POST", f"/sandboxes/{THREAD}/ports/{STATIC}", body=b"x=1",
              headers={"Content-Type": "text/plain", **auth(TA)})
    r = c.getresponse()
    r.read()
    assert r.status == 415, r.status


def test_unknown_expired_and_foreign_hosts(s):
    servers(s)
    url = preview(s, STATIC)["url"]
    u = urlsplit(url)
    token = u.hostname.split(".")[0]
    st, _, data = fetch(url, host=f"{'ab' * 24}.preview.localhost:{u.port}")
    assert st == 404 and json.loads(data)["code"] == "preview_not_found", (st, data)
    for host in (f"127.0.0.1:{u.port}", f"{token}.evil.example:{u.port}", f"x.{token}.preview.localhost"):
        st, _, data = fetch(url, host=host)
        assert st == 421 and json.loads(data)["code"] == "misdirected_request", (host, st, data)
    # case does not matter in host names
    st, _, data = fetch(url, "/index.html", host=u.netloc.upper())
    assert st == 200 and data.decode() == PAGE
    # a later request on the connection must name the same preview (the
    # header echo keeps connections alive; raw socket: no reconnects)
    echo = urlsplit(preview(s, ECHO)["url"]).netloc
    c = socket.create_connection(("127.0.0.1", u.port), 10)
    c.sendall(f"GET /first HTTP/1.1\r\nHost: {echo}\r\n\r\n".encode())
    got = b""
    while b'"/first"' not in got:
        chunk = c.recv(65536)
        assert chunk, got
        got += chunk
    assert got.startswith(b"HTTP/1.1 200 "), got
    c.sendall(f"GET /second HTTP/1.1\r\nHost: {u.netloc}\r\n\r\n".encode())
    rest = b""
    while True:
        chunk = c.recv(65536)
        if not chunk:
            break
        rest += chunk
    assert b"/second" not in rest, rest
    c.close()
    # expiry: TTL_MS after the last POST of the preview
    time.sleep(TTL_MS / 1000 + 0.3)
    st, _, data = fetch(url)
    assert st == 410 and json.loads(data)["code"] == "preview_expired", (st, data)
    assert preview(s, STATIC)["url"] != url  # a new one


def test_nothing_listening_and_no_sandbox(s):
    servers(s)
    st, _, data = fetch(preview(s, 8999)["url"])
    assert st == 502 and json.loads(data)["code"] == "port_not_listening", (st, data)
    # ids at the edges reach the shim whole: the longest, one with spaces
    for thread in ("a-never-ran", "a-" + "x" * 254, "a-with%20a%20space"):
        st, _, data = fetch(preview(s, 8000, thread=thread)["url"])
        assert st == 503 and json.loads(data)["code"] == "sandbox_not_running", (st, data)


def test_preview_socket_is_not_for_everyone(s):
    path = os.path.join(s.dir, "run", "preview.sock")
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    # even with the file opened to everyone, the shim's SO_PEERCRED check
    # closes a stranger's connection unanswered
    modes = {p: os.stat(p).st_mode & 0o777 for p in (s.dir, os.path.dirname(path), path)}
    try:
        os.chmod(s.dir, 0o711)
        os.chmod(os.path.dirname(path), 0o711)
        os.chmod(path, 0o666)
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            "/usr/bin/python3", "-c",
                            "import socket,sys; s=socket.socket(socket.AF_UNIX); "
                            "s.connect(sys.argv[1])\n"
                            "try:\n"
                            "    s.sendall(b'RUNWARDEN-PREVIEW a-web 8000\\r\\n')\n"
                            "    print(repr(s.recv(100)))\n"
                            "except (ConnectionResetError, BrokenPipeError): print('closed')",
                            path], capture_output=True, text=True, timeout=30)
    finally:
        for q, m in modes.items():
            os.chmod(q, m)
    assert p.returncode == 0 and p.stdout.strip() in ("b''", "closed"), (p.stdout, p.stderr)
    assert poll(lambda: "Preview: refused a connection of uid 65534" in s.log("containerd-shim"))
    # a bad hello is refused by the shim
    c = socket.socket(socket.AF_UNIX)
    c.connect(path)
    c.sendall(b"RUNWARDEN-PREVIEW a-web 0\r\n")
    assert c.recv(100) == b"ERR bad_request\r\n"
    c.close()


def test_chromium_opens_the_preview(s):
    servers(s)
    url = preview(s, STATIC)["url"]
    js = os.path.join(TOP, "tests", "js")
    if not os.path.isdir(os.path.join(js, "node_modules", "playwright-core")):
        raise AssertionError("tests/js/node_modules missing: ./dev test runs npm ci there")
    p = subprocess.run(["node", os.path.join(js, "preview-e2e.mjs")], cwd=js,
                       env=dict(os.environ, RW_PREVIEW_URL=url + "index.html"),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    res = json.loads(p.stdout.strip().splitlines()[-1])
    assert res["text"] == "hello from the sandbox", res
    assert res["origin"] == url.rstrip("/"), res


# --- egress ---------------------------------------------------------------------------------

Hello = text_handler(b"hello from the host\n")


# CONNECT through the sandbox's proxy, then one GET in the tunnel: prints the
# proxy's status line and, when it said 200, the tunnel's answer body.
CONNECT_PY = r'''
import socket, sys
proxy, target = int(sys.argv[1]), sys.argv[2]
try:
    s = socket.create_connection(("127.0.0.1", proxy), 5)
except OSError as e:
    print("refused", type(e).__name__); sys.exit(0)
s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
head = b""
while b"\r\n\r\n" not in head:
    b = s.recv(1)
    if not b: break
    head += b
status = head.split(b"\r\n")[0].decode()
print(status)
if " 200 " in status:
    s.sendall(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n")
    data = b""
    while True:
        b = s.recv(4096)
        if not b: break
        data += b
    print(data.split(b"\r\n\r\n", 1)[1].decode().strip())
'''


def run_out(s, thread, command, tok=ADMIN):
    rec = run_cmd(s, thread, command, tok)
    st, js = s.http("GET", f"/threads/{thread}/files/out.txt", headers=auth(tok))
    assert st == 200, (st, js)
    return js.decode() if isinstance(js, bytes) else str(js)


def egress(s, thread, allow, tok=TA):
    return s.http("PUT", f"/sandboxes/{thread}/egress", {"allow": allow}, headers=auth(tok))


def test_egress_reaches_an_allowed_name_only(s):
    srv = ThreadingHTTPServer(("127.0.0.1", HOST_PORT), Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        t = "a-net"
        st, js = egress(s, t, [f"localhost:{HOST_PORT}"])
        assert st == 200, (st, js)
        assert js["allow"] == [f"localhost:{HOST_PORT}"], js
        port = int(js["proxy"].rsplit(":", 1)[1])
        put_file(s, t, "connect.py", CONNECT_PY)
        probe = (f"cd /workspace && python3 connect.py {port} localhost:{HOST_PORT} > out.txt; "
                 f"python3 connect.py {port} other.example:443 >> out.txt")
        out = run_out(s, t, probe)
        lines = out.splitlines()
        assert lines[0].startswith("HTTP/1.1 200"), out
        assert lines[1] == "hello from the host", out
        # in the operator's list but not asked for this sandbox: refused
        assert lines[2].startswith("HTTP/1.1 403"), out
        # a second PUT keeps the port (processes started before keep HTTPS_PROXY)
        st, js2 = egress(s, t, [f"LOCALHOST:{HOST_PORT}", "other.example"])
        assert st == 200 and js2["proxy"] == js["proxy"], (st, js2)
        # the sandbox destroyed and made anew: a PUT opens its proxy again, on
        # the same port
        r = shimctl(s, t, "--destroy")
        assert r.returncode == 0, r.stderr
        st, js4 = egress(s, t, [f"localhost:{HOST_PORT}"])
        assert st == 200 and js4["proxy"] == js["proxy"], (st, js4)
        out = run_out(s, t, f"cd /workspace && python3 connect.py {port} localhost:{HOST_PORT} > out.txt")
        assert out.splitlines()[1:2] == ["hello from the host"], out
        # the empty list closes the proxy
        st, js3 = egress(s, t, [])
        assert st == 200 and js3 == {"allow": []}, (st, js3)
        out = run_out(s, t, f"cd /workspace && python3 connect.py {port} localhost:{HOST_PORT} > out.txt")
        assert out.startswith("refused"), out
    finally:
        srv.shutdown()
        srv.server_close()


def exec_probe(s, thread, port, tok=ADMIN):
    """The CONNECT probe run by an exec of the sandbox API: (its lines, its HTTPS_PROXY)."""
    st, body = s.http("POST", f"/sandboxes/{thread}/exec",
                      {"command": f"cd /workspace && echo $HTTPS_PROXY && "
                                  f"python3 connect.py {port} localhost:{HOST_PORT}"},
                      headers=auth(tok))
    assert st == 200, (st, body)
    text = body.decode() if isinstance(body, bytes) else body
    out = "".join(json.loads(l).get("data", "") for l in text.splitlines()
                  if l.strip() and json.loads(l)["type"] == "stdout")
    lines = out.splitlines()
    return lines[1:], lines[0]


def test_egress_comes_back_after_stop_and_restarts(s):
    """Issue 36: the list is kept (coordinatord's state dir) and the proxy
    opened again before the next exec — after a stop, a coordinatord restart
    and a shim restart — on the port it had."""
    import signal
    srv = ThreadingHTTPServer(("127.0.0.1", HOST_PORT), Hello)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    s.expected_errors += [r"containerd-shim"]
    try:
        t = "a-back"
        st, js = egress(s, t, [f"localhost:{HOST_PORT}"])
        assert st == 200, (st, js)
        port = int(js["proxy"].rsplit(":", 1)[1])
        put_file(s, t, "connect.py", CONNECT_PY)
        lines, proxy = exec_probe(s, t, port)
        assert lines == ["HTTP/1.1 200 Connection established", "hello from the host"] or \
            (lines[0].startswith("HTTP/1.1 200") and lines[1] == "hello from the host"), lines
        assert proxy == f"http://127.0.0.1:{port}", proxy
        # stopped (as an idle stop does): the next exec has it again
        st, _ = s.http("POST", f"/sandboxes/{t}/stop", headers=auth(ADMIN))
        assert st == 200, st
        lines, proxy = exec_probe(s, t, port)
        assert lines[:2] and lines[0].startswith("HTTP/1.1 200") and \
            lines[1] == "hello from the host", lines
        # coordinatord restarted (its memory gone; the list is on disk)
        s.kill("coordinatord")
        s.start_daemon("coordinatord")
        assert poll(lambda: s.http("GET", "/readyz", headers=auth(ADMIN))[0] == 200, 15)
        st, _ = s.http("POST", f"/sandboxes/{t}/stop", headers=auth(ADMIN))
        assert st == 200, st
        lines, proxy = exec_probe(s, t, port)
        assert proxy == f"http://127.0.0.1:{port}", proxy
        assert lines[0].startswith("HTTP/1.1 200") and lines[1] == "hello from the host", lines
        # the shim restarted (it keeps the sandbox, not its listeners)
        s.kill("containerd-shim", signal.SIGKILL)
        s.start_daemon("containerd-shim")
        assert poll(lambda: s.http("GET", "/readyz", headers=auth(ADMIN))[0] == 200, 30)
        lines, proxy = exec_probe(s, t, port)
        assert lines[0].startswith("HTTP/1.1 200") and lines[1] == "hello from the host", lines
        # closed: it stays closed across a restart
        st, js = egress(s, t, [])
        assert st == 200, (st, js)
        s.kill("coordinatord")
        s.start_daemon("coordinatord")
        assert poll(lambda: s.http("GET", "/readyz", headers=auth(ADMIN))[0] == 200, 15)
        lines, proxy = exec_probe(s, t, port)
        assert proxy == "" and lines[0].startswith("refused"), (proxy, lines)
    finally:
        srv.shutdown()
        srv.server_close()


def test_egress_never_wider_than_the_operator_allows(s):
    for allow, bad in (([f"localhost:{HOST_PORT}", "api.anthropic.com"], "api.anthropic.com"),
                       (["localhost"], "localhost"),  # port 443, not HOST_PORT
                       (["127.0.0.1"], "127.0.0.1")):
        st, js = egress(s, "a-net2", allow)
        assert (st, js["code"]) == (403, "egress_forbidden"), (allow, st, js)
        assert f"'{bad}'" in js["error"], js
    st, js = egress(s, "a-net2", [f"localhost:{HOST_PORT}"], tok=TB)
    assert (st, js["code"]) == (403, "thread_forbidden"), (st, js)
    for body in ({"allow": "x"}, {"allow": [1]}, {}, []):
        st, js = s.http("PUT", "/sandboxes/a-net2/egress", body, headers=auth(TA))
        assert (st, js["code"]) == (400, "bad_request"), (body, st, js)
    st, js = s.http("PUT", "/sandboxes/a-net2/egress", raw_body=b'{"allow":[]}',
                    headers={"Content-Type": "text/plain", **auth(TA)})
    assert st == 415, (st, js)


def test_capabilities_report_ports_and_network_policy(s):
    # configured here (preview_listen, sandbox_egress_allow): both true; the
    # suites without them see false (t_sandbox_api)
    assert poll(lambda: s.http("GET", "/readyz", headers=auth(ADMIN))[0] == 200, 15)
    st, js = s.http("GET", "/capabilities", headers=auth(TA))
    assert st == 200, (st, js)
    assert js["sandbox"]["ports"] is True and js["sandbox"]["networkPolicy"] is True, js
    assert js["scope"] == {"threads": ["a-*"]}, js
