# SPDX-License-Identifier: MIT
"""routerd's HTTP/1.1 front against malformed and adversarial requests
(BENCH-RELIABILITY R8): every smuggling shape is refused with a JSON 400 (or
413/431/505) and the connection is closed, so a request hidden behind it is
never parsed; keep-alive and pipelining answer in order."""
import json
import socket
import time

from t_router_lib import connect, exchange, parse_responses, read_all

# the raw requests below name the server "x"
SUITE_CONF = """[routerd]
server_names = x
"""

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def post(body_headers, body=b""):
    return (b"POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
            body_headers + b"\r\n" + body)


# (name, raw request, status, code). Each is followed on the same socket by a
# valid GET /healthz that must never be answered.
BAD = [
    ("CL+TE", post(b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"),
     400, "bad_request"),
    ("TE+CL", post(b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", b"0\r\n\r\n"),
     400, "bad_request"),
    ("duplicate CL", post(b"Content-Length: 2\r\nContent-Length: 2\r\n", b"{}"), 400, "bad_request"),
    ("conflicting CL", post(b"Content-Length: 2\r\nContent-Length: 3\r\n", b"{}x"),
     400, "bad_request"),
    ("CL list", post(b"Content-Length: 2, 2\r\n", b"{}"), 400, "bad_request"),
    ("CL sign", post(b"Content-Length: +2\r\n", b"{}"), 400, "bad_request"),
    ("CL hex", post(b"Content-Length: 0x2\r\n", b"{}"), 400, "bad_request"),
    ("bare LF everywhere", b"GET /healthz HTTP/1.1\nHost: x\n\n", 400, "bad_request"),
    ("bare LF in one header", b"GET /healthz HTTP/1.1\r\nHost: x\nX-A: y\r\n\r\n", 400,
     "bad_request"),
    ("bare LF ending the head", b"GET /healthz HTTP/1.1\r\nHost: x\r\n\n", 400, "bad_request"),
    ("bare CR", b"GET /healthz HTTP/1.1\r\nHost: x\rX-A: y\r\n\r\n", 400, "bad_request"),
    ("obs-fold SP", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n", 400,
     "bad_request"),
    ("obs-fold HTAB", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\r\n\tb\r\n\r\n", 400,
     "bad_request"),
    ("space before colon", b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length : 0\r\n\r\n",
     400, "bad_request"),
    ("NUL in a value", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400,
     "bad_request"),
    ("chunk size not hex", post(b"Transfer-Encoding: chunked\r\n", b"zz\r\n\r\n"), 400,
     "bad_request"),
    ("chunk size negative", post(b"Transfer-Encoding: chunked\r\n", b"-1\r\n\r\n"), 400,
     "bad_request"),
    ("chunk size 0x", post(b"Transfer-Encoding: chunked\r\n", b"0x2\r\n{}\r\n0\r\n\r\n"), 400,
     "bad_request"),
    ("chunk size overflow",
     post(b"Transfer-Encoding: chunked\r\n", b"fffffffffffffffff1\r\n{}\r\n0\r\n\r\n"), 400,
     "bad_request"),
    ("chunk size bare LF", post(b"Transfer-Encoding: chunked\r\n", b"2\n{}\r\n0\r\n\r\n"), 400,
     "bad_request"),
    ("chunk data overrun", post(b"Transfer-Encoding: chunked\r\n", b"2\r\n{}xx\r\n0\r\n\r\n"),
     400, "bad_request"),
    ("TE identity", post(b"Transfer-Encoding: identity\r\n"), 400, "bad_request"),
    ("TE chunked not last", post(b"Transfer-Encoding: chunked, gzip\r\n"), 400, "bad_request"),
    ("TE twice", post(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                      b"0\r\n\r\n"), 400, "bad_request"),
    ("no Host in 1.1", b"GET /healthz HTTP/1.1\r\n\r\n", 400, "bad_request"),
    ("two Hosts", b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "bad_request"),
    ("HTTP/0.9", b"GET /healthz\r\n\r\n", 505, "http_version_not_supported"),
    ("HTTP/2.0 line", b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505,
     "http_version_not_supported"),
    ("header line > 16 KiB", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 17000 +
     b"\r\n\r\n", 431, "headers_too_large"),
    ("head of many small lines > 16 KiB", b"GET /healthz HTTP/1.1\r\nHost: x\r\n" +
     b"".join(b"X-%d: %s\r\n" % (i, b"v" * 90) for i in range(99)) * 2 + b"\r\n", 431,
     "headers_too_large"),
    ("URL > 16 KiB", b"GET /" + b"a" * 17000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 431,
     "headers_too_large"),
    ("120 headers", b"GET /healthz HTTP/1.1\r\nHost: x\r\n" +
     b"".join(b"X-%d: y\r\n" % i for i in range(120)) + b"\r\n", 431, "headers_too_large"),
    ("announced body > max_body", post(b"Content-Length: 2000000\r\n"), 413, "payload_too_large"),
    ("chunked body > max_body", post(b"Transfer-Encoding: chunked\r\n",
                                     (b"10000\r\n" + b"a" * 65536 + b"\r\n") * 17 + b"0\r\n\r\n"),
     413, "payload_too_large"),
    ("method garbage", b"G@T /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_request"),
]


def test_malformed_requests_are_refused_and_closed(s):
    bad = []
    for name, raw, status, code in BAD:
        resps, rest, closed = exchange(s.port, raw + HEALTH)
        try:
            assert len(resps) == 1, f"{len(resps)} responses: the trailing request was parsed"
            r = resps[0]
            assert r.status == status, r
            assert r.header("Connection") == "close", r
            assert r.header("Content-Type").startswith("application/json"), r
            body = r.json()
            assert body["code"] == code and isinstance(body["error"], str) and body["error"], body
            assert rest == b"", rest
            assert closed, "connection left open"
        except AssertionError as e:
            bad.append(f"{name}: {e}")
    assert not bad, "\n".join(bad)


def test_smuggled_request_behind_cl_te_is_never_answered(s):
    # A front that honours CL would see one request; one honouring TE would see
    # a second, hidden GET. We refuse the whole thing.
    hidden = b"GET /runs/x HTTP/1.1\r\nHost: x\r\n\r\n"
    body = b"0\r\n\r\n" + hidden
    raw = post(b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(body), body)
    resps, _, closed = exchange(s.port, raw)
    assert [r.status for r in resps] == [400] and closed, resps


def test_keep_alive_serves_many_requests_on_one_socket(s):
    c = connect(s.port)
    data = b""
    for i in range(20):
        c.sendall(HEALTH)
        while True:
            resps, _ = parse_responses(data)
            if len(resps) == i + 1:
                break
            b = c.recv(65536)
            assert b, "closed"
            data += b
    resps, rest = parse_responses(data)
    assert [r.status for r in resps] == [200] * 20 and rest == b""
    assert all(r.header("Connection") is None for r in resps)
    c.close()


def test_pipelined_requests_are_answered_in_order(s):
    reqs = [
        HEALTH,
        post(b"Content-Length: 2\r\n", b"[]"),                           # 400 bad body
        b"GET /runs/00000000-0000-4000-8000-000000000000?threadId=t HTTP/1.1\r\nHost: x\r\n\r\n",
        b"DELETE /healthz HTTP/1.1\r\nHost: x\r\n\r\n",                   # 405
        post(b"Transfer-Encoding: chunked\r\n", b"2\r\n{}\r\n0\r\n\r\n"),  # chunked, 400
        b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n",                      # 404
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        HEALTH,                                                            # after close: never
    ]
    resps, rest, closed = exchange(s.port, b"".join(reqs), timeout=10)
    assert [r.status for r in resps] == [200, 400, 404, 405, 400, 404, 200], resps
    assert resps[-1].header("Connection") == "close" and closed and rest == b""
    assert resps[3].header("Allow") == "GET"
    for r in resps:
        json.loads(r.body)


def test_half_closed_client_gets_every_answer(s):
    # The client's FIN arrives while its GETs wait for coordinatord (reading
    # stays enabled during a request): every request is answered, in order,
    # before routerd closes.
    get = b"GET /runs/00000000-0000-4000-8000-000000000000?threadId=t HTTP/1.1\r\nHost: x\r\n\r\n"
    c = connect(s.port)
    try:
        c.sendall(get * 3 + HEALTH)
        c.shutdown(socket.SHUT_WR)
        data, closed = read_all(c, 10)
    finally:
        c.close()
    resps, rest = parse_responses(data)
    assert [r.status for r in resps] == [404, 404, 404, 200], resps
    assert closed and rest == b""


def test_pipelined_bytes_split_anywhere_parse_the_same(s):
    # The head is fed to the parser line by line; splitting the stream at
    # every byte boundary of a CRLF must not change anything.
    raw = HEALTH + post(b"Content-Length: 2\r\n", b"[]") + HEALTH
    c = connect(s.port)
    for i in range(len(raw)):
        c.sendall(raw[i:i + 1])
        if raw[i:i + 1] in (b"\r", b"\n"):
            time.sleep(0.002)
    data = b""
    while len(parse_responses(data)[0]) < 3:
        b = c.recv(65536)
        assert b
        data += b
    c.close()
    assert [r.status for r in parse_responses(data)[0]] == [200, 400, 200]


def test_http10_closes_unless_keep_alive(s):
    resps, _, closed = exchange(s.port, b"GET /healthz HTTP/1.0\r\n\r\n" + HEALTH)
    assert [r.status for r in resps] == [200] and closed
    resps, _, closed = exchange(
        s.port, b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" +
        b"GET /healthz HTTP/1.0\r\n\r\n")
    assert [r.status for r in resps] == [200, 200] and closed
    assert resps[0].header("Connection") == "keep-alive"


def test_expect_100_continue(s):
    c = connect(s.port)
    c.sendall(b"POST /runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 2\r\nExpect: 100-continue\r\n\r\n")
    c.settimeout(5)
    first = c.recv(65536)
    assert first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), first
    c.sendall(b"[]")
    data = first[len(b"HTTP/1.1 100 Continue\r\n\r\n"):]
    while not parse_responses(data)[0]:
        data += c.recv(65536)
    assert parse_responses(data)[0][0].status == 400
    c.close()


def test_oversize_body_is_refused_before_it_is_read(s):
    # 413 comes at once on the announced length, the body never has to arrive.
    c = connect(s.port)
    c.sendall(post(b"Content-Length: 50000000\r\n"))
    data, closed = read_all(c, timeout=5)
    resps, _ = parse_responses(data)
    assert [r.status for r in resps] == [413] and closed, (resps, closed)
    c.close()


def test_errors_are_json_for_every_status(s):
    for method, path, status in (("GET", "/nope", 404), ("PUT", "/runs", 405),
                                 ("GET", "/runs/%zz", 400), ("POST", "/healthz", 405)):
        st, body = s.http(method, path)
        assert st == status and set(body) == {"error", "code"}, (method, path, st, body)


def test_server_survives_and_serves_after_all_that(s):
    st, body = s.http("GET", "/healthz")
    assert st == 200 and body == {"status": "ok"}
