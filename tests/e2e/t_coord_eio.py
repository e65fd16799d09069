# SPDX-License-Identifier: MIT
"""Issue 3 / R3: an I/O error on fdatasync (injected with libfiu, Debian's
fiu-utils) is never acknowledged as success nor retried as if it succeeded;
the daemon keeps serving reads, no half-written event is ever visible, and
writing works again once the disk does."""
import json
import os
import subprocess

from ipc import Ipc, IpcError, append_value

WRAP = {"coordinatord": ["fiu-run", "-x"]}


def fiu(s, cmd):
    pid = s.procs["coordinatord"].pid
    subprocess.run(["fiu-ctrl", "-c", cmd, str(pid)], check=True, timeout=10)


def test_fdatasync_eio_is_never_acknowledged(s):
    s.expected_errors += [r"commit failed", r"could not be marked", r"storage", r"Input/output"]
    c = Ipc(os.path.join(s.dir, "run", "coordinatord.sock"))
    run = c.call("RUN_OPEN", {"thread_id": "t-eio"})["run_id"]
    assert [append_value(c, run, i)["seq"] for i in range(3)] == [0, 1, 2]
    fiu(s, "enable name=posix/io/sync/fdatasync,failinfo=5")
    try:
        append_value(c, run, 3)
        raise AssertionError("an append whose fsync failed was acknowledged")
    except IpcError as e:
        assert e.code == -5, e  # -EIO
    # reads go on, and show exactly what was committed
    body = c.call("RUN_READ", {"run_id": run, "from_seq": -1, "max": 100})
    rec = json.loads(body["record"])
    values = [json.loads(t).get("value") for t in body["events"]]
    assert values == [0, 1, 2] and rec["lastSeq"] == 2, (values, rec)
    st, got = s.http("GET", f"/runs/{run}?threadId=t-eio")
    assert st == 200 and got["lastSeq"] == 2
    fiu(s, "disable name=posix/io/sync/fdatasync")
    # the disk is back: the run goes on (or was failed cleanly), never a gap
    try:
        seq = append_value(c, run, 4)["seq"]
        assert seq == 3, seq
    except IpcError as e:
        assert e.code == -116, e  # ESTALE: it was failed with storage_error
        body = c.call("RUN_READ", {"run_id": run, "from_seq": 2, "max": 10})
        last = json.loads(body["events"][-1])
        assert last["type"] == "RUN_ERROR" and last["code"] == "storage_error", last
    c.close()
