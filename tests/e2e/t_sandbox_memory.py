# SPDX-License-Identifier: MIT
"""/metrics shows the memory of the sandboxes (issue 32):
runwarden_sandbox_memory_bytes{state="idle"|"busy"} and
runwarden_sandboxes{state=...}, summed by containerd-shim from each sandbox's
memory cgroup (memory.current on cgroup v2, memory.usage_in_bytes on v1) and
polled by coordinatord (SHIM_MEMORY) every 2 s."""
import os
import re

from rwtest import poll
from t_sandbox_leftovers import instance

SUITE_CONF = """[containerd-shim]
pool_size = 2
max_instances = 8
"""


def sandbox_metrics(s):
    st, text = s.http("GET", "/metrics")
    assert st == 200, st
    text = text.decode() if isinstance(text, bytes) else str(text)
    out = {}
    for m in re.finditer(r'^runwarden_(sandbox_memory_bytes|sandboxes)\{state="(idle|busy)"\} (\d+)$',
                         text, re.M):
        out[(m.group(1), m.group(2))] = int(m.group(3))
    return out


def cgroup_memory(s):
    """What the sandboxes' memory cgroups hold now, read directly."""
    inst = "runwarden." + instance(s)
    total = 0
    for base in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
        for root, dirs, files in os.walk(base):
            if os.path.basename(root) == inst:
                for d in dirs:
                    if d.startswith("sb-"):
                        for f in ("memory.usage_in_bytes", "memory.current"):
                            p = os.path.join(root, d, f)
                            if os.path.exists(p):
                                total += int(open(p).read())
                dirs[:] = []
            elif os.path.basename(root).startswith("runwarden"):
                dirs[:] = []
        if total:
            return total
    return total


def test_idle_sandboxes_memory_is_on_metrics(s):
    r = s.start_run("echo hi", thread="mem-a")
    _, st, _, _ = s.tail(r, thread="mem-a")
    assert st["status"] == "completed", st
    # the thread's sandbox, now idle, and the pool's two
    m = poll(lambda: (lambda v: v if v.get(("sandboxes", "idle"), 0) >= 3 else None)(
        sandbox_metrics(s)), 15)
    assert m, sandbox_metrics(s)
    assert m[("sandboxes", "busy")] == 0, m
    idle = m[("sandbox_memory_bytes", "idle")]
    direct = cgroup_memory(s)
    assert idle > 0 and direct > 0, (m, direct)
    # the same cgroups, read two seconds apart at most: the same order of size
    assert direct / 4 <= idle <= direct * 4, (idle, direct)
    assert m[("sandbox_memory_bytes", "busy")] == 0, m


def test_a_running_exec_counts_as_busy(s):
    r = s.start_run("sleep 30", thread="mem-b")
    m = poll(lambda: (lambda v: v if v.get(("sandboxes", "busy"), 0) == 1 else None)(
        sandbox_metrics(s)), 15)
    assert m and m[("sandbox_memory_bytes", "busy")] > 0, sandbox_metrics(s)
    st, _ = s.http("POST", f"/runs/{r}/cancel?threadId=mem-b")
    assert st in (200, 202), st
    assert poll(lambda: sandbox_metrics(s).get(("sandboxes", "busy")) == 0, 15), \
        sandbox_metrics(s)
