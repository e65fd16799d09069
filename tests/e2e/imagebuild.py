# SPDX-License-Identifier: MIT
"""Sandbox images built here, without a registry (docs/IMAGES.md "Tests"):
a root filesystem tarball from Debian's busybox-static, an OCI image layout
with two layers and whiteouts (digests computed here, as the image-spec
says), a docker-archive made from that layout by skopeo, and hostile or
broken tarballs. t_images and bench/image-bench.py use them."""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile

BUSYBOX = "/bin/busybox"  # busybox-static: no shared library needed
APPLETS = ["sh", "cat", "ls", "echo", "stat", "id", "env", "pwd", "mkdir", "rm", "sleep",
           "true", "false", "test", "touch", "readlink", "wc", "printf"]


def _add(tf, name, data=None, mode=0o644, kind=tarfile.REGTYPE, link=None, **kw):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = mode
    ti.mtime = 1700000000
    if link is not None:
        ti.linkname = link
    for k, v in kw.items():
        setattr(ti, k, v)
    if data is not None:
        ti.size = len(data)
        tf.addfile(ti, io.BytesIO(data))
    else:
        tf.addfile(ti)


def busybox_entries(tf, os_release, prefix="./"):
    """A busybox userland: /bin/busybox and its applets as symlinks."""
    _add(tf, prefix + "bin", kind=tarfile.DIRTYPE, mode=0o755)
    with open(BUSYBOX, "rb") as f:
        _add(tf, prefix + "bin/busybox", f.read(), mode=0o755)
    for a in APPLETS:
        _add(tf, prefix + "bin/" + a, kind=tarfile.SYMTYPE, link="busybox")
    _add(tf, prefix + "etc", kind=tarfile.DIRTYPE, mode=0o755)
    _add(tf, prefix + "etc/os-release", os_release.encode())
    # a tool that exists only in the image (a harness's command)
    _add(tf, prefix + "opt", kind=tarfile.DIRTYPE, mode=0o755)
    _add(tf, prefix + "opt/tools", kind=tarfile.DIRTYPE, mode=0o755)
    _add(tf, prefix + "opt/tools/imgsh", b'#!/bin/sh\nexec /bin/sh "$@"\n', mode=0o755)


def rootfs_tarball(path, os_release='NAME="Busybox image"\nID=rwbusybox\n'):
    with tarfile.open(path, "w") as tf:
        busybox_entries(tf, os_release)
        # a setuid file: imported with the bit dropped
        _add(tf, "./bin/suid-tool", b"#!/bin/sh\necho suid\n", mode=0o4755)
    return path


