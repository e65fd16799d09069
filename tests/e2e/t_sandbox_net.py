# SPDX-License-Identifier: MIT
"""The sandbox's ways out (issue 6 items 4 and 5), driven on the shim's socket
with the raw client: SANDBOX_FORWARD (a loopback port inside the sandbox joined
to a host address), SANDBOX_PROXY (the HTTP CONNECT egress proxy with its
allowlist), SANDBOX_UNLISTEN (closes them, reports the proxy's byte counts);
and socket_group (a peer of that group, primary or supplementary, may connect;
nobody else but root). Issue 11 item 6: an allowlisted name that resolves to a
loopback, link-local, private… address is refused after resolution unless its
network is in allow_private (names resolve through /etc/hosts entries the test
adds and removes: nothing queries a DNS server)."""
import contextlib
import fcntl
import hashlib
import http.server
import os
import re
import secrets
import socket
import ssl
import subprocess
import tempfile
import threading

from helpers.mpack import ERROR, REPLY, Client
from rwtest import BUILD

SUITE_CONF = """[containerd-shim]
socket_group = nogroup
"""

SHIMCTL = os.path.join(BUILD, "tools", "shimctl")


def sock_path(s):
    return os.path.join(s.dir, "run", "containerd-shim.sock")


def sandbox_id(key):
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def sh(s, key, script, timeout=30):
    """Run script in the sandbox of key (created when needed): (exit code, stdout)."""
    r = subprocess.run([SHIMCTL, sock_path(s), key, "--", "/bin/sh", "-c", script],
                       capture_output=True, text=True, timeout=timeout)
    return r.returncode, r.stdout


def call(s, name, body):
    c = Client(sock_path(s))
    try:
        return c.call(name, body)
    finally:
        c.close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass


def serve(server):
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return server


FETCH = ("import sys, urllib.request\n"
         "try:\n"
         "    print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().strip())\n"
         "except Exception as e:\n"
         "    print('failed:', type(e).__name__)\n")


def test_forward_reaches_the_host_until_unlisten(s):
    d = tempfile.mkdtemp(dir=s.dir)
    with open(os.path.join(d, "hello.txt"), "w") as f:
        f.write("hello-from-the-host\n")
    httpd = serve(http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: Quiet(*a, directory=d)))
    try:
        assert sh(s, "net-fwd", "true")[0] == 0
        sb = sandbox_id("net-fwd")
        t, b = call(s, "SANDBOX_FORWARD", {"sandbox_id": sb, "run_id": "run-fwd",
                                           "target": f"127.0.0.1:{httpd.server_port}"})
        assert t == REPLY and 0 < b["port"] < 65536, b
        port = b["port"]
        url = f"http://127.0.0.1:{port}/hello.txt"
        rc, out = sh(s, "net-fwd", f"python3 -c \"{FETCH}\" {url}")
        assert out == "hello-from-the-host\n", out
        # a few in parallel, and a bigger body through the splice
        with open(os.path.join(d, "big.bin"), "wb") as f:
            f.write(os.urandom(3 * 1024 * 1024))
        rc, out = sh(s, "net-fwd", f"for i in 1 2 3; do python3 -c \"import urllib.request, "
                     f"hashlib; print(hashlib.sha256(urllib.request.urlopen("
                     f"'http://127.0.0.1:{port}/big.bin').read()).hexdigest())\" & done; wait")
        want = hashlib.sha256(open(os.path.join(d, "big.bin"), "rb").read()).hexdigest()
        assert out.split() == [want] * 3, out
        # another sandbox has its own loopback: the port is not there
        rc, out = sh(s, "net-fwd-other", f"python3 -c \"{FETCH}\" {url}")
        assert out.startswith("failed"), out
        t, b = call(s, "SANDBOX_UNLISTEN", {"sandbox_id": sb, "run_id": "run-fwd"})
        assert t == REPLY and b == {"bytes_out": 0, "bytes_in": 0}, b
        rc, out = sh(s, "net-fwd", f"python3 -c \"{FETCH}\" {url}")
        assert out.startswith("failed"), out
        # UNLISTEN of a run without listeners: zeros, not an error
        t, b = call(s, "SANDBOX_UNLISTEN", {"sandbox_id": sb, "run_id": "run-fwd"})
        assert t == REPLY and b == {"bytes_out": 0, "bytes_in": 0}, b
    finally:
        httpd.shutdown()


