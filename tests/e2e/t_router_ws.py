# SPDX-License-Identifier: MIT
"""WebSocket conformance of the tail route (BENCH-RELIABILITY R6): a case list
modelled on the Autobahn testsuite's categories, driven by a raw-socket
client that can send what a real client library would refuse to. Each case
asserts the RFC 6455 reaction: the close code, and TCP closed by the server
within 1 s of the close frame."""
import struct
import time

from t_router_lib import (OP_BIN, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT, WsClient,
                          close_payload, connect, frame, parse_responses, read_all)

RUN = {}


def tail_path(s):
    # One long run serves every case: the tail stays open while it sleeps.
    if "id" not in RUN:
        RUN["id"] = s.start_run("sleep 120", thread="t-ws")
    return f"/runs/{RUN['id']}/stream?threadId=t-ws"


def ws(s):
    return WsClient(s.port, tail_path(s))


def expect_pong(w, payload, timeout=5.0):
    deadline = time.time() + timeout
    while True:
        fin, rsv, op, p = w.recv_frame(max(0.01, deadline - time.time()))
        if op == OP_PONG:
            assert fin and rsv == 0 and p == payload, (fin, rsv, p)
            return
        assert op == OP_TEXT, (op, p)  # tail events may come first


def check_close(s, data, code, what):
    """Send data on a fresh tail; the server must answer close(code) and end
    the TCP connection within 1 s."""
    w = ws(s)
    try:
        w.send(data)
        got, _ = w.expect_close(5)
        t0 = time.time()
        eof = w.expect_eof(1.0)
        assert got == code, f"{what}: close code {got}, want {code}"
        assert eof and time.time() - t0 <= 1.2, f"{what}: TCP not closed within 1 s"
    finally:
        w.close()


# ---- 1/2: framing, pings and pongs ----

