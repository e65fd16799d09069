# SPDX-License-Identifier: MIT
"""A sandbox exec's stream counts in the tails' total budget
(tails_max_queued_bytes, issue 30 item 7), not only in its own ws_max_queue:
readers that do not read lose their streams once all of them together hold
the budget, and their execs die with them."""
import json
import socket

from rwtest import poll
from t_sandbox_exec import processes_of, proc_cmdlines

SUITE_CONF = """[routerd]
server_names = x
tails_max_queued_bytes = 1M
ws_max_queue = 64M
"""

N = 4


def silent_exec(s, thread, marker):
    """POST …/exec of an endless writer from a client that never reads."""
    k = socket.socket()
    k.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    k.connect(("127.0.0.1", s.port))
    body = json.dumps({"command": f"exec yes {marker}"}).encode()
    k.sendall(b"POST /sandboxes/" + thread.encode() + b"/exec HTTP/1.1\r\nHost: x\r\n"
              b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() +
              b"\r\n\r\n" + body)
    return k


def budget_closed(s):
    st, text = s.http("GET", "/metrics")
    for line in (text.decode() if isinstance(text, bytes) else str(text)).splitlines():
        if line.startswith("runwarden_router_tails_budget_closed_total "):
            return float(line.split()[1])
    return None


def test_exec_streams_share_the_tails_budget(s):
    before = budget_closed(s)
    socks = [silent_exec(s, f"t-b{i}", f"budget-marker-{i}") for i in range(N)]
    try:
        # each could hold 64M (ws_max_queue); all together only 1M: the
        # budget drops streams, and their execs die with them
        assert poll(lambda: budget_closed(s) > before, 30), budget_closed(s)
        assert poll(lambda: any(not processes_of(s, f"t-b{i}") for i in range(N)), 20)
        dropped = [i for i in range(N) if not processes_of(s, f"t-b{i}")]
        for i in dropped:
            assert poll(lambda: f"budget-marker-{i}" not in proc_cmdlines(s, f"t-b{i}"), 10)
        assert "exec reader too slow" not in s.log("routerd")
    finally:
        for k in socks:
            k.close()
    # the rest die with their connections
    for i in range(N):
        assert poll(lambda: not processes_of(s, f"t-b{i}"), 20), i
