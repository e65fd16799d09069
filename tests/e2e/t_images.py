# SPDX-License-Identifier: MIT
"""Sandbox images (issue 33, docs/IMAGES.md): `runwarden image import` of a
root filesystem tarball (busybox-static), an OCI layout of two layers with
whiteouts, an oci-archive and a docker-archive (skopeo); a harness whose
command exists only in its image, seeing the image's /etc/os-release and
keeping /workspace across runs; the sandbox API's PUT with an image; two
sandboxes on one image sharing one unpacked copy; `image rm` refused while
in use; every hostile or broken image refused with nothing of the host
changed."""
import json
import os
import shutil
import subprocess
import tempfile
import time

import imagebuild
from rwtest import BUILD, poll, stdout_text

SUITE_CONF = """[containerd-shim]
max_instances = 16
image_max_entries = 3000
image_max_bytes = 8M

[harness.bb]
adapter = shell
command = ["/opt/tools/imgsh"]
image = busybox

[harness.oci]
adapter = shell
command = ["/bin/sh"]
image = oci2
"""

WORK = tempfile.mkdtemp(prefix="rw-images-")
CLI_ENV = dict(os.environ, RUNWARDEN_LIBEXECDIR=BUILD)


def image(s, *args, ok=True):
    """runwarden image ARGS… on the suite's configuration."""
    p = subprocess.run([os.path.join(BUILD, "runwarden"), "image", "--config", s.conf_path,
                        *args], capture_output=True, text=True, timeout=120, env=CLI_ENV)
    if ok:
        assert p.returncode == 0, (args, p.returncode, p.stdout, p.stderr)
    return p


def store(s, *parts):
    return os.path.join(s.dir, "state", "images", *parts)


def unpacked(s):
    return sorted(os.listdir(store(s, "unpacked")))


def run_on(s, harness, thread, command):
    r = s.start_run(command, thread=thread, metadata={"harness": harness})
    ev, st, _, _ = s.tail(r, thread=thread)
    return st, stdout_text(ev), ev


def exec_in(s, thread, argv):
    st, body = s.http("POST", f"/sandboxes/{thread}/exec", {"argv": argv})
    return st, body


