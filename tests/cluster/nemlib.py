# SPDX-License-Identifier: MIT
"""The nemesis's machinery (tests/cluster/nemesis): network namespaces joined
by the TUN switch (netsw.py), nats-servers and runwarden nodes inside them,
clients that run inside a namespace, and a raw NATS direct-get reader.
Everything made is recorded in a manifest and undone by Lab.cleanup(), which
runs on success, failure, SIGINT and SIGTERM; a guard process (guard(), in a
session of its own) undoes what the manifest lists if the harness dies
without cleaning up (SIGKILL, a timeout's --kill-after)."""
import ctypes
import http.client
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from ipc import Ipc, IpcError  # noqa: E402  (python3-msgpack, a test dependency)

CLONE_NEWNET = 0x40000000
DEV = "nem0"
NET = "10.99.0."
libc = ctypes.CDLL(None, use_errno=True)


def enter_ns(ns):
    """Move the calling thread (only) into network namespace ns."""
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
    finally:
        os.close(fd)


def in_ns(ns, fn, *args, timeout=60):
    """fn(*args) on a thread inside namespace ns; its result (or exception)."""
    out = {}

    def go():
        try:
            enter_ns(ns)
            out["r"] = fn(*args)
        except BaseException as e:  # re-raised in the caller
            out["e"] = e
    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        raise TimeoutError(f"{fn.__name__} in {ns}")
    if "e" in out:
        raise out["e"]
    return out.get("r")


