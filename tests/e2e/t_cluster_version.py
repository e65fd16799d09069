# SPDX-License-Identifier: MIT
"""Issue 35 G: a node checks the version of its nats-server at start-up
(docs/CLUSTER.md "nats-server versions"). A fake server that speaks just
enough of the NATS protocol for a client to connect and says it is 2.8.4:
the node refuses to join (logged with the version and the minimum, not
ready); a real 2.9 server: the version is logged and the node is ready."""
import json
import os
import re
import socket
import threading

import rwtest
from rwcluster import Cluster
from rwtest import poll

NO_SUITE = True


class FakeNats(threading.Thread):
    def __init__(self, version):
        super().__init__(daemon=True)
        self.version = version
        self.ls = socket.socket()
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0))
        self.ls.listen(8)
        self.port = self.ls.getsockname()[1]
        self.conns = []

    def run(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self.serve, args=(c,), daemon=True).start()

    def serve(self, c):
        info = {"server_id": "FAKE", "server_name": "fake", "version": self.version,
                "proto": 1, "go": "go1.19", "host": "127.0.0.1", "port": self.port,
                "headers": True, "max_payload": 1048576, "jetstream": True}
        try:
            c.sendall(f"INFO {json.dumps(info)}\r\n".encode())
            buf = b""
            while True:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
                while b"\r\n" in buf:
                    line, buf = buf.split(b"\r\n", 1)
                    if line.startswith(b"PING"):
                        c.sendall(b"PONG\r\n")
        except OSError:
            return

    def close(self):
        self.ls.close()
        for c in self.conns:
            c.close()


def test_an_old_server_is_refused_at_start():
    fake = FakeNats("2.8.4")
    fake.start()
    s = rwtest.Suite(f"[cluster]\nnats = nats://127.0.0.1:{fake.port}\nnode = v1\nreplicas = 1\n")
    s.expected_errors = [r"nats-server 2\.8\.4", r"[Cc]luster", r"NATS"]
    try:
        s.start()
        assert poll(lambda: "nats-server 2.8.4" in s.log("coordinatord"), timeout=15), \
            s.log("coordinatord")[-1500:]
        line = next(l for l in s.log("coordinatord").splitlines() if "nats-server 2.8.4" in l)
        assert "older than 2.9.0" in line and line.startswith("<3>"), line
        assert s.http("GET", "/readyz")[0] == 503
    finally:
        problems = s.stop()
        s.cleanup()
        fake.close()
    assert not problems, problems


def test_a_real_server_version_is_logged():
    c = Cluster()
    try:
        a = c.node("a")
        log = a.log("coordinatord")
        assert "cluster: nats-server 2." in log, log[-1500:]
        # older than the oldest measured without diverged replicas: a warning
        # (issue 35 G; Debian 12's 2.9.10), and the node is ready all the same
        v = re.search(r"cluster: nats-server (\d+)\.(\d+)\.(\d+) at", log)
        assert v, log[-1500:]
        old = tuple(int(x) for x in v.groups()) < (2, 10, 27)
        assert ("older than 2.10.27" in log) == old, log[-1500:]
    finally:
        c.stop_all()
