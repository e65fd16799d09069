# SPDX-License-Identifier: MIT
"""A minimal msgpack encoder/decoder and a raw runwarden frame client, for
tests that must send what no well-behaved client sends (malformed requests).
Only the types of the protocol: nil, bool, int, str, bin, array, map."""
import socket
import struct


def pack(o):
    if o is None:
        return b"\xc0"
    if o is True:
        return b"\xc3"
    if o is False:
        return b"\xc2"
    if isinstance(o, int):
        if 0 <= o < 128:
            return bytes([o])
        if -32 <= o < 0:
            return struct.pack("b", o)
        if o >= 0:
            return b"\xcf" + struct.pack(">Q", o)
        return b"\xd3" + struct.pack(">q", o)
    if isinstance(o, str):
        b = o.encode("utf-8", "surrogatepass")
        return b"\xdb" + struct.pack(">I", len(b)) + b
    if isinstance(o, (bytes, bytearray)):
        return b"\xc6" + struct.pack(">I", len(o)) + bytes(o)
    if isinstance(o, (list, tuple)):
        return b"\xdd" + struct.pack(">I", len(o)) + b"".join(pack(x) for x in o)
    if isinstance(o, dict):
        return b"\xdf" + struct.pack(">I", len(o)) + b"".join(
            pack(k) + pack(v) for k, v in o.items())
    raise TypeError(type(o))


def unpack(b, i=0):
    """(object, next index)."""
    t = b[i]
    if t < 0x80:
        return t, i + 1
    if t >= 0xe0:
        return t - 256, i + 1
    if 0x80 <= t <= 0x8f:
        return _map(b, i + 1, t & 0x0f)
    if 0x90 <= t <= 0x9f:
        return _arr(b, i + 1, t & 0x0f)
    if 0xa0 <= t <= 0xbf:
        n = t & 0x1f
        return b[i + 1:i + 1 + n].decode(), i + 1 + n
    simple = {0xc0: None, 0xc2: False, 0xc3: True}
    if t in simple:
        return simple[t], i + 1
    ints = {0xcc: ">B", 0xcd: ">H", 0xce: ">I", 0xcf: ">Q",
            0xd0: ">b", 0xd1: ">h", 0xd2: ">i", 0xd3: ">q"}
    if t in ints:
        n = struct.calcsize(ints[t])
        return struct.unpack(ints[t], b[i + 1:i + 1 + n])[0], i + 1 + n
    lens = {0xd9: (">B", "s"), 0xda: (">H", "s"), 0xdb: (">I", "s"),
            0xc4: (">B", "b"), 0xc5: (">H", "b"), 0xc6: (">I", "b"),
            0xdc: (">H", "a"), 0xdd: (">I", "a"), 0xde: (">H", "m"), 0xdf: (">I", "m")}
    fmt, kind = lens[t]
    n0 = struct.calcsize(fmt)
    n = struct.unpack(fmt, b[i + 1:i + 1 + n0])[0]
    j = i + 1 + n0
    if kind == "s":
        return b[j:j + n].decode(), j + n
    if kind == "b":
        return bytes(b[j:j + n]), j + n
    if kind == "a":
        return _arr(b, j, n)
    return _map(b, j, n)


def _arr(b, i, n):
    out = []
    for _ in range(n):
        o, i = unpack(b, i)
        out.append(o)
    return out, i


def _map(b, i, n):
    out = {}
    for _ in range(n):
        k, i = unpack(b, i)
        v, i = unpack(b, i)
        out[k] = v
    return out, i


HELLO, REPLY, ERROR = 1, 2, 3
MSG = {"SANDBOX_ENSURE": 30, "SANDBOX_DESTROY": 31, "EXEC_START": 32, "EXEC_KILL": 33,
       "EXEC_ATTACH": 34, "EXEC_LIST": 35, "SANDBOX_STATS": 36, "SANDBOX_FORWARD": 37,
       "SANDBOX_PROXY": 38, "SANDBOX_UNLISTEN": 39,
       "EXEC_OUTPUT": 40, "EXEC_EXIT": 41, "SANDBOX_QUEUED": 42}


class Client:
    """Blocking frame client: HELLO as 'client', then call() / raw()."""

    def __init__(self, path, timeout=10):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(timeout)
        self.s.connect(path)
        self.next_id = 0
        self.pushes = []
        self.send(HELLO, 0, {"version": 1, "role": "client", "pid": 1})
        t, _, _ = self.read()
        assert t == HELLO, t

    def raw(self, data):
        self.s.sendall(data)

    def send(self, t, req_id, body):
        payload = pack([t, req_id, body])
        self.raw(struct.pack(">I", len(payload)) + payload)

    def read(self):
        hdr = self._full(4)
        if hdr is None:
            return None
        (n,) = struct.unpack(">I", hdr)
        frame, _ = unpack(self._full(n))
        return frame

    def _full(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.s.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return buf

    def call(self, name, body):
        """(REPLY or ERROR, body); pushes in between are kept in self.pushes."""
        self.next_id += 1
        self.send(MSG[name], self.next_id, body)
        while True:
            f = self.read()
            assert f is not None, "connection closed"
            t, rid, b = f
            if t in (REPLY, ERROR) and rid == self.next_id:
                return t, b
            self.pushes.append(f)

    def closed(self):
        try:
            return self.read() is None
        except (ConnectionError, OSError):
            return True

    def close(self):
        self.s.close()