def _blob(layout, data):
    d = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(layout, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(layout, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return "sha256:" + d, len(data)


def oci_layout(layout, env=None, user=None, workdir=None, tamper=False, extra_layers=0):
    """Two layers: the second (gzip) replaces os-release, whites out
    /opt/gone.txt and makes /opt/old opaque; extra_layers more add a file
    /opt/extra/N each. Returns the manifest digest."""
    shutil.rmtree(layout, ignore_errors=True)
    os.makedirs(layout)
    l1 = io.BytesIO()
    with tarfile.open(fileobj=l1, mode="w") as tf:
        busybox_entries(tf, 'NAME="layer one"\nID=layer1\n', prefix="")
        _add(tf, "opt/gone.txt", b"from layer 1\n")
        _add(tf, "opt/old", kind=tarfile.DIRTYPE, mode=0o755)
        _add(tf, "opt/old/file", b"old\n")
        _add(tf, "opt/kept.txt", b"kept\n")
    l2raw = io.BytesIO()
    with tarfile.open(fileobj=l2raw, mode="w") as tf:
        _add(tf, "etc/os-release", b'NAME="OCI two layers"\nID=rwoci\n')
        _add(tf, "opt/.wh.gone.txt", b"")
        _add(tf, "opt/old", kind=tarfile.DIRTYPE, mode=0o755)
        _add(tf, "opt/old/.wh..wh..opq", b"")
        _add(tf, "opt/old/new.txt", b"new\n")
    l1b = l1.getvalue()
    l2b = gzip.compress(l2raw.getvalue(), mtime=0)
    d1, n1 = _blob(layout, l1b)
    d2, n2 = _blob(layout, l2b)
    extra = []
    for i in range(extra_layers):
        lx = io.BytesIO()
        with tarfile.open(fileobj=lx, mode="w") as tf:
            _add(tf, f"opt/extra/{i}", f"{i}\n".encode())
        extra.append((lx.getvalue(),) + _blob(layout, lx.getvalue()))
    if tamper:  # the layer's bytes no longer match its digest
        with open(os.path.join(layout, "blobs", "sha256", d1[7:]), "r+b") as f:
            f.seek(5000)  # in the data of bin/busybox
            f.write(b"X")
    cfg = {"architecture": "amd64", "os": "linux",
           "config": {"Env": env if env is not None else
                      ["PATH=/opt/tools:/bin", "IMG_VAR=from-image"]},
           "rootfs": {"type": "layers", "diff_ids": [
               "sha256:" + hashlib.sha256(l1b).hexdigest(),
               "sha256:" + hashlib.sha256(l2raw.getvalue()).hexdigest()] +
               ["sha256:" + hashlib.sha256(x[0]).hexdigest() for x in extra]}}
    if user is not None:
        cfg["config"]["User"] = user
    if workdir is not None:
        cfg["config"]["WorkingDir"] = workdir
    dc, nc = _blob(layout, json.dumps(cfg).encode())
    man = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
           "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                      "digest": dc, "size": nc},
           "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                       "digest": d1, "size": n1},
                      {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                       "digest": d2, "size": n2}] +
           [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": x[1],
             "size": x[2]} for x in extra]}
    dm, nm = _blob(layout, json.dumps(man).encode())
    index = {"schemaVersion": 2, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": dm, "size": nm,
         "annotations": {"org.opencontainers.image.ref.name": "latest"}}]}
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f)
    with open(os.path.join(layout, "oci-layout"), "w") as f:
        json.dump({"imageLayoutVersion": "1.0.0"}, f)
    return dm


def docker_archive(layout, path):
    """The layout as a docker-archive (what `podman save` writes), by skopeo."""
    if os.path.exists(path):
        os.unlink(path)
    subprocess.run(["skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{layout}:latest",
                    f"docker-archive:{path}:rw/test:latest"], check=True, timeout=120)
    return path


def oci_archive(layout, path):
    with tarfile.open(path, "w") as tf:
        for n in sorted(os.listdir(layout)):
            tf.add(os.path.join(layout, n), arcname=n)
    return path


def hostile(path, kind, outside):
    """A root filesystem tarball that must be refused. outside: a host path
    that must not appear (what an escape would create)."""
    with tarfile.open(path, "w") as tf:
        _add(tf, "./etc", kind=tarfile.DIRTYPE, mode=0o755)
        if kind == "abs-symlink-through":  # a symlink to the host, then a write through it
            _add(tf, "./esc", kind=tarfile.SYMTYPE, link=os.path.dirname(outside))
            _add(tf, "./esc/" + os.path.basename(outside), b"escaped\n")
        elif kind == "dotdot-symlink":
            _add(tf, "./etc/up", kind=tarfile.SYMTYPE, link="../../../../..")
        elif kind == "abs-hardlink":
            _add(tf, "./etc/shadow-copy", kind=tarfile.LNKTYPE, link="/etc/shadow")
        elif kind == "dotdot-hardlink":
            _add(tf, "./etc/x", kind=tarfile.LNKTYPE, link="../../etc/shadow")
        elif kind == "dotdot-path":
            _add(tf, "../" + os.path.basename(outside), b"escaped\n")
        elif kind == "abs-path":
            _add(tf, outside, b"escaped\n")
        elif kind == "escaping-whiteout":
            _add(tf, "./etc/.wh..", b"")
        elif kind == "device":
            _add(tf, "./etc/mem", kind=tarfile.CHRTYPE, devmajor=1, devminor=1)
        elif kind == "entries":  # over image_max_entries (t_images sets 3000)
            for i in range(3100):
                _add(tf, f"./etc/f{i}", b"")
        elif kind == "bytes":  # over image_max_bytes (t_images sets 8M)
            _add(tf, "./etc/big", b"\0" * (9 << 20))
        else:
            raise ValueError(kind)
    return path


def truncated(src, path):
    with open(src, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2 + 100])
    return path
