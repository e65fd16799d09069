# SPDX-License-Identifier: MIT
"""Issue 12 §6: host tool processes run in a cgroup. Every call gets a leaf of
the tools' cgroup (runwarden-tools.<instance>/tools, with the limits of all
host tools together); what a tool leaves running (setsid'd, holding its stdout
or not) dies when the call ends, times out or coordinatord is killed and
restarted. The calls come from inside the sandbox through the run's bridge,
as an agent's would."""
import json
import os
import re
import time

import bridgecall
from rwtest import poll

TOOLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "tools")

SUITE_CONF = f"""[coordinatord]
tool_cgroup = required
tool_memory_max = 300M
tool_pids_max = 24

[harness.tooly]
adapter = shell
tools = spawn,spawnslow

[tool.spawn]
command = ["{TOOLS}/spawn-tool"]
description = Leaves processes behind
timeout_ms = 60000

[tool.spawnslow]
command = ["{TOOLS}/spawn-tool"]
description = Leaves processes behind and never ends
timeout_ms = 2500
"""

def start_call(s, thread, tool, args):
    return bridgecall.start(s, thread, tool, args)


def call(s, thread, tool, args):
    """The tool's MCP result text (or the error text) and the seconds the run took."""
    t0 = time.time()
    res = bridgecall.results(s, start_call(s, thread, tool, args), thread)[0]
    took = time.time() - t0
    assert res["status"] == 200, res
    return res["body"]["result"], took


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_leftover_dies_with_the_call(s):
    result, took = call(s, "t-tcg1", "spawn", {"mode": "leave"})
    assert not result.get("isError"), result
    out = json.loads(result["content"][0]["text"])
    # the sleeper kept the tool's stdout open: the call still ended at once,
    # not after 300 s or the 60 s timeout
    assert took < 30, took
    assert poll(lambda: not alive(out["pid"]), timeout=10), "the tool's sleeper outlived its call"
    # in a leaf of the tools' cgroup, in the cgroup2 tree (v2, or unified)
    lines = out["cgroup"].splitlines()
    unified = [line.split(":", 2)[2] for line in lines if line.startswith("0::")]
    assert unified and re.search(r"/runwarden-tools\.[0-9a-f]{12}/tools/e\d+$", unified[0]), lines


def tools_limit_files(cgroup_text):
    """(memory limit file, pids.max file) of the tools' cgroup, v1 or v2."""
    paths = {}
    for line in cgroup_text.splitlines():
        _, ctrls, path = line.split(":", 2)
        for c in ctrls.split(","):
            paths[c] = path
    if "memory" in paths:  # hybrid: the v1 controllers
        return (f"/sys/fs/cgroup/memory{paths['memory']}/memory.limit_in_bytes",
                f"/sys/fs/cgroup/pids{paths['pids']}/pids.max")
    group = os.path.dirname(paths[""])  # v2: the leaf's parent holds the limits
    return f"/sys/fs/cgroup{group}/memory.max", f"/sys/fs/cgroup{group}/pids.max"


def test_limits_are_the_tools_all_together(s):
    result, _ = call(s, "t-tcg2", "spawn", {"mode": "leave"})
    mem, pids = tools_limit_files(json.loads(result["content"][0]["text"])["cgroup"])
    assert int(open(mem).read()) == 300 << 20
    assert open(pids).read().strip() == "24"


def test_timeout_kills_the_whole_call(s):
    pidfile = os.path.join(s.dir, "hang.pid")
    result, _ = call(s, "t-tcg3", "spawnslow", {"mode": "hang", "pidfile": pidfile})
    assert result.get("isError") and "timed out" in result["content"][0]["text"], result
    tool, sleeper = map(int, open(pidfile).read().split())
    assert poll(lambda: not alive(tool) and not alive(sleeper), timeout=10), \
        "a timed-out tool's setsid'd child survived"


def test_restart_kills_what_a_killed_coordinatord_left(s):
    pidfile = os.path.join(s.dir, "crash.pid")
    start_call(s, "t-tcg4", "spawn", {"mode": "hang", "pidfile": pidfile})
    assert poll(lambda: os.path.exists(pidfile), timeout=30)
    tool, sleeper = map(int, open(pidfile).read().split())
    s.kill("coordinatord")
    time.sleep(0.5)
    assert alive(tool) and alive(sleeper)  # nothing killed them yet
    s.start_daemon("coordinatord")
    assert poll(lambda: "coordinatord ready" in s.log("coordinatord"), timeout=15)
    assert poll(lambda: not alive(tool) and not alive(sleeper), timeout=10), \
        "host tool processes of a killed coordinatord survived its restart"
    log = s.log("coordinatord")
    assert "host tool processes a previous coordinatord left" in log, log[-3000:]
    assert poll(lambda: s.http("GET", "/readyz")[0] == 200, timeout=15)  # routerd reconnected


def test_pids_max_bites(s):
    # last: the killed processes count against pids.max until init reaps them
    before = s.metric("runwarden_tool_pids_max_total")
    result, _ = call(s, "t-tcg5", "spawn", {"mode": "fork", "n": 40})
    started = json.loads(result["content"][0]["text"])["started"]
    assert 1 <= started < 24, started
    assert s.metric("runwarden_tool_pids_max_total") > before  # and /metrics says so
    assert s.metric("runwarden_tool_calls_running") == 0