def http_req(method, path, body=None, headers=None, port=8080, timeout=15):
    """(status, parsed JSON or text) from 127.0.0.1:port in the caller's
    namespace; raises OSError/TimeoutError when nothing came back."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=None if body is None else json.dumps(body), headers=h)
        r = c.getresponse()
        data = r.read()
        try:
            return r.status, json.loads(data)
        except ValueError:
            return r.status, data.decode(errors="replace")
    finally:
        c.close()


class Proc:
    def __init__(self, name, argv, log, ns):
        self.name = name
        f = open(log, "ab")
        self.p = subprocess.Popen(["nsenter", f"--net=/run/netns/{ns}", "--"] + argv,
                                  stdout=f, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        f.close()
        self.log = log

    def signal(self, sig):
        if self.p.poll() is None:
            os.killpg(self.p.pid, sig)

    def stop(self, timeout=10):
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGCONT)
                os.killpg(self.p.pid, signal.SIGTERM)
                self.p.wait(timeout)
            except (subprocess.TimeoutExpired, ProcessLookupError):
                pass
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.p.wait(10)


class Lab:
    """N nodes n1..nN (10.99.0.11+) and N NATS servers s1..sN (10.99.0.21+),
    each in a namespace of its own, all joined by the switch."""

    def __init__(self, build, n=3, heartbeat_ms=500, node_ttl_ms=6000, extra_nats="",
                 extra_conf=""):
        self.build = os.path.abspath(build)
        self.n = n
        self.heartbeat_ms = heartbeat_ms
        self.node_ttl_ms = node_ttl_ms
        self.extra_nats = extra_nats
        self.extra_conf = extra_conf
        self.dir = tempfile.mkdtemp(prefix="rw-nemesis-")
        self.tag = f"rwnem{os.getpid()}"
        self.hosts = {}  # name -> ip
        for i in range(1, n + 1):
            self.hosts[f"n{i}"] = f"{NET}{10 + i}"
            self.hosts[f"s{i}"] = f"{NET}{20 + i}"
        self.made_ns = []
        self.procs = {}  # name -> Proc (nats sI, node nI/<daemon>)
        self.switch = None
        self.rules = {"blocked": [], "loss": 0, "delay_ms": 0, "jitter_ms": 0}
        self.lock = threading.Lock()
        self.manifest = os.path.join(tempfile.gettempdir(), f"{self.tag}-{id(self)}.manifest")
        self.save()
        self.guard = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--guard",
                                       str(os.getpid()), self.manifest],
                                      stdin=subprocess.DEVNULL, start_new_session=True)

    def save(self):
        """The manifest: what guard() removes if this process dies first."""
        pg = [p.p.pid for p in self.procs.values()]
        if self.switch:
            pg.append(self.switch.pid)
        tmp = self.manifest + ".new"
        with open(tmp, "w") as f:
            json.dump({"pgids": pg, "ns": self.made_ns, "dir": self.dir}, f)
        os.replace(tmp, self.manifest)

    def ns(self, host):
        return f"{self.tag}-{host}"

    # ---- network ----

    def net_up(self):
        for h in self.hosts:
            self.made_ns.append(self.ns(h))
            self.save()
            subprocess.run(["ip", "netns", "add", self.ns(h)], check=True)
            subprocess.run(["ip", "-n", self.ns(h), "link", "set", "lo", "up"], check=True)
        args = [f"{self.ns(h)}={ip}" for h, ip in self.hosts.items()]
        self.switch = subprocess.Popen([sys.executable, os.path.join(HERE, "netsw.py"), DEV] + args,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True, start_new_session=True)
        self.save()
        assert self.switch.stdout.readline().strip() == "ready", "the switch did not start"
        for h, ip in self.hosts.items():
            subprocess.run(["ip", "-n", self.ns(h), "addr", "add", f"{ip}/24", "dev", DEV],
                           check=True)
            subprocess.run(["ip", "-n", self.ns(h), "link", "set", DEV, "up"], check=True)

    def apply(self, **rules):
        """Replace the switch's rules; returns once they are in force."""
        with self.lock:
            self.rules = {"blocked": [], "loss": 0, "delay_ms": 0, "jitter_ms": 0}
            self.rules.update(rules)
            self.switch.stdin.write(json.dumps(self.rules) + "\n")
            self.switch.stdin.flush()
            assert self.switch.stdout.readline().strip() == "ok"

    def partition(self, *groups):
        """Every pair of hosts in different groups blocked, both ways."""
        blocked = []
        for gi, g in enumerate(groups):
            for h in groups[gi + 1:]:
                for a in g:
                    for b in h:
                        blocked += [[self.hosts[a], self.hosts[b]], [self.hosts[b], self.hosts[a]]]
        self.apply(blocked=blocked)

    def isolate(self, hosts):
        rest = [h for h in self.hosts if h not in hosts]
        self.partition(list(hosts), rest)

    def heal(self):
        self.apply()

    def stats(self):
        with self.lock:
            self.switch.stdin.write('{"stats": true}\n')
            self.switch.stdin.flush()
            return json.loads(self.switch.stdout.readline())

    # ---- NATS ----

    def nats_up(self):
        for i in range(1, self.n + 1):
            ip = self.hosts[f"s{i}"]
            d = os.path.join(self.dir, f"s{i}")
            os.makedirs(d)
            routes = ", ".join(f"nats-route://{self.hosts[f's{j}']}:6222"
                               for j in range(1, self.n + 1) if j != i)
            conf = os.path.join(d, "nats.conf")
            with open(conf, "w") as f:
                f.write(f"""server_name: s{i}
listen: {ip}:4222
http: 127.0.0.1:8222
jetstream {{
  store_dir: "{d}/js"
  max_memory_store: 64MB
  max_file_store: 1GB
}}
cluster {{
  name: nemesis
  listen: {ip}:6222
  routes: [{routes}]
}}
{self.extra_nats}
""")
            self.procs[f"s{i}"] = Proc(f"s{i}", ["nats-server", "-c", conf],
                                       os.path.join(d, "nats.log"), self.ns(f"s{i}"))
            self.save()
        deadline = time.time() + 90
        for i in range(1, self.n + 1):
            while True:
                try:
                    st, _ = in_ns(self.ns(f"s{i}"), http_req, "GET", "/healthz", None, None,
                                  8222, 2, timeout=5)
                    if st == 200:
                        break
                except (OSError, TimeoutError):
                    pass
                assert time.time() < deadline, f"s{i} not healthy"
                time.sleep(0.3)

    def nats_urls(self):
        return ",".join(f"nats://{self.hosts[f's{i}']}:4222" for i in range(1, self.n + 1))

    # ---- nodes ----

    def node_dir(self, i):
        return os.path.join(self.dir, f"n{i}")

    def node_up(self, i):
        d = self.node_dir(i)
        os.makedirs(d, exist_ok=True)
        conf = os.path.join(d, "runwarden.conf")
        with open(conf, "w") as f:
            f.write(f"""[runwarden]
runtime_dir = {d}/run
state_dir = {d}/state
log_level = info

[routerd]
listen = 127.0.0.1:8080

[containerd-shim]
max_instances = 20

[cluster]
nats = {self.nats_urls()}
node = n{i}
replicas = 3
heartbeat_ms = {self.heartbeat_ms}
node_ttl_ms = {self.node_ttl_ms}
{self.extra_conf}
""")
        for daemon in ("containerd-shim", "coordinatord", "routerd"):
            self.procs[f"n{i}/{daemon}"] = Proc(
                daemon, [os.path.join(self.build, daemon), "--config", conf],
                os.path.join(d, daemon + ".log"), self.ns(f"n{i}"))
            self.save()

    def wait_ready(self, i, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                st, _ = in_ns(self.ns(f"n{i}"), http_req, "GET", "/readyz", None, None, 8080, 3,
                              timeout=6)
                if st == 200:
                    return True
            except (OSError, TimeoutError):
                pass
            for k, p in self.procs.items():
                if k.startswith(f"n{i}/") and p.p.poll() is not None:
                    raise RuntimeError(f"{k} exited {p.p.returncode}: " + self.tail_log(p.log))
            time.sleep(0.3)
        raise RuntimeError(f"n{i} not ready in {timeout} s: " +
                           self.tail_log(os.path.join(self.node_dir(i), "coordinatord.log")))

    @staticmethod
    def tail_log(path, n=1500):
        try:
            with open(path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def sock(self, i):
        return os.path.join(self.node_dir(i), "run", "coordinatord.sock")

    def coord(self, i, name, body, timeout=10):
        c = Ipc(self.sock(i), timeout=timeout)
        try:
            return c.call(name, body)
        finally:
            c.close()

    def http(self, i, method, path, body=None, headers=None, timeout=15):
        return in_ns(self.ns(f"n{i}"), http_req, method, path, body, headers, 8080, timeout,
                     timeout=timeout + 5)

    def up(self):
        self.net_up()
        self.nats_up()
        for i in range(1, self.n + 1):
            self.node_up(i)
            self.wait_ready(i)  # one at a time: the streams are ensured by the first

    # ---- cleanup ----

    def cleanup(self, keep_dir=False):
        for name, p in list(self.procs.items()):
            if "/" in name:
                p.stop()
        for name, p in list(self.procs.items()):
            if "/" not in name:
                p.stop()
        self.procs.clear()
        if self.switch and self.switch.poll() is None:
            try:
                self.switch.stdin.close()
            except OSError:
                pass
            try:
                self.switch.wait(5)
            except subprocess.TimeoutExpired:
                self.switch.kill()
                self.switch.wait(5)
        for ns in self.made_ns:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        self.made_ns = []
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir_kept = keep_dir
        try:
            os.unlink(self.manifest)  # nothing left for the guard
        except FileNotFoundError:
            pass
        if self.guard.poll() is None:
            self.guard.terminate()
            self.guard.wait(10)


# ---- NATS direct gets (each server answers from its own replica) ----

class RawNats:
    """A minimal NATS client (the text protocol) for direct gets of RW_RUNS by
    stream seq: a server answers a direct get from its own replica, which is
    what comparing replicas needs."""

    def __init__(self, host, port=4222, timeout=5):
        self.s = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.line()  # INFO
        self.s.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,'
                       b'"no_responders":true,"protocol":1}\r\nSUB _NEM.r 1\r\nPING\r\n')
        while self.line() != b"PONG":
            pass

    def line(self):
        while b"\r\n" not in self.buf:
            d = self.s.recv(65536)
            if not d:
                raise OSError("closed")
            self.buf += d
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def exact(self, n):
        while len(self.buf) < n + 2:
            d = self.s.recv(65536)
            if not d:
                raise OSError("closed")
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n + 2:]
        return out

    def get_many(self, seqs):
        """{stream_seq: (headers dict, payload) or None (no message)}."""
        out = {}
        seqs = list(seqs)
        for k in range(0, len(seqs), 200):
            batch = seqs[k:k + 200]
            req = b"".join(b"PUB $JS.API.DIRECT.GET.RW_RUNS _NEM.r %d\r\n%s\r\n" %
                           (len(b), b) for b in (json.dumps({"seq": q}).encode() for q in batch))
            self.s.sendall(req)
            got = 0
            while got < len(batch):
                ln = self.line()
                if ln.startswith(b"PING"):
                    self.s.sendall(b"PONG\r\n")
                    continue
                if not ln.startswith(b"HMSG"):
                    continue
                parts = ln.split()
                hlen, tlen = int(parts[-2]), int(parts[-1])
                raw = self.exact(tlen)
                hdr, payload = raw[:hlen], raw[hlen:]
                h = {}
                lines = hdr.decode(errors="replace").split("\r\n")
                for l in lines[1:]:
                    if ":" in l:
                        a, _, b = l.partition(":")
                        h[a.strip()] = b.strip()
                got += 1
                if "Nats-Sequence" in h:
                    out[int(h["Nats-Sequence"])] = (h, payload)
                # a 404 (status line) is a seq this replica lacks or deleted
        return out

    def close(self):
        self.s.close()


