# SPDX-License-Identifier: MIT
"""Issue 30: requests per second on the expensive routes, per tenant
(tenant_rate_per_second, tenant_rate_burst; docs/SECURITY.md "Tenants"). A
tenant past its bucket gets 429 tenant_rate_limited with Retry-After, on
the expensive routes only; another tenant is served meanwhile; the bucket
refills."""
import os
import tempfile
import time

from rwtest import poll

TA, TB, OP = "alpha.token", "bravo.token", "operator.token"
_fd, TOKENS_FILE = tempfile.mkstemp(prefix="rw-rate-tokens-")
with os.fdopen(_fd, "w") as f:
    f.write(f"{OP}\n{TA} threads=a-* tenant=alpha\n{TB} threads=b-* tenant=bravo\n")

SUITE_CONF = f"""[routerd]
tokens_file = {TOKENS_FILE}
tenant_rate_per_second = 2
tenant_rate_burst = 5
"""


def auth(tok):
    return {"Authorization": f"Bearer {tok}"}


def put(s, tok, path):
    return s.http("PUT", path, headers=auth(tok), raw_body=b"x")


def test_a_tenant_over_its_rate_gets_429_and_others_do_not(s):
    assert poll(lambda: s.http("GET", "/readyz", headers=auth(OP))[0] == 200, 15)
    codes = [put(s, TA, f"/threads/a-1/files/f{i}") for i in range(8)]
    ok = [st for st, _ in codes if st == 201]
    limited = [js for st, js in codes if st == 429]
    assert len(ok) >= 5 and limited, codes
    assert all(js["code"] == "tenant_rate_limited" for js in limited), limited
    # every expensive route, and the answer's Retry-After
    for method, path, body in (("POST", "/runs", {"threadId": "a-2", "messages": [
                                   {"role": "user", "content": "echo x"}]}),
                               ("POST", "/threads/a-1/snapshots", {}),
                               ("GET", "/threads", None)):
        st, js = s.http(method, path, body, headers=auth(TA))
        assert st == 429 and js["code"] == "tenant_rate_limited", (method, path, st, js)
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    c.request("GET", "/threads", headers=auth(TA))
    r = c.getresponse()
    assert r.status == 429 and int(r.getheader("Retry-After")) >= 1, r.status
    r.read()
    c.close()
    # cheap routes are not counted; another tenant is served
    st, _ = s.http("GET", "/threads/a-1/files/f0", headers=auth(TA))
    assert st == 200, st
    st, runs = s.http("GET", "/threads/a-1/runs", headers=auth(TA))
    assert st == 200, st
    for i in range(5):
        st, js = put(s, TB, f"/threads/b-1/files/f{i}")
        assert st == 201, (i, st, js)
    # nothing of the refused requests happened
    st, runs = s.http("GET", "/threads/a-2/runs", headers=auth(TA))
    assert st == 200 and runs == [], runs
    # the bucket refills: 2 a second
    time.sleep(1.1)
    st, js = put(s, TA, "/threads/a-1/files/later")
    assert st == 201, (st, js)
    st, text = s.http("GET", "/metrics", headers=auth(OP))
    line = [ln for ln in text.decode().splitlines()
            if ln.startswith('runwarden_router_tenant_rate_limited_total{tenant="alpha"}')]
    assert line and float(line[0].split()[1]) >= len(limited) + 4, line


def test_runs_started_on_a_chat_websocket_count_too(s):
    import json
    from t_chat import body_for
    from t_router_lib import WsClient, frame
    time.sleep(3)  # alpha's bucket full again (5 at 2/s)
    w = WsClient(s.port, f"/chat?access_token={TA}")
    codes = []
    for i in range(8):
        w.send(frame(1, json.dumps(body_for(f"a-ws-{i}", f"run-a-ws-{i}", "true")).encode()))
        while True:  # to this run's end (or refusal)
            fin, rsv, op, p = w.recv_frame(20)
            if op != 1:
                continue
            j = json.loads(p)
            chunk = j.get("chunk", j)
            if chunk.get("type") in ("RUN_FINISHED", "RUN_ERROR"):
                codes.append(chunk.get("code") or chunk["type"])
                break
    assert codes.count("RUN_FINISHED") >= 5 and "tenant_rate_limited" in codes, codes
    for i, code in enumerate(codes):  # the refused ones were never started
        st, runs = s.http("GET", f"/threads/a-ws-{i}/runs", headers=auth(TA))
        assert st == 200 and (runs == []) == (code == "tenant_rate_limited"), (i, code, runs)
