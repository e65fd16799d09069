# SPDX-License-Identifier: MIT
"""Raw-socket HTTP and WebSocket helpers for the t_router_* tests (this module
has no test_* functions; run.py imports it and finds nothing to run).

The WebSocket client is written by hand on purpose: it must be able to send
what a well-behaved library refuses to (unmasked frames, RSV bits, reserved
opcodes, oversize or fragmented control frames, bad UTF-8, bad close codes)."""
import asyncio
import base64
import hashlib
import os
import socket
import struct
import time

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
WS_KEY = "dGhlIHNhbXBsZSBub25jZQ=="


def connect(port, timeout=5.0):
    c = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def read_all(sock, timeout=3.0):
    """Everything until EOF (or the timeout: then what came so far and False)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            b = sock.recv(65536)
            if not b:
                return data, True
            data += b
    except socket.timeout:
        return data, False
    except ConnectionResetError:
        return data, True


def rss_kib(s):
    """routerd's resident set size (VmRSS), in KiB."""
    with open(f"/proc/{s.procs['routerd'].pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


async def sample_rss(s, peak, stop):
    """Keep peak[0] at routerd's highest rss_kib until stop (an asyncio.Event)
    is set."""
    while not stop.is_set():
        peak[0] = max(peak[0], rss_kib(s))
        await asyncio.sleep(0.05)


def slow_tail(s, path, ws=True, rcvbuf=4096):
    """A client of the tail at path (WebSocket, or SSE) with a tiny receive
    window that never reads."""
    k = socket.socket()
    k.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    k.connect(("127.0.0.1", s.port))
    if ws:
        k.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
                  f"Sec-WebSocket-Key: {WS_KEY}\r\n\r\n".encode())
    else:
        k.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n"
                  .encode())
    return k


class Response:
    def __init__(self, status, reason, headers, body):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body

    def header(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def json(self):
        import json
        return json.loads(self.body)

    def __repr__(self):
        return f"<{self.status} {self.headers} {self.body[:200]!r}>"


def parse_responses(data):
    """Split a byte stream into complete HTTP/1.1 responses (Content-Length
    framed, as routerd always sends). Returns (responses, leftover)."""
    out = []
    while True:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            return out, data
        head = data[:end].decode("latin-1").split("\r\n")
        ver, status, reason = (head[0].split(" ", 2) + [""])[:3]
        assert ver in ("HTTP/1.1", "HTTP/1.0"), head[0]
        headers = [tuple(x.strip() for x in h.split(":", 1)) for h in head[1:]]
        n = 0
        for k, v in headers:
            if k.lower() == "content-length":
                n = int(v)
        if int(status) in (101, 100) and not n:
            n = 0
        if len(data) < end + 4 + n:
            return out, data
        out.append(Response(int(status), reason, headers, data[end + 4:end + 4 + n]))
        data = data[end + 4 + n:]


def exchange(port, raw, timeout=3.0):
    """Send raw bytes, read until the server closes; (responses, leftover, closed)."""
    c = connect(port)
    try:
        c.sendall(raw)
        data, closed = read_all(c, timeout)
    finally:
        c.close()
    resps, rest = parse_responses(data)
    return resps, rest, closed


# ---- WebSocket ----

OP_CONT, OP_TEXT, OP_BIN, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


def frame(opcode, payload=b"", fin=True, rsv=0, mask=True, length=None):
    """One WebSocket frame; length overrides the encoded payload length."""
    b0 = (0x80 if fin else 0) | (rsv << 4) | opcode
    n = len(payload) if length is None else length
    m = 0x80 if mask else 0
    if n < 126:
        hdr = struct.pack("!BB", b0, m | n)
    elif n < 65536:
        hdr = struct.pack("!BBH", b0, m | 126, n)
    else:
        hdr = struct.pack("!BBQ", b0, m | 127, n)
    if not mask:
        return hdr + payload
    key = os.urandom(4)
    masked = bytes(c ^ key[i % 4] for i, c in enumerate(payload))
    return hdr + key + masked


def close_payload(code=None, reason=b""):
    return b"" if code is None else struct.pack("!H", code) + reason


class WsClient:
    """A raw WebSocket connection on the tail route of run (thread)."""

    def __init__(self, port, path, extra_headers="", timeout=5.0):
        self.sock = connect(port, timeout)
        self.buf = b""
        req = (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
               f"Sec-WebSocket-Key: {WS_KEY}\r\n{extra_headers}\r\n")
        self.sock.sendall(req.encode())
        while b"\r\n\r\n" not in self.buf:
            b = self.sock.recv(65536)
            if not b:
                raise ConnectionError(f"closed during the handshake: {self.buf!r}")
            self.buf += b
        end = self.buf.index(b"\r\n\r\n")
        head = self.buf[:end].decode("latin-1")
        self.buf = self.buf[end + 4:]
        self.status = int(head.split(" ")[1])
        if self.status != 101:
            raise ConnectionError(f"handshake refused: {head}")
        want = base64.b64encode(hashlib.sha1(WS_KEY.encode() + GUID).digest()).decode()
        assert f"Sec-WebSocket-Accept: {want}" in head, head

    def send(self, data):
        self.sock.sendall(data)

    def _need(self, n, deadline):
        while len(self.buf) < n:
            self.sock.settimeout(max(0.01, deadline - time.time()))
            b = self.sock.recv(65536)
            if not b:
                raise EOFError("connection closed")
            self.buf += b

    def recv_frame(self, timeout=5.0):
        """(fin, rsv, opcode, payload) of the next server frame."""
        deadline = time.time() + timeout
        self._need(2, deadline)
        b0, b1 = self.buf[0], self.buf[1]
        assert not b1 & 0x80, "server frames must not be masked"
        n, off = b1 & 0x7F, 2
        if n == 126:
            self._need(4, deadline)
            n, off = struct.unpack("!H", self.buf[2:4])[0], 4
        elif n == 127:
            self._need(10, deadline)
            n, off = struct.unpack("!Q", self.buf[2:10])[0], 10
        self._need(off + n, deadline)
        payload = self.buf[off:off + n]
        self.buf = self.buf[off + n:]
        return bool(b0 & 0x80), (b0 >> 4) & 7, b0 & 0x0F, payload

    def expect_close(self, timeout=5.0, skip_data=True):
        """Read until the server's close frame; returns (code, reason). Pongs
        and data frames before it are skipped (data only with skip_data)."""
        deadline = time.time() + timeout
        while True:
            fin, rsv, op, p = self.recv_frame(max(0.01, deadline - time.time()))
            if op == OP_CLOSE:
                code = struct.unpack("!H", p[:2])[0] if len(p) >= 2 else None
                return code, p[2:].decode("utf-8", "replace")
            assert skip_data or op in (OP_PONG, OP_PING), (op, p)

    def expect_eof(self, timeout=1.0):
        """True when the server closes TCP within timeout (all input discarded)."""
        self.sock.settimeout(timeout)
        t0 = time.time()
        try:
            while time.time() - t0 < timeout + 0.2:
                if not self.sock.recv(65536):
                    return True
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True
        return False

    def close(self):
        self.sock.close()
