# SPDX-License-Identifier: MIT
"""Issue 35 H: `runwarden up` of a cluster node waits for the cluster. Three
NATS servers, two of them stopped (SIGSTOP: no JetStream quorum, so the
node's stream and buckets cannot be ensured) for 13 s after `up` started:
the node prints its "ready" line once they go on, where `up` gave up at
10 s before ("up: not ready after 10 s")."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import rwtest
from rwcluster import Cluster
from rwtest import free_port

NO_SUITE = True


def test_up_waits_for_the_cluster_past_10_s():
    d = tempfile.mkdtemp(prefix="rw-up-cluster-")
    port = free_port()
    c = Cluster()
    first = c.nats().split(",")[0]
    c.pause_nats("n2")
    c.pause_nats("n3")
    conf = os.path.join(d, "node.conf")
    with open(conf, "w") as f:
        f.write(f"[cluster]\nnats = {first}\nnode = u1\nreplicas = 3\n")
    up = subprocess.Popen([os.path.join(rwtest.BUILD, "runwarden"), "up", "--build-dir",
                           rwtest.BUILD, "--listen", f"127.0.0.1:{port}", "--state-dir",
                           os.path.join(d, "state"), "--config", conf],
                          stdout=subprocess.PIPE, stderr=open(os.path.join(d, "stderr"), "w+"),
                          text=True, start_new_session=True)
    try:
        time.sleep(13)
        assert up.poll() is None, ("up gave up before NATS came",
                                   open(os.path.join(d, "stderr")).read()[-800:])
        c.resume_nats("n2")
        c.resume_nats("n3")
        line = up.stdout.readline()
        assert "ready" in line and f"127.0.0.1:{port}" in line, \
            (line, open(os.path.join(d, "stderr")).read()[-800:])
    finally:
        if up.poll() is None:
            up.send_signal(signal.SIGINT)
            try:
                up.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(up.pid, signal.SIGKILL)
                up.wait()
        c.resume_nats("n2")
        c.resume_nats("n3")
        c.stop_nats()
        subprocess.run(["umount", "-R", "-l", d], stderr=subprocess.DEVNULL)
        shutil.rmtree(d, ignore_errors=True)
