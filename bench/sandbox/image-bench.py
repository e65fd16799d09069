#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Sandbox images (issue 33, docs/IMAGES.md): sandbox creation on an image
beside creation on the host's binds, and an image's import beside `umoci
unpack` of the same image.

usage: REPS=5 bench/sandbox/image-bench.py [BUILD_DIR]   (as root)

Creation: one containerd-shim (pool_size = 0: every create builds a
sandbox; max_instances = 64) pinned to CPU 0; shimctl on CPU 1 runs `--fresh
40` (40 new sandboxes on one connection, SANDBOX_ENSURE → EXEC_EXIT of
/bin/true, each destroyed untimed) with `--image busybox` (the busybox-static
root filesystem of tests/e2e/imagebuild.py) and without (the default
ro_binds), alternating, REPS times. Printed: the median of the repetitions'
p50 and the ratio (target ≤ 1.1).

Import: an OCI layout of one gzip layer holding the host's /usr/lib/python3
(thousands of files, tens of MB) is imported with `containerd-shim image
import` (a fresh store each time) and unpacked with `umoci unpack` (as
root, into a fresh bundle), alternating, REPS times; the median wall time of
each. podman is not in Debian's bookworm set we test on: `podman load` is
not measured."""
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

TOP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(TOP, "tests", "e2e"))
import imagebuild  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else os.path.join(TOP, "build")
REPS = int(os.environ.get("REPS", 5))
work = tempfile.mkdtemp(prefix="rw-imgbench-")


def conf(d):
    p = os.path.join(d, "c.conf")
    with open(p, "w") as f:
        f.write(f"[runwarden]\nruntime_dir = {d}/run\nstate_dir = {d}/state\nlog_level = warning\n"
                "[containerd-shim]\nmax_instances = 64\npool_size = 0\n")
    return p


def creation():
    d = os.path.join(work, "shim")
    os.makedirs(d)
    c = conf(d)
    tar = imagebuild.rootfs_tarball(os.path.join(work, "busybox.tar"))
    subprocess.run([os.path.join(BUILD, "containerd-shim"), "--config", c, "image", "import",
                    "busybox", tar], check=True, stdout=subprocess.DEVNULL)
    shim = subprocess.Popen(["taskset", "-c", "0", os.path.join(BUILD, "containerd-shim"),
                             "--config", c], stdout=open(d + "/log", "w"),
                            stderr=subprocess.STDOUT)
    sock = f"{d}/run/containerd-shim.sock"
    for _ in range(200):
        if os.path.exists(sock):
            break
        time.sleep(0.05)
    time.sleep(0.5)

    def fresh(tag, image):
        args = ["taskset", "-c", "1", os.path.join(BUILD, "tools", "shimctl"), sock, tag,
                "--fresh", os.environ.get("FRESH", "40"), "--env", "PATH=/bin:/usr/bin"]
        if image:
            args += ["--image", image]
        p = subprocess.run(args + ["--", "/bin/true"], capture_output=True, text=True,
                           timeout=600)
        m = re.search(r"creates: p50 ([\d.]+) ms", p.stderr)
        if not m:
            raise SystemExit(p.stderr)
        return float(m.group(1))

    res = {"host": [], "image": []}
    try:
        fresh("warm-h", None)
        fresh("warm-i", "busybox")
        for r in range(REPS):
            order = [("host", None), ("image", "busybox")]
            for name, img in (order if r % 2 == 0 else order[::-1]):
                res[name].append(fresh(f"{name}{r}", img))
    finally:
        shim.send_signal(signal.SIGTERM)
        shim.wait()
    h, i = statistics.median(res["host"]), statistics.median(res["image"])
    print(f"creation p50 (ms): host binds {h:.2f} {res['host']}")
    print(f"creation p50 (ms): image      {i:.2f} {res['image']}")
    print(f"ratio image / host binds: {i / h:.3f}")
    return h, i


def big_layout():
    """One gzip layer with the host's /usr/lib/python3* (a real tree)."""
    layout = os.path.join(work, "big-layout")
    raw = io.BytesIO()
    src = sorted(p for p in os.listdir("/usr/lib") if p.startswith("python3"))[0]
    with tarfile.open(fileobj=raw, mode="w") as tf:
        tf.add(os.path.join("/usr/lib", src), arcname=f"usr/lib/{src}",
               filter=lambda ti: None if ti.type not in (tarfile.REGTYPE, tarfile.DIRTYPE,
                                                          tarfile.SYMTYPE) else ti)
    layer = gzip.compress(raw.getvalue(), compresslevel=6)
    os.makedirs(os.path.join(layout, "blobs", "sha256"))

    def blob(data):
        dg = hashlib.sha256(data).hexdigest()
        with open(os.path.join(layout, "blobs", "sha256", dg), "wb") as f:
            f.write(data)
        return {"digest": "sha256:" + dg, "size": len(data)}
    lb = blob(layer)
    cb = blob(json.dumps({"architecture": "amd64", "os": "linux", "config": {},
                          "rootfs": {"type": "layers", "diff_ids": [
                              "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()]}}).encode())
    mb = blob(json.dumps({"schemaVersion": 2,
                          "mediaType": "application/vnd.oci.image.manifest.v1+json",
                          "config": dict(cb, mediaType="application/vnd.oci.image.config.v1+json"),
                          "layers": [dict(lb, mediaType="application/vnd.oci.image.layer.v1.tar+gzip")]
                          }).encode())
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": [dict(
            mb, mediaType="application/vnd.oci.image.manifest.v1+json",
            annotations={"org.opencontainers.image.ref.name": "latest"})]}, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    n = sum(1 for _ in tarfile.open(fileobj=io.BytesIO(raw.getvalue())))
    print(f"import image: /usr/lib/{src}, {n} entries, {len(raw.getvalue()) >> 20} MiB, "
          f"layer {len(layer) >> 20} MiB gzip")
    return layout


def imports():
    layout = big_layout()
    res = {"import": [], "umoci": []}
    for r in range(REPS):
        for what in (("import", "umoci") if r % 2 == 0 else ("umoci", "import")):
            d = os.path.join(work, f"{what}{r}")
            os.makedirs(d)
            subprocess.run(["sync"])
            t0 = time.time()
            if what == "import":
                subprocess.run([os.path.join(BUILD, "containerd-shim"), "--config", conf(d),
                                "image", "import", "big", layout], check=True,
                               stdout=subprocess.DEVNULL)
            else:
                subprocess.run(["umoci", "unpack", "--image", f"{layout}:latest",
                                os.path.join(d, "bundle")], check=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            res[what].append(time.time() - t0)
            shutil.rmtree(d)
    i, u = statistics.median(res["import"]), statistics.median(res["umoci"])
    print(f"runwarden image import: {i:.3f} s {[round(v, 3) for v in res['import']]}")
    print(f"umoci unpack:           {u:.3f} s {[round(v, 3) for v in res['umoci']]}")
    print(f"ratio import / umoci unpack: {i / u:.3f}")


try:
    if os.environ.get("ONLY", "creation") == "creation" or "ONLY" not in os.environ:
        creation()
    if os.environ.get("ONLY", "imports") == "imports" or "ONLY" not in os.environ:
        imports()
finally:
    subprocess.run(["umount", "-R", "-l", work], stderr=subprocess.DEVNULL)
    shutil.rmtree(work, ignore_errors=True)