def test_forward_rejects_bad_requests(s):
    assert sh(s, "net-fwd", "true")[0] == 0
    sb = sandbox_id("net-fwd")
    for target in ("localhost:80", "127.0.0.1", "127.0.0.1:0", "1.2.3.4:99999", ""):
        t, b = call(s, "SANDBOX_FORWARD", {"sandbox_id": sb, "run_id": "r", "target": target})
        assert t == ERROR and b["code"] == -22, (target, b)
    t, b = call(s, "SANDBOX_FORWARD", {"sandbox_id": "0" * 16, "run_id": "r",
                                       "target": "127.0.0.1:1"})
    assert t == ERROR and b["code"] == -2, b
    t, b = call(s, "SANDBOX_PROXY", {"sandbox_id": sb, "run_id": "r", "allow": ["10.0.0.1"]})
    assert t == ERROR and b["code"] == -22 and "IP literal" in b["message"], b
    t, b = call(s, "SANDBOX_PROXY", {"sandbox_id": sb, "run_id": "r", "allow": "x"})
    assert t == ERROR and b["code"] == -74, b  # EBADMSG


def tls_server(d):
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj",
                    "/CN=localhost", "-days", "1", "-keyout", key, "-out", cert],
                   check=True, capture_output=True, timeout=60)
    with open(os.path.join(d, "index.html"), "w") as f:
        f.write("hello-over-tls\n")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            lambda *a: Quiet(*a, directory=d))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    return serve(httpd)


def test_proxy_allows_only_listed_names(s):
    d = tempfile.mkdtemp(dir=s.dir)
    httpd = tls_server(d)
    tport = httpd.server_port
    try:
        assert sh(s, "net-proxy", "true")[0] == 0
        sb = sandbox_id("net-proxy")
        # localhost is loopback: allowed only with its network in allow_private
        t, b = call(s, "SANDBOX_PROXY", {"sandbox_id": sb, "run_id": "run-proxy",
                                         "allow": [f"LocalHost:{tport}", "example.org"],
                                         "allow_private": ["127.0.0.1/32"]})
        assert t == REPLY, b
        proxy = f"http://127.0.0.1:{b['port']}"
        curl = f"curl -sk --max-time 10 --proxy {proxy}"
        rc, out = sh(s, "net-proxy", f"{curl} https://localhost:{tport}/")
        assert (rc, out) == (0, "hello-over-tls\n"), (rc, out)
        # an IP literal, a name not on the list, the right name on another port
        for url in (f"https://127.0.0.1:{tport}/", "https://example.invalid/",
                    f"https://[::1]:{tport}/", "https://localhost/"):
            rc, out = sh(s, "net-proxy", f"{curl} {url}; echo rc=$?")
            assert out.endswith("rc=56\n"), (url, out)
        rc, out = sh(s, "net-proxy", f"{curl} -o /dev/null -w '%{{http_code}}' "
                     f"http://localhost:{tport}/")  # plain GET through the proxy
        assert out == "405", out
        # direct, without the proxy: no route out of the sandbox's netns
        rc, out = sh(s, "net-proxy", f"curl -sk --max-time 5 https://localhost:{tport}/; "
                     "echo rc=$?")
        assert out == "rc=7\n", out
        t, b = call(s, "SANDBOX_UNLISTEN", {"sandbox_id": sb, "run_id": "run-proxy"})
        assert t == REPLY and b["bytes_out"] > 200 and b["bytes_in"] > 500, b
        rc, out = sh(s, "net-proxy", f"{curl} https://localhost:{tport}/; echo rc=$?")
        assert out == "rc=7\n", out
    finally:
        httpd.shutdown()
    log = s.log("containerd-shim")
    assert "not on the allowlist" in log and "IP literal" in log, log[-2000:]