def sbx_exec(s, thread, argv):
    """(exit code, stdout) of a sandbox API exec."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
    c.request("POST", f"/sandboxes/{thread}/exec", body=json.dumps({"argv": argv}).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200, (r.status, r.read())
    out, code = "", None
    for line in r.read().decode().splitlines():
        if not line.strip():
            continue
        o = json.loads(line)
        if o["type"] == "stdout":
            out += o["data"]
        elif o["type"] == "exit":
            code = o["exitCode"]
    c.close()
    return code, out


def test_import_a_rootfs_tarball_and_list_it(s):
    tar = imagebuild.rootfs_tarball(os.path.join(WORK, "busybox.tar"))
    p = image(s, "import", "busybox", tar)
    assert "busybox sha256:" in p.stdout and "rootfs" in p.stdout, p.stdout
    assert "setuid/setgid bits dropped" in p.stdout, p.stdout
    ls = image(s, "ls").stdout
    assert "busybox" in ls, ls
    info = json.loads(image(s, "inspect", "busybox").stdout)
    assert info["source"] == "rootfs" and info["inUse"] == 0, info
    root = info["rootfs"]
    assert os.stat(os.path.join(root, "bin", "suid-tool")).st_mode & 0o7777 == 0o755
    # its disk use on /metrics (the shim's SHIM_IMAGES, read every 2 s)
    assert info["diskBytes"] >= info["bytes"] > 1 << 20, info
    assert poll(lambda: s.metric('runwarden_image_bytes{image="busybox"}') == info["diskBytes"],
                10)
    # imported once: the same tarball under another name is the same copy
    image(s, "import", "busybox-again", tar)
    assert len(unpacked(s)) == 1, unpacked(s)
    image(s, "rm", "busybox-again")
    assert len(unpacked(s)) == 1, unpacked(s)


def test_a_harness_runs_its_images_command_and_keeps_the_workspace(s):
    st, out, ev = run_on(s, "bb", "t-bb", "cat /etc/os-release; echo kept > /workspace/note; "
                         "id -u; cat /etc/hostname")
    assert st["status"] == "completed", (st, ev)
    assert "ID=rwbusybox" in out and "sandbox\n" in out, out
    # the image's command is nowhere on the host
    assert not os.path.exists("/opt/tools/imgsh")
    st, out, ev = run_on(s, "bb", "t-bb", "cat /workspace/note; ls /; "
                         "touch /bin/x 2>&1 || echo read-only")
    assert st["status"] == "completed", (st, ev)
    assert out.startswith("kept\n") and "read-only" in out, out
    # what the host has and the image has not is not there
    st, out, _ = run_on(s, "bb", "t-bb", "test -e /usr/bin/python3 && echo host || echo image")
    assert out == "image\n", out


def test_two_sandboxes_on_one_image_share_one_copy(s):
    outs = []
    for t in ("t-share-a", "t-share-b"):
        st, out, ev = run_on(s, "bb", t, "stat -c '%d:%i' /bin/busybox")
        assert st["status"] == "completed", ev
        outs.append(out)
    assert outs[0] == outs[1], outs  # one file on disk, seen by both
    assert len(unpacked(s)) == 1, unpacked(s)
    info = json.loads(image(s, "inspect", "busybox").stdout)
    assert info["inUse"] >= 2, info  # t-bb, t-share-a, t-share-b are running
    # rm of an image in use is refused, and changes nothing
    p = image(s, "rm", "busybox", ok=False)
    assert p.returncode == 3 and "in use" in p.stderr, (p.returncode, p.stderr)
    assert "busybox" in image(s, "ls").stdout
    st, out, _ = run_on(s, "bb", "t-share-a", "cat /etc/os-release")
    assert "ID=rwbusybox" in out, out


def test_an_oci_layout_with_whiteouts_and_env(s):
    layout = os.path.join(WORK, "layout")
    digest = imagebuild.oci_layout(layout)
    p = image(s, "import", "oci2", layout)
    assert digest in p.stdout and " oci " in p.stdout, p.stdout
    st, out, ev = run_on(s, "oci", "t-oci", "cat /etc/os-release; ls /opt /opt/old; "
                         "echo $IMG_VAR $PATH")
    assert st["status"] == "completed", ev
    assert "ID=rwoci" in out, out
    assert "gone.txt" not in out and "file" not in out.split("\n"), out  # whited out
    assert "kept.txt" in out and "new.txt" in out, out
    assert "from-image /opt/tools:/bin" in out, out


def test_the_sandbox_api_puts_a_sandbox_on_an_image(s):
    st, js = s.http("PUT", "/sandboxes/t-api", {"image": "oci2"})
    assert st in (200, 201), (st, js)
    code, out = sbx_exec(s, "t-api", ["/bin/cat", "/etc/os-release"])
    assert code == 0 and "ID=rwoci" in out, (code, out)
    code, out = sbx_exec(s, "t-api", ["/bin/sh", "-c", "echo $IMG_VAR > /workspace/v"])
    assert code == 0
    # a run of another image gets a sandbox on it, with the same workspace
    st, out, ev = run_on(s, "bb", "t-api", "cat /workspace/v /etc/os-release")
    assert st["status"] == "completed", ev
    assert out.startswith("from-image\n") and "ID=rwbusybox" in out, out
    # and the sandbox API's exec stays on that image (no image asked)
    code, out = sbx_exec(s, "t-api", ["/bin/cat", "/etc/os-release"])
    assert "ID=rwbusybox" in out, out
    # a run of a harness without image: the host's binds again
    st, out, ev = run_on(s, "shell", "t-api", "cat /workspace/v; test -x /usr/bin/python3 && "
                         "echo host")
    assert out == "from-image\nhost\n", (out, ev)
    st, js = s.http("PUT", "/sandboxes/t-api2", {"image": "no-such-image"})
    assert st == 404 and js["code"] == "image_not_found", (st, js)
    st, js = s.http("PUT", "/sandboxes/t-api2", {"image": 7})
    assert st == 400, (st, js)
    st, js = s.http("PUT", "/sandboxes/t-api2", {"image": "../../etc"})
    assert st == 400, (st, js)


def test_archives_import(s):
    layout = os.path.join(WORK, "layout")
    digest = imagebuild.oci_layout(layout)
    da = imagebuild.docker_archive(layout, os.path.join(WORK, "img-docker.tar"))
    p = image(s, "import", "dock", da)
    assert "docker-archive" in p.stdout, p.stdout
    oa = imagebuild.oci_archive(layout, os.path.join(WORK, "img-oci.tar"))
    p = image(s, "import", "ociarch", oa)
    assert "oci-archive" in p.stdout, p.stdout  # (skopeo writes the manifest anew)
    st, js = s.http("PUT", "/sandboxes/t-dock", {"image": "dock"})
    assert st in (200, 201), (st, js)
    code, out = sbx_exec(s, "t-dock", ["/bin/sh", "-c", "cat /etc/os-release; ls /opt"])
    assert "ID=rwoci" in out and "gone.txt" not in out, out
    # 22 layers: ~90 archive entries before its manifest.json, still a docker-archive
    many = os.path.join(WORK, "layout-many")
    imagebuild.oci_layout(many, extra_layers=20)
    da = imagebuild.docker_archive(many, os.path.join(WORK, "img-many.tar"))
    p = image(s, "import", "many", da)
    assert "docker-archive" in p.stdout, p.stdout
    info = json.loads(image(s, "inspect", "many").stdout)
    assert sorted(os.listdir(os.path.join(info["rootfs"], "opt", "extra"))) == \
        sorted(str(i) for i in range(20))
    image(s, "rm", "many")


def test_hostile_images_are_refused_and_change_nothing(s):
    before = set(os.listdir(store(s, "unpacked")))
    for kind in ("abs-symlink-through", "dotdot-symlink", "abs-hardlink", "dotdot-hardlink",
                 "dotdot-path", "abs-path", "escaping-whiteout", "device", "entries", "bytes"):
        outside = os.path.join(WORK, f"escaped-{kind}")
        tar = imagebuild.hostile(os.path.join(WORK, f"hostile-{kind}.tar"), kind, outside)
        p = image(s, "import", "evil", tar, ok=False)
        assert p.returncode == 1 and p.stderr.startswith("runwarden image import: "), (kind, p)
        assert not os.path.exists(outside), kind
        assert set(os.listdir(store(s, "unpacked"))) == before, kind
        assert os.listdir(store(s, "staging")) == [], kind
        assert "evil" not in os.listdir(store(s, "names")), kind
    # a layer whose bytes do not match its digest; a truncated tarball
    bad = os.path.join(WORK, "layout-tampered")
    # (another config than oci2's: a manifest already unpacked is not read again)
    imagebuild.oci_layout(bad, env=["TAMPERED=1"], tamper=True)
    p = image(s, "import", "evil", bad, ok=False)
    assert p.returncode == 1 and "digest mismatch" in p.stderr, p.stderr
    tr = imagebuild.truncated(os.path.join(WORK, "busybox.tar"), os.path.join(WORK, "trunc.tar"))
    p = image(s, "import", "evil", "rootfs:" + tr, ok=False)
    assert p.returncode == 1 and "truncated" in p.stderr.lower(), p.stderr
    # a config the sandbox cannot honour: refused, naming why
    odd = os.path.join(WORK, "layout-user")
    imagebuild.oci_layout(odd, user="node")
    p = image(s, "import", "evil", odd, ok=False)
    assert "User is 'node'" in p.stderr, p.stderr
    imagebuild.oci_layout(odd, workdir="/app")
    p = image(s, "import", "evil", odd, ok=False)
    assert "WorkingDir is '/app'" in p.stderr, p.stderr
    assert set(os.listdir(store(s, "unpacked"))) == before


def custom(ev, name):
    return [e for e in ev if e["chunk"]["type"] == "CUSTOM" and e["chunk"]["name"] == name]


def test_a_shim_restart_keeps_the_image_and_its_use(s):
    """SIGUSR2 (an upgrade): the next shim re-adopts the sandbox on its image
    (from the record beside the workspace), `rm` is still refused (in use is
    a mount, not the shim's memory), and the thread's next run resumes the
    same sandbox rather than building one on the same image again."""
    import signal
    s.expected_errors += [r"containerd-shim"]
    r = s.start_run("for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do echo n$i; sleep 0.1; done",
                    thread="t-bb", metadata={"harness": "bb"})
    time.sleep(0.4)  # the run is under way (15 lines over 1.5 s)
    assert s.kill("containerd-shim", signal.SIGUSR2) == 0
    time.sleep(0.2)
    s.start_daemon("containerd-shim")
    ev, st, _, _ = s.tail(r, thread="t-bb", last_seq=0, timeout=60)
    assert st["status"] == "completed", (st, ev[-3:])
    assert stdout_text(ev) == "".join(f"n{i}\n" for i in range(1, 16)), stdout_text(ev)
    p = image(s, "rm", "busybox", ok=False)
    assert p.returncode == 3, p
    st, out, ev = run_on(s, "bb", "t-bb", "cat /etc/os-release")
    assert "ID=rwbusybox" in out, out
    assert custom(ev, "sandbox.resumed") and not custom(ev, "sandbox.created"), \
        [e["chunk"]["name"] for e in ev if e["chunk"]["type"] == "CUSTOM"]


def test_rm_after_use_and_gc(s):
    for t in ("t-bb", "t-share-a", "t-share-b", "t-api", "t-oci", "t-dock"):
        st, _ = s.http("DELETE", f"/sandboxes/{t}")
        assert st == 204, (t, st)
    assert poll(lambda: json.loads(image(s, "inspect", "busybox").stdout)["inUse"] == 0, 10)
    image(s, "rm", "busybox")
    assert "busybox" not in image(s, "ls").stdout
    p = image(s, "rm", "busybox", ok=False)
    assert p.returncode == 4, p
    for n in ("oci2", "dock", "ociarch"):
        image(s, "rm", n)
    assert unpacked(s) == [], (unpacked(s), image(s, "ls").stdout, os.listdir(store(s, "names")))
    # a run of a harness whose image is gone fails, naming it
    st, out, ev = run_on(s, "bb", "t-gone", "true")
    assert st["status"] == "failed", st
    assert "no image 'busybox'" in json.dumps(ev), ev
    shutil.rmtree(WORK, ignore_errors=True)