def test_client_text_and_binary_messages_are_ignored(s):
    w = ws(s)
    for n in (0, 1, 125, 126, 65535, 65536 - 1000):
        w.send(frame(OP_TEXT, b"a" * n))
        w.send(frame(OP_BIN, bytes(range(256)) * (n // 256)))
    w.send(frame(OP_PING, b"still-there"))
    expect_pong(w, b"still-there")
    w.close()


def test_ping_with_empty_and_125_byte_payload_gets_identical_pong(s):
    w = ws(s)
    for p in (b"", b"x", bytes(range(125))):
        w.send(frame(OP_PING, p))
        expect_pong(w, p)
    w.close()


def test_ping_with_126_byte_payload_is_1002(s):
    check_close(s, frame(OP_PING, b"x" * 126), 1002, "oversize ping")


def test_unsolicited_pong_is_ignored(s):
    w = ws(s)
    w.send(frame(OP_PONG, b"unsolicited"))
    w.send(frame(OP_PING, b"after"))
    expect_pong(w, b"after")
    w.close()


def test_frames_sent_byte_by_byte_are_reassembled(s):
    w = ws(s)
    data = frame(OP_PING, b"slowly")
    for i in range(len(data)):
        w.send(data[i:i + 1])
        time.sleep(0.005)
    expect_pong(w, b"slowly")
    w.close()


def test_unmasked_client_frame_is_1002(s):
    check_close(s, frame(OP_TEXT, b"hello", mask=False), 1002, "unmasked text")
    check_close(s, frame(OP_PING, b"hello", mask=False), 1002, "unmasked ping")


# ---- 3: reserved bits ----

def test_rsv_bits_are_1002(s):
    for rsv in range(1, 8):
        check_close(s, frame(OP_TEXT, b"hi", rsv=rsv), 1002, f"text RSV={rsv}")
    check_close(s, frame(OP_PING, b"hi", rsv=4), 1002, "ping RSV=4")


# ---- 4: opcodes ----

def test_reserved_opcodes_are_1002(s):
    for op in (3, 4, 5, 6, 7, 11, 12, 13, 14, 15):
        check_close(s, frame(op, b"x"), 1002, f"opcode {op}")


# ---- 5: fragmentation ----

def test_fragmented_ping_is_1002(s):
    check_close(s, frame(OP_PING, b"ab", fin=False) + frame(OP_CONT, b"cd"), 1002,
                "fragmented ping")


def test_fragmented_close_is_1002(s):
    check_close(s, frame(OP_CLOSE, close_payload(1000), fin=False), 1002, "fragmented close")


def test_continuation_without_a_start_is_1002(s):
    check_close(s, frame(OP_CONT, b"x"), 1002, "lone continuation")
    check_close(s, frame(OP_CONT, b"x", fin=False), 1002, "lone unfinished continuation")


def test_new_message_inside_a_fragmented_one_is_1002(s):
    check_close(s, frame(OP_TEXT, b"a", fin=False) + frame(OP_TEXT, b"b"), 1002,
                "text inside text")
    check_close(s, frame(OP_BIN, b"a", fin=False) + frame(OP_TEXT, b"b", fin=False), 1002,
                "text inside binary")


def test_pings_interleaved_in_a_fragmented_message_are_answered(s):
    w = ws(s)
    w.send(frame(OP_TEXT, b"frag1", fin=False) + frame(OP_PING, b"p1") +
           frame(OP_CONT, b"frag2", fin=False) + frame(OP_PING, b"p2") + frame(OP_PONG, b"x") +
           frame(OP_CONT, b"frag3"))
    expect_pong(w, b"p1")
    expect_pong(w, b"p2")
    w.send(frame(OP_PING, b"p3"))  # the message ended cleanly: still a session
    expect_pong(w, b"p3")
    w.close()


def test_many_small_fragments_form_one_message(s):
    w = ws(s)
    w.send(frame(OP_TEXT, b"", fin=False) +
           b"".join(frame(OP_CONT, b"x", fin=False) for _ in range(500)) + frame(OP_CONT, b""))
    w.send(frame(OP_PING, b"after"))
    expect_pong(w, b"after")
    w.close()


# ---- 6: UTF-8 ----

BAD_UTF8 = [
    b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80edited",  # surrogate
    b"\xff",
    b"\xc0\xaf",                     # overlong '/'
    b"\xe0\x80\xaf",                 # overlong
    b"\xf4\x90\x80\x80",             # > U+10FFFF
    b"\x80",                         # lone continuation byte
    b"abc\xe2\x82",                  # truncated at the end
]


def test_invalid_utf8_text_is_1007(s):
    for b in BAD_UTF8:
        check_close(s, frame(OP_TEXT, b), 1007, f"text {b!r}")


def test_invalid_utf8_split_across_fragments_is_1007(s):
    # Each fragment is a valid prefix or suffix alone only when joined right.
    check_close(s, frame(OP_TEXT, b"\xce\xba\xe1", fin=False) + frame(OP_CONT, b"\xbd\xb9\xed") +
                frame(OP_CONT, b"\xa0\x80"), 1007, "surrogate across fragments")
    check_close(s, frame(OP_TEXT, b"ok\xe2\x82", fin=False) + frame(OP_CONT, b"x"), 1007,
                "codepoint cut by a fragment boundary")


def test_valid_utf8_split_inside_a_codepoint_is_fine(s):
    euro = "κόσμε €".encode()
    w = ws(s)
    w.send(frame(OP_TEXT, euro[:3], fin=False) + frame(OP_CONT, euro[3:9], fin=False) +
           frame(OP_CONT, euro[9:]))
    w.send(frame(OP_PING, b"ok"))
    expect_pong(w, b"ok")
    w.close()


# ---- 7: close handshake ----

def test_close_handshake_echoes_valid_codes_and_closes_tcp(s):
    for code in (1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 3000, 3999, 4000, 4999):
        check_close(s, frame(OP_CLOSE, close_payload(code, b"bye")), code, f"close {code}")


def test_close_without_payload_is_answered(s):
    w = ws(s)
    w.send(frame(OP_CLOSE))
    code, _ = w.expect_close()
    assert code in (None, 1000), code
    assert w.expect_eof(1.0)
    w.close()


def test_close_with_invalid_or_reserved_codes_is_1002(s):
    for code in (0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535):
        check_close(s, frame(OP_CLOSE, close_payload(code)), 1002, f"close {code}")


def test_close_with_one_byte_payload_is_1002(s):
    check_close(s, frame(OP_CLOSE, b"\x03"), 1002, "1-byte close")


def test_close_with_invalid_utf8_reason_is_1007(s):
    check_close(s, frame(OP_CLOSE, close_payload(1000, b"\xce\xba\xe1\xbd\xb9\xcf\x83\xed\xa0\x80")),
                1007, "bad close reason")


def test_close_with_125_byte_reason_is_echoed(s):
    check_close(s, frame(OP_CLOSE, close_payload(1000, b"r" * 123)), 1000, "123-byte reason")


def test_frames_after_the_close_are_ignored(s):
    check_close(s, frame(OP_CLOSE, close_payload(1000)) + frame(OP_PING, b"late") +
                frame(OP_TEXT, b"late"), 1000, "data after close")


# ---- 9: limits ----

def test_message_over_the_limit_is_1009(s):
    check_close(s, frame(OP_BIN, b"x" * 70000), 1009, "70 kB binary")
    check_close(s, frame(OP_TEXT, b"x" * 40000, fin=False) + frame(OP_CONT, b"x" * 40000), 1009,
                "fragmented 80 kB text")


def test_announced_64bit_length_over_the_limit_is_1009(s):
    # Only the header and a few payload bytes: refused on the announced length.
    check_close(s, frame(OP_BIN, b"", length=1 << 40) + b"\0" * 8, 1009,
                "2^40 announced")


def test_64bit_length_with_top_bit_set_is_1002(s):
    hdr = struct.pack("!BBQ", 0x82, 0xFF, 1 << 63) + b"\0\0\0\0"
    check_close(s, hdr + b"\0" * 8, 1002, "length with MSB set")


# ---- handshake ----

def test_handshake_requirements(s):
    path = tail_path(s)
    base = {"Host": f"127.0.0.1:{s.port}", "Upgrade": "websocket", "Connection": "Upgrade",
            "Sec-WebSocket-Version": "13", "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}

    def req(hdrs, version=b"HTTP/1.1"):
        raw = b"GET " + path.encode() + b" " + version + b"\r\n" + b"".join(
            f"{k}: {v}\r\n".encode() for k, v in hdrs.items()) + b"\r\n"
        c = connect(s.port)
        c.sendall(raw)
        c.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data:
            b = c.recv(65536)
            if not b:
                break
            data += b
        c.close()
        return int(data.split(b" ")[1])

    ok = dict(base)
    assert req(ok) == 101
    # tokens are case-insensitive and may be in a list
    assert req(dict(base, Upgrade="WebSocket", Connection="keep-alive, UPGRADE")) == 101
    for k, v in (("Sec-WebSocket-Version", "8"), ("Sec-WebSocket-Key", "short"),
                 ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ"),
                 ("Upgrade", "h2c"), ("Connection", "keep-alive")):
        assert req(dict(base, **{k: v})) == 400, (k, v)
    no_key = dict(base)
    del no_key["Sec-WebSocket-Key"]
    assert req(no_key) == 400
    no_upgrade = dict(base)
    del no_upgrade["Upgrade"]
    assert req(no_upgrade) == 426


def test_other_tails_survive_a_misbehaving_client(s):
    good = ws(s)
    for i in range(20):
        check_close(s, frame(OP_TEXT, b"\xff"), 1007, "bad utf-8")
    good.send(frame(OP_PING, b"alive"))
    expect_pong(good, b"alive")
    good.close()
    st, _ = s.http("GET", "/healthz")
    assert st == 200
