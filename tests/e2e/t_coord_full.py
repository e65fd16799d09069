# SPDX-License-Identifier: MIT
"""Issue 3 / R3: a full run log (MDB_MAP_FULL with a tiny map) is never
acknowledged as success; the run fails with storage_full where that can still
be written, and the daemon keeps serving reads."""
import json
import os

from ipc import Ipc, IpcError

SUITE_CONF = """[coordinatord]
map_size = 1M
"""


def test_map_full_fails_appends_and_keeps_reads(s):
    s.expected_errors += [r"commit failed", r"storage", r"full", r"No space", r"could not be marked"]
    c = Ipc(os.path.join(s.dir, "run", "coordinatord.sock"))
    run = c.call("RUN_OPEN", {"thread_id": "t-full"})["run_id"]
    big = json.dumps({"type": "CUSTOM", "name": "blob", "value": "x" * 20000})
    acked, refused = 0, None
    for _ in range(200):
        try:
            c.call("RUN_APPEND", {"run_id": run, "chunk": big})
            acked += 1
        except IpcError as e:
            refused = e
            break
    assert refused is not None, "a 1 MiB map took 4 MB of events"
    assert refused.code in (-28, -116), refused  # ENOSPC, or ESTALE once it was failed
    # every acknowledged event is readable; the record never claims more
    body = c.call("RUN_READ", {"run_id": run, "from_seq": -1, "max": 1000})
    rec = json.loads(body["record"])
    blobs = [e for e in body["events"] if json.loads(e)["type"] == "CUSTOM"]
    assert len(blobs) == acked, (len(blobs), acked)
    if rec["status"] == "failed":
        last = json.loads(body["events"][-1])
        assert last["type"] == "RUN_ERROR" and last["code"] == "storage_full", last
    # reads and the HTTP front still work
    st, got = s.http("GET", f"/runs/{run}?threadId=t-full")
    assert st == 200 and got["lastSeq"] == rec["lastSeq"]
    c.close()