HOSTS = "/etc/hosts"


@contextlib.contextmanager
def hosts_entries(entries):
    """Add "address name" lines to /etc/hosts (appended under flock: other
    users of the file keep theirs) and remove exactly them afterwards."""
    lines = [f"{addr} {name}\n" for addr, name in entries]
    with open(HOSTS, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        old = f.read()
        f.write(("" if old.endswith("\n") or not old else "\n") + "".join(lines))
        f.flush()
        fcntl.flock(f, fcntl.LOCK_UN)
    try:
        yield
    finally:
        with open(HOSTS, "r+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            keep = [l for l in f.read().splitlines(True) if l not in lines]
            f.seek(0)
            f.write("".join(keep))
            f.truncate()
            fcntl.flock(f, fcntl.LOCK_UN)


class CountingServer:
    """A TCP server on 127.0.0.1 that counts the connections it accepted and
    answers each with one HTTP response."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.stop = False
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self.stop:
                c.close()
                return
            self.accepted += 1
            with c:
                c.settimeout(5)
                try:
                    c.recv(4096)
                    c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 15\r\n\r\nhello-private\n")
                except OSError:
                    pass

    def close(self):
        self.stop = True
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
        except OSError:
            pass
        self.sock.close()
        self.thread.join(5)


# In the sandbox: CONNECT through the proxy; prints the status line, then the
# tunnel's answer (a GET through it) or the proxy's body.
CONNECT = r"""
import socket, sys
proxy, target = int(sys.argv[1]), sys.argv[2]
s = socket.create_connection(("127.0.0.1", proxy), timeout=10)
s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
data = b""
while b"\r\n\r\n" not in data:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
head, _, rest = data.partition(b"\r\n\r\n")
lines = head.decode().split("\r\n")
print(lines[0])
if lines[0].split()[1:2] == ["200"]:
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
else:
    print([l for l in lines[1:] if l.startswith("Proxy-Status")])
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    rest += chunk
print(rest.decode(errors="replace").split("\r\n\r\n")[-1].strip())
"""


def connect_in(s, key, proxy_port, target):
    r = subprocess.run([SHIMCTL, sock_path(s), key, "--", "python3", "-c", CONNECT,
                        str(proxy_port), target],
                       capture_output=True, text=True, timeout=60)
    return r.stdout.splitlines()


def test_proxy_refuses_names_that_resolve_to_special_addresses(s):
    tag = secrets.token_hex(6)
    lo, meta, mapped, zero = (f"rw-egress-{w}-{tag}.invalid"
                              for w in ("lo", "meta", "mapped", "zero"))
    srv = CountingServer()
    p = srv.port
    try:
        with hosts_entries([("127.0.0.1", lo), ("169.254.169.254", meta),
                            ("::ffff:127.0.0.1", mapped), ("0.0.0.0", zero)]):
            assert sh(s, "net-private", "true")[0] == 0
            sb = sandbox_id("net-private")
            allow = [f"{n}:{p}" for n in (lo, meta, mapped, zero)]
            t, b = call(s, "SANDBOX_PROXY", {"sandbox_id": sb, "run_id": "run-strict",
                                             "allow": allow})
            assert t == REPLY, b
            strict = b["port"]
            for name, cls, addr in ((lo, "loopback", "127.0.0.1"),
                                    (lo, "loopback", "127.0.0.1"),
                                    (mapped, "loopback", "::ffff:127.0.0.1"),
                                    (meta, "link-local", "169.254.169.254"),
                                    (zero, "unspecified", "0.0.0.0")):
                out = connect_in(s, "net-private", strict, f"{name}:{p}")
                assert out[0] == "HTTP/1.1 403 Forbidden", (name, out)
                assert out[1] == "['Proxy-Status: runwarden; error=destination_ip_prohibited']", out
                assert f"{name} resolves to {addr}, a {cls} address" in out[2], out
            # an IPv4-mapped literal never gets as far as resolution
            out = connect_in(s, "net-private", strict, f"[::ffff:127.0.0.1]:{p}")
            assert out[0] == "HTTP/1.1 403 Forbidden", out
            assert srv.accepted == 0, "the server saw a connection"

            # the same names with loopback allowed for this run: the tunnel works,
            # also to the mapped form (the IPv4 network covers it); the metadata
            # address is still refused
            t, b = call(s, "SANDBOX_PROXY", {"sandbox_id": sb, "run_id": "run-lo",
                                             "allow": allow,
                                             "allow_private": ["127.0.0.1/32"]})
            assert t == REPLY, b
            loose = b["port"]
            for name in (lo, mapped):
                out = connect_in(s, "net-private", loose, f"{name}:{p}")
                assert out == ["HTTP/1.1 200 Connection Established", "hello-private"], out
            assert srv.accepted == 2, srv.accepted
            out = connect_in(s, "net-private", loose, f"{meta}:{p}")
            assert out[0] == "HTTP/1.1 403 Forbidden", out
            out = connect_in(s, "net-private", loose, f"{zero}:{p}")
            assert out[0] == "HTTP/1.1 403 Forbidden", out
            assert srv.accepted == 2, srv.accepted

            # a bad network is refused with the reason
            t, b = call(s, "SANDBOX_PROXY", {"sandbox_id": sb, "run_id": "run-bad",
                                             "allow": allow, "allow_private": ["10.0.0.1/8"]})
            assert t == ERROR and b["code"] == -22 and "allow_private" in b["message"], b
            # the log: the sandbox's first three refusals of the kind (the three
            # loopback ones), the rest counted and told when its last run ends
            log = s.log("containerd-shim")
            strict_lines = [l for l in log.splitlines()
                            if "RUN_ID=run-strict" in l or "run-strict" in l]
            lo_lines = [l for l in strict_lines if "a loopback address" in l]
            assert len(lo_lines) == 3, lo_lines
            assert not [l for l in log.splitlines() if "resolves to" in l and
                        ("link-local" in l or "unspecified" in l)], log[-3000:]
            for run_id in ("run-strict", "run-lo"):
                t, b = call(s, "SANDBOX_UNLISTEN", {"sandbox_id": sb, "run_id": run_id})
                assert t == REPLY, b
            log = s.log("containerd-shim")
            assert (f"4 more refusals of class 'non-public address' from sandbox {sb} "
                    "suppressed") in log, log[-3000:]
    finally:
        srv.close()


# Refusals of five kinds, round robin, for `secs` seconds: the answer each
# got, counted by its status line ("closed" when the proxy closed at once).
FLOOD = r"""
import collections, socket, sys, time
proxy, secs = int(sys.argv[1]), float(sys.argv[2])
kinds = {
    "not-connect": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "ip-literal": b"CONNECT 10.1.2.3:443 HTTP/1.1\r\n\r\n",
    "malformed": b"CONNECT\r\n\r\n",
    "not-allowed": b"CONNECT evil.example:443 HTTP/1.1\r\n\r\n",
    "too-large": b"CONNECT a:1 HTTP/1.1\r\nX: " + b"y" * 9000,
}
got = collections.Counter()
end = time.time() + secs
while time.time() < end:
    for name, req in kinds.items():
        s = socket.create_connection(("127.0.0.1", proxy), timeout=10)
        try:
            s.sendall(req)
        except OSError:
            pass
        data = b""
        try:
            while b"\r\n" not in data:
                c = s.recv(4096)
                if not c:
                    break
                data += c
        except OSError:
            pass
        s.close()
        got[name + " " + (data.split(b"\r\n")[0].decode() or "closed")] += 1
for k, v in sorted(got.items()):
    print(v, k)
"""


def test_a_flood_of_refusals_logs_a_few_lines_and_a_count(s):
    """Issue 30 item 6: every kind of refusal is still answered, but only the
    first few per sandbox and kind reach the log; the rest are told as a
    count per kind when the run's listeners close."""
    assert sh(s, "net-flood", "true")[0] == 0
    sb = sandbox_id("net-flood")
    t, b = call(s, "SANDBOX_PROXY", {"sandbox_id": sb, "run_id": "run-flood",
                                     "allow": ["allowed.invalid:443"]})
    assert t == REPLY, b
    before = len(s.log("containerd-shim").splitlines())
    r = subprocess.run([SHIMCTL, sock_path(s), "net-flood", "--", "python3", "-c", FLOOD,
                        str(b["port"]), "3"], capture_output=True, text=True, timeout=60)
    counts = {}
    for line in r.stdout.splitlines():
        n, kind = line.split(" ", 1)
        counts[kind] = int(n)
    want = {"not-connect HTTP/1.1 405 Method Not Allowed", "ip-literal HTTP/1.1 403 Forbidden",
            "malformed HTTP/1.1 400 Bad Request", "not-allowed HTTP/1.1 403 Forbidden",
            "too-large HTTP/1.1 431 Request Header Fields Too Large"}
    assert set(counts) == want, (counts, r.stderr)
    assert min(counts.values()) >= 20, counts
    total = sum(counts.values())
    lines = s.log("containerd-shim").splitlines()[before:]
    mine = [l for l in lines if sb in l and "Proxy:" in l]
    # three per kind at most, while the flood made hundreds of refusals
    assert len(mine) <= 5 * 3, mine
    t, b = call(s, "SANDBOX_UNLISTEN", {"sandbox_id": sb, "run_id": "run-flood"})
    assert t == REPLY, b
    lines = s.log("containerd-shim").splitlines()[before:]
    held = 0
    for kind in ("not CONNECT", "IP literal", "malformed", "not on the allowlist",
                 "head too large"):
        m = [re.search(r"(\d+) more refusals of class '" + kind + "' from sandbox " + sb +
                       " suppressed", l) for l in lines]
        m = [x for x in m if x]
        assert len(m) == 1, (kind, lines[-20:])
        held += int(m[0].group(1))
    logged = len([l for l in lines if sb in l and "refused" in l.lower()
                  and "suppressed" not in l])
    assert logged + held == total, (logged, held, total)
    assert len([l for l in lines if sb in l and "Proxy:" in l]) == 5 * 4, lines


def test_explicit_port_binds_exactly_that_port_or_fails(s):
    """port: the re-listen after a shim restart (coordinatord asks for the port
    the harness's environment names): exactly that port, or EADDRINUSE."""
    d = tempfile.mkdtemp(dir=s.dir)
    with open(os.path.join(d, "hello.txt"), "w") as f:
        f.write("hello-fixed-port\n")
    httpd = serve(http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), lambda *a: Quiet(*a, directory=d)))
    try:
        assert sh(s, "net-port", "true")[0] == 0
        sb = sandbox_id("net-port")
        target = f"127.0.0.1:{httpd.server_port}"
        t, b = call(s, "SANDBOX_FORWARD", {"sandbox_id": sb, "run_id": "run-p1",
                                           "target": target, "port": 41234})
        assert (t, b) == (REPLY, {"port": 41234}), b
        rc, out = sh(s, "net-port", f"python3 -c \"{FETCH}\" http://127.0.0.1:41234/hello.txt")
        assert out == "hello-fixed-port\n", out
        # taken (by this run's forward, or another run's): an error, never another port
        for run_id in ("run-p1", "run-p2"):
            t, b = call(s, "SANDBOX_FORWARD", {"sandbox_id": sb, "run_id": run_id,
                                               "target": target, "port": 41234})
            assert t == ERROR and b["code"] == -98, b  # EADDRINUSE
            t, b = call(s, "SANDBOX_PROXY", {"sandbox_id": sb, "run_id": run_id,
                                             "allow": ["localhost:1"], "port": 41234})
            assert t == ERROR and b["code"] == -98, b
        # taken by a process inside the sandbox
        rc, _ = sh(s, "net-port", "python3 -c 'import socket,os,time\n"
                   "s=socket.socket(); s.bind((\"127.0.0.1\",41235)); s.listen()\n"
                   "open(\"/workspace/held\",\"w\").close(); time.sleep(30)' "
                   ">/dev/null 2>&1 & "
                   "while [ ! -e /workspace/held ]; do sleep 0.02; done")
        assert rc == 0
        t, b = call(s, "SANDBOX_PROXY", {"sandbox_id": sb, "run_id": "run-p2",
                                         "allow": ["localhost:1"], "port": 41235})
        assert t == ERROR and b["code"] == -98 and "Address already in use" in b["message"], b
        # a free one: the proxy is there, on that port
        t, b = call(s, "SANDBOX_PROXY", {"sandbox_id": sb, "run_id": "run-p2",
                                         "allow": ["localhost:1"], "port": 41236})
        assert (t, b) == (REPLY, {"port": 41236}), b
        rc, out = sh(s, "net-port", "curl -s -o /dev/null -w '%{http_code}' --max-time 5 "
                     "--proxy http://127.0.0.1:41236 http://localhost:1/")
        assert out == "405", out
        # port 0 is the kernel's choice; out of range is EINVAL
        t, b = call(s, "SANDBOX_FORWARD", {"sandbox_id": sb, "run_id": "run-p2",
                                           "target": target, "port": 0})
        assert t == REPLY and b["port"] not in (0, 41234, 41235, 41236), b
        t, b = call(s, "SANDBOX_FORWARD", {"sandbox_id": sb, "run_id": "run-p2",
                                           "target": target, "port": 65536})
        assert t == ERROR and b["code"] == -22, b
        for run_id in ("run-p1", "run-p2"):
            t, b = call(s, "SANDBOX_UNLISTEN", {"sandbox_id": sb, "run_id": run_id})
            assert t == REPLY, b
    finally:
        httpd.shutdown()
    assert "Cannot open a forward listener" in s.log("containerd-shim")


