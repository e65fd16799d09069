# SPDX-License-Identifier: MIT
"""One RUN_START contract (issue 34 item 4): coordinatord owns the body's rules
(daemons/coordinatord/run-start.c) for HTTP and socket clients alike; routerd
checks the HTTP facts (token, content type, JSON, the thread the token may
use). An HTTP client gets the same 400s as before, a socket client the same
rules as an ERROR -EINVAL, and a refused request registers nothing.
`harnesses` travels as a list of names."""
import os

from ipc import Ipc, IpcError

EINVAL, EPERM, EBADMSG = -22, -1, -74
MSGS = [{"role": "user", "content": "true"}]


def ipc(s):
    return Ipc(os.path.join(s.dir, "run", "coordinatord.sock"))


def runs_of(s, thread):
    st, runs = s.http("GET", f"/threads/{thread}/runs")
    assert st == 200, (st, runs)
    return runs


# (body, headers, the 400's code, its message): each refused, nothing registered
HTTP_CASES = [
    ({"threadId": "t-rs-1"}, {}, "bad_request", "messages must be a non-empty array"),
    ({"threadId": "t-rs-1", "messages": []}, {}, "bad_request",
     "messages must be a non-empty array"),
    ({"threadId": "t-rs-1", "messages": "hi"}, {}, "bad_request",
     "messages must be a non-empty array"),
    ({"threadId": "t-rs-1", "messages": [MSGS[0], 5]}, {}, "bad_request",
     "messages[1] must be an object"),
    ({"threadId": "t-rs-1", "messages": [{"content": "x"}]}, {}, "bad_request",
     "messages[0].role must be a string"),
    ({"threadId": "t-rs-1", "messages": MSGS, "metadata": [1]}, {}, "bad_request",
     "metadata must be an object"),
    ({"threadId": "t-rs-1", "messages": MSGS, "metadata": {"sessionId": "--x"}}, {},
     "bad_request", "metadata.sessionId must not start with '-'"),
    ({"threadId": "t-rs-1", "messages": MSGS, "metadata": {"harness": "nope"}}, {},
     "bad_request", "unknown harness 'nope'"),
    ({"threadId": "t-rs-1", "messages": MSGS}, {"Idempotency-Key": "k" * 257}, "bad_request",
     "Idempotency-Key must be 1 to 256 printable bytes"),
    ({"threadId": "t-rs-1", "messages": MSGS}, {"Idempotency-Key": "a\tb"}, "bad_request",
     "Idempotency-Key must be 1 to 256 printable bytes"),
    ([1, 2], {}, "bad_request", "body must be a JSON object"),
    ({"messages": MSGS}, {}, "invalid_thread_id", "threadId must be a non-empty string"),
    ({"threadId": "..", "messages": MSGS}, {}, "invalid_thread_id",
     "threadId must not be '.' or '..'"),
]


def test_http_body_rules_answer_400_and_register_nothing(s):
    for body, headers, code, message in HTTP_CASES:
        st, js = s.http("POST", "/runs", body, headers=headers)
        assert (st, js.get("code"), js.get("error")) == (400, code, message), (body, st, js)
    assert runs_of(s, "t-rs-1") == []
    # the rules let a good body through, with a key at its longest
    st, js = s.http("POST", "/runs", {"threadId": "t-rs-1", "messages": MSGS},
                    headers={"Idempotency-Key": "k" * 256})
    assert st == 202, (st, js)
    assert [r["runId"] for r in runs_of(s, "t-rs-1")] == [js["runId"]]


def start_ipc(c, **fields):
    body = {"thread_id": "t-rs-ipc", "messages": '[{"role":"user","content":"true"}]'}
    body.update(fields)
    return c.call("RUN_START", body)


def test_socket_clients_meet_the_same_rules(s):
    c = ipc(s)
    try:
        for fields, message in (
                ({"messages": '[{"content":"x"}]'}, "messages[0].role must be a string"),
                ({"messages": '[3]'}, "messages[0] must be an object"),
                ({"metadata": '"x"'}, "metadata must be an object"),
                ({"idempotency_key": "a\tb"}, "Idempotency-Key must be 1 to 256 printable bytes"),
                ({"idempotency_key": ""}, "Idempotency-Key must be 1 to 256 printable bytes"),
                ({"client_run_id": "c" * 129}, "client_run_id must be 1 to 128 printable bytes, "
                 "without an idempotency key"),
                ({"client_run_id": "c\x01"}, "client_run_id must be 1 to 128 printable bytes, "
                 "without an idempotency key")):
            try:
                start_ipc(c, **fields)
                raise AssertionError(f"accepted: {fields}")
            except IpcError as e:
                assert (e.code, e.message) == (EINVAL, message), (fields, e)
        body = {"thread_id": "t-rs-ipc"}
        try:
            c.call("RUN_START", body)
            raise AssertionError("accepted without messages")
        except IpcError as e:
            assert (e.code, e.message) == (EINVAL, "messages must be a non-empty array"), e
    finally:
        c.close()
    assert runs_of(s, "t-rs-ipc") == []


def test_harnesses_is_a_list_of_names(s):
    c = ipc(s)
    try:
        try:
            start_ipc(c, harnesses=["other", "more"])
            raise AssertionError("a harness outside the list was accepted")
        except IpcError as e:
            assert e.code == EPERM and "may not use harness" in e.message, e
        try:  # the old comma-separated string is no list: a malformed field
            start_ipc(c, harnesses="shell,other")
            raise AssertionError("a string was taken for the list")
        except IpcError as e:
            assert e.code == EBADMSG, e
        assert runs_of(s, "t-rs-ipc") == []
        run_id = start_ipc(c, harnesses=["other", "shell"])["run_id"]
    finally:
        c.close()
    assert [r["runId"] for r in runs_of(s, "t-rs-ipc")] == [run_id]
