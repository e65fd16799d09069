# SPDX-License-Identifier: MIT
"""A short soak (tests/reliability/soak) in every ./dev test: 200 idle tails, 3
run loops with their live tails, files and snapshots for 30 s; it fails on any
gap or duplicate a tail sees, any run not ending as its command must, and any
growth of anonymous memory or fds between its two quiet points. The 30-minute
campaign with 1000 tails is the same script with its defaults."""
import json
import os
import subprocess
import tempfile

NO_SUITE = True  # the soak starts its own daemons
SOAK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reliability", "soak")


def test_short_soak():
    with tempfile.NamedTemporaryFile(suffix=".json") as res:
        p = subprocess.run([SOAK, "--duration", "30", "--warmup", "10", "--idle-tails", "200",
                            "--live-tails", "12", "--runs", "3", "--interval", "2",
                            "--results", res.name], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and p.stdout.rstrip().endswith("1 passed, 0 failed"), \
            p.stdout[-4000:] + p.stderr[-4000:]
        out = json.load(open(res.name))
    assert out["runs"] > 20 and out["tails_checked"] > 100 and out["snapshots"] > 0, out["runs"]
    assert len(out["samples"]) >= 5
