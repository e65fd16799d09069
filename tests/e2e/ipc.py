# SPDX-License-Identifier: MIT
"""A blocking client of the internal protocol (docs/PROTOCOL.md), for tests:
length-prefixed msgpack frames [type, req_id, body] over a Unix socket, HELLO
as role 'client' (or another role, to test what a daemon accepts from it). Message type ids are read from common/proto/messages.def."""
import json
import os
import re
import socket
import struct

import msgpack

DEF = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "common", "proto",
                   "messages.def")
MSG = {m.group(1): int(m.group(2))
       for m in re.finditer(r"^MSG\((\w+), (\d+),", open(DEF).read(), re.M)}


def status_metrics(c):
    """coordinatord's unlabelled /metrics lines as {name: value}, from STATUS_GET on
    the Ipc c."""
    out = {}
    for line in c.call("STATUS_GET", {})["metrics"].splitlines():
        if line and not line.startswith("#") and "{" not in line:
            k, v = line.split()
            out[k] = float(v)
    return out


def append_value(c, run_id, n):
    """RUN_APPEND on the Ipc c of the tests' marker event, a CUSTOM "n"
    carrying n; the reply ({"seq"})."""
    return c.call("RUN_APPEND", {"run_id": run_id, "chunk": json.dumps(
        {"type": "CUSTOM", "name": "n", "value": n})})


class IpcError(Exception):
    def __init__(self, code, message, reason=None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.reason = reason  # ERROR.reason, None when the peer sent none


class Ipc:
    def __init__(self, path, timeout=10, role="client"):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""
        self.next_id = 0
        self.pushes = []
        self.send(MSG["HELLO"], 0, {"version": 1, "role": role, "pid": os.getpid()})
        t, _, body = self.recv()
        assert t == MSG["HELLO"], t

    def close(self):
        self.sock.close()

    def send(self, t, req_id, body):
        payload = msgpack.packb([t, req_id, body], use_bin_type=True)
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)

    def recv(self):
        while True:
            if len(self.buf) >= 4:
                n = struct.unpack(">I", self.buf[:4])[0]
                if len(self.buf) >= 4 + n:
                    frame = msgpack.unpackb(self.buf[4:4 + n], raw=False)
                    self.buf = self.buf[4 + n:]
                    return frame
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError("connection closed")
            self.buf += d

    def call_async(self, name, body):
        self.next_id += 1
        self.send(MSG[name], self.next_id, body)
        return self.next_id

    def wait(self, req_id):
        while True:
            t, rid, body = self.recv()
            if rid == req_id and t == MSG["REPLY"]:
                return body
            if rid == req_id and t == MSG["ERROR"]:
                raise IpcError(body.get("code"), body.get("message"), body.get("reason"))
            self.pushes.append((t, rid, body))

    def call(self, name, body):
        return self.wait(self.call_async(name, body))