def stream_last_seq(host):
    """RW_RUNS's last seq as server host's replica knows it (stream info)."""
    s = socket.create_connection((host, 4222), timeout=5)
    buf = b""
    s.sendall(b'CONNECT {"verbose":false,"headers":true,"protocol":1}\r\nSUB _NEM.i 1\r\n'
              b'PUB $JS.API.STREAM.INFO.RW_RUNS _NEM.i 0\r\n\r\n')
    try:
        while True:
            while b"\r\n" not in buf:
                buf += s.recv(65536)
            ln, buf = buf.split(b"\r\n", 1)
            if ln.startswith(b"PING"):
                s.sendall(b"PONG\r\n")
            if ln.startswith(b"MSG"):
                n = int(ln.split()[-1])
                while len(buf) < n + 2:
                    buf += s.recv(65536)
                info = json.loads(buf[:n])
                return info.get("state", {}).get("last_seq", 0)
    finally:
        s.close()


def replica_view(lab, server):
    """{stream_seq: (subject, msg_id, rw_seq, payload)} of server's replica
    of RW_RUNS, read from inside n1's namespace... any namespace that reaches
    the server: the caller picks one (after the heal, all do)."""
    host = lab.hosts[server]

    def go():
        last = stream_last_seq(host)
        c = RawNats(host)
        try:
            got = c.get_many(range(1, last + 1))
        finally:
            c.close()
        return {q: (h.get("Nats-Subject"), h.get("Nats-Msg-Id"), events_of(h, p))
                for q, (h, p) in got.items()}
    return in_ns(lab.ns("n1"), go, timeout=120)


