# SPDX-License-Identifier: MIT
"""The bounds of /chat's stored input and of a hydrate (docs/API.md, GET
/chat?threadId= and POST /chat): a run stores at most chat_input_max_messages
user messages of chat_input_max_bytes (413 too_large at POST time, nothing
started); a hydrate counts every user message with its overhead and id
toward read_max_bytes (413 before the answer is built), and reads at most
hydrate_read_max_bytes of stored events, the chunks it passes over included
(413 too_large naming the key)."""
import json

from t_chat import post_chat, sse_events

SUITE_CONF = """[routerd]
server_names = x

[coordinatord]
chat_input_max_messages = 8
chat_input_max_bytes = 4K
read_max_bytes = 8K
hydrate_read_max_bytes = 64K
"""


def body(thread, run, texts, command="true"):
    msgs = [{"role": "user", "content": t} for t in texts]
    msgs.append({"role": "user", "content": command})
    return {"threadId": thread, "runId": run, "messages": msgs,
            "forwardedProps": {"metadata": {"harness": "shell"}}}


def test_post_chat_input_is_capped(s):
    head, raw = post_chat(s, body("t-cap", "cap-1", [""] * 8))
    assert head.startswith("HTTP/1.1 413"), head
    js = json.loads(raw)
    assert js["code"] == "too_large" and "chat_input_max_messages" in js["error"], js
    head, raw = post_chat(s, body("t-cap", "cap-2", ["y" * 5000]))
    assert head.startswith("HTTP/1.1 413"), head
    js = json.loads(raw)
    assert js["code"] == "too_large" and "chat_input_max_bytes" in js["error"], js
    st, js = s.http("GET", "/threads/t-cap/runs")
    assert st == 200 and js == [], js  # nothing was started
    # the earlier messages of the conversation are not this turn's: not stored
    b = body("t-cap", "cap-3", [""] * 7)
    b["messages"] = [{"role": "user", "content": "old"}] * 20 + [
        {"role": "assistant", "content": "ok"}] + b["messages"]
    head, raw = post_chat(s, b)
    assert head.startswith("HTTP/1.1 200") and sse_events(raw)[-1][1]["type"] == "RUN_FINISHED", raw
    st, js = s.http("GET", "/chat?threadId=t-cap")
    assert st == 200 and len([m for m in js["messages"] if m["role"] == "user"]) == 8, js


def test_hydrate_counts_empty_messages_and_ids(s):
    # empty texts: what the answer holds of them is their ids and overhead
    for i in range(12):
        head, raw = post_chat(s, body("t-empty", f"empty-{i}", [""] * 7))
        assert head.startswith("HTTP/1.1 200"), head
    st, js = s.http("GET", "/chat?threadId=t-empty")
    assert st == 413 and js["code"] == "too_large" and "read_max_bytes" in js["error"], (st, js)


def test_hydrate_reads_are_bounded(s):
    head, raw = post_chat(s, body("t-small", "small-1", [], "echo hi"))
    assert head.startswith("HTTP/1.1 200"), head
    st, js = s.http("GET", "/chat?threadId=t-small")
    assert st == 200 and len(js["messages"]) == 2, js
    # 200 KB of output: chunks the rebuild passes over, whose text is not in
    # the answer; read all the same
    head, raw = post_chat(s, body("t-out", "out-1", [], "head -c 200000 /dev/zero | tr '\\0' x"))
    assert head.startswith("HTTP/1.1 200") and "RUN_FINISHED" in raw, head
    st, js = s.http("GET", "/chat?threadId=t-out")
    assert st == 413 and js["code"] == "too_large", (st, js)
    assert "hydrate_read_max_bytes" in js["error"], js
    st, js = s.http("GET", "/readyz")
    assert st == 200, js