def _connect_as(path, uid, gid, groups):
    """Fork a child with these credentials that connects; True when the shim talks."""
    pid = os.fork()
    if pid == 0:
        ok = False
        try:
            os.setgroups(groups)
            os.setgid(gid)
            os.setuid(uid)
            c = Client(path, timeout=3)
            t, _ = c.call("EXEC_LIST", {})
            ok = t == REPLY
        except Exception:
            ok = False
        os._exit(0 if ok else 1)
    _, st = os.waitpid(pid, 0)
    return os.WEXITSTATUS(st) == 0


def test_socket_group_admits_members_only(s):
    path = sock_path(s)
    st = os.stat(path)
    assert (st.st_mode & 0o777, st.st_uid, st.st_gid) == (0o660, 0, 65534), oct(st.st_mode)
    # the directories on the way must let the test users through
    for p in (s.dir, os.path.dirname(path)):
        os.chmod(p, os.stat(p).st_mode | 0o011)
    assert _connect_as(path, 65534, 65534, [])          # primary group
    assert _connect_as(path, 65534, 4242, [65534])      # supplementary group
    assert not _connect_as(path, 65534, 4242, [4243])   # neither: the file mode stops it
    # and were the file mode looser, SO_PEERCRED/SO_PEERGROUPS would
    os.chmod(path, 0o666)
    try:
        assert not _connect_as(path, 65534, 4242, [4243])
    finally:
        os.chmod(path, 0o660)
    assert "Refusing a connection from uid 65534" in s.log("containerd-shim")