def events_of(h, payload):
    """[(seq, bytes)] of one RW_RUNS message (daemons/coordinatord/cluster/cluster-msg.c):
    one event (Rw-Seq), or Rw-Count netstrings from Rw-First."""
    if "Rw-Seq" in h:
        return [(int(h["Rw-Seq"]), payload)]
    if "Rw-First" not in h:
        return []
    out, q, rest = [], int(h["Rw-First"]), payload
    while rest:
        n, _, rest = rest.partition(b":")
        n = int(n)
        out.append((q, rest[:n]))
        rest = rest[n + 1:]
        q += 1
    return out


def guard(parent, manifest):
    """Wait for process parent to end; then undo what manifest lists (its
    process groups, namespaces and state dir), unless it was removed (the
    harness cleaned up itself)."""
    # A SIGTERM does not end it: the manifest does (the harness removes it
    # when it cleaned up, then terminates this). A SIGTERM to everything at
    # once (a whole `./dev test` stopped) used to end it before the harness,
    # which may die before its own clean-up ends: namespaces and servers
    # were left behind.
    signal.signal(signal.SIGTERM, lambda *a: None)
    while os.path.exists(manifest):
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            break
        time.sleep(0.5)
    try:
        with open(manifest) as f:
            m = json.load(f)
    except (OSError, ValueError):
        return
    for pg in m["pgids"]:
        for sig in (signal.SIGCONT, signal.SIGKILL):
            try:
                os.killpg(pg, sig)
            except (ProcessLookupError, PermissionError):
                pass
    time.sleep(0.5)
    for ns in m["ns"]:
        subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
    shutil.rmtree(m["dir"], ignore_errors=True)
    os.unlink(manifest)


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--guard":
    guard(int(sys.argv[2]), sys.argv[3])
