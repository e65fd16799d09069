# SPDX-License-Identifier: MIT
"""Disk quotas of a sandbox (SANDBOX.md §7 "Filling the workspace and /tmp
gives ENOSPC at the quota; a million empty files give an inode cap";
docs/DESIGN.md "Workspace quotas").

- /tmp and /dev/shm: tmpfs with size= and nr_inodes= (tmp_inodes): creating
  files until the error stops at the cap with ENOSPC.
- The workspace: project quotas (workspace_quota, workspace_inodes). The real
  daemons run with their state_dir on an ext4 image made here (truncate,
  mkfs.ext4 -O quota,project, a loop device, mount -o prjquota); a dd past the
  quota fails with EDQUOT ("Disk quota exceeded"), file creation stops at
  workspace_inodes, and a second sandbox has its own project and quota.
- Fail closed: a quota configured where the filesystem cannot enforce it (the
  default state dir, on an ext4 / without prjquota; an ext4 image without the
  quota features) fails the run with the typed workspace_quota error, and
  nothing ran.

Each test starts its own suite (NO_SUITE), since the state_dir differs. Loop
devices are required: without them the tests FAIL. The project-quota tests
print a SKIP line only when the running kernel's own config
(/proc/config.gz) says it cannot mount ext4 with project quotas (no
CONFIG_QFMT_V2): that is a kernel, not a runwarden, property, and the
fail-closed tests still run on such a kernel."""
import contextlib
import fcntl
import gzip
import os
import shutil
import struct
import subprocess
import tempfile

import rwtest
from rwtest import stdout_text

NO_SUITE = True

FS_IOC_FSGETXATTR = 0x801C581F
FS_XFLAG_PROJINHERIT = 0x200
PROJID_BASE = 1000000  # [containerd-shim] workspace_projid_base default
PROJID_COUNT = 1000000

# Run inside the sandbox: create empty files in DIR until the first error;
# print "<count> <errno name>".
FILL_FILES = r"""
import errno, os, sys
d, n = sys.argv[2], 0
try:
    while True:
        os.close(os.open(os.path.join(d, "f%d" % n), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        n += 1
except OSError as e:
    print(n, errno.errorcode[e.errno])
"""


def py(script, *args):
    """A /bin/sh command line running script with python3 in the sandbox (hex:
    no quoting of the script)."""
    return ("python3 -c 'import sys; exec(bytes.fromhex(sys.argv[1]).decode())' "
            + script.encode().hex() + "".join(" " + a for a in args))


def kernel_lacks_ext4_quota():
    """A reason when the running kernel's config says it cannot mount ext4
    with the quota feature read-write, else None. Without /proc/config.gz we
    cannot tell, and the tests run (and fail if the mount fails)."""
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            cfg = f.read()
    except OSError:
        return None
    for opt in ("CONFIG_QUOTA", "CONFIG_QFMT_V2"):
        if f"\n{opt}=y" not in cfg and f"\n{opt}=m" not in cfg:
            return f"this kernel ({os.uname().release}) is built without {opt}"
    return None


def sh(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0, (argv, r.returncode, r.stdout, r.stderr)
    return r.stdout.strip()


@contextlib.contextmanager
def ext4_image(mnt, size="64M", features=None, opts=None):
    """An ext4 image on a loop device mounted at mnt; unmounted and detached
    afterwards, also when the body fails."""
    if not os.path.exists("/dev/loop-control"):
        raise AssertionError("loop devices are unavailable (/dev/loop-control missing): "
                             "this test needs them (modprobe loop, or run on the host)")
    work = tempfile.mkdtemp(prefix="rw-quota-img-")
    img = os.path.join(work, "fs.img")
    dev = None
    mounted = False
    try:
        sh("truncate", "-s", size, img)
        sh("mkfs.ext4", "-q", *(["-O", features] if features else []), img)
        r = subprocess.run(["losetup", "--find", "--show", img], capture_output=True, text=True)
        assert r.returncode == 0, ("loop devices are unavailable: losetup failed: "
                                   + r.stderr.strip())
        dev = r.stdout.strip()
        os.makedirs(mnt, exist_ok=True)
        sh("mount", "-t", "ext4", *(["-o", opts] if opts else []), dev, mnt)
        mounted = True
        yield dev
    finally:
        if mounted:
            subprocess.run(["umount", "-l", mnt])
        if dev:
            subprocess.run(["losetup", "-d", dev])
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def suite(conf, image=None):
    """A suite of real daemons with conf; image: (features, opts) of an ext4
    image mounted as its state_dir. Fails on any hygiene problem."""
    s = rwtest.Suite(conf)
    try:
        with contextlib.ExitStack() as stack:
            if image:
                stack.enter_context(ext4_image(os.path.join(s.dir, "state"), "64M", *image))
            try:
                s.start()
                yield s
            finally:
                problems = s.stop()
                assert not problems, problems + [s.log("containerd-shim")[-3000:]]
    finally:
        s.cleanup()


def run(s, command, thread, timeout=60):
    run_id = s.start_run(command, thread=thread)
    events, status, _, _ = s.tail(run_id, thread=thread, timeout=timeout)
    assert status is not None, events
    return events, status


def run_ok(s, command, thread):
    events, status = run(s, command, thread)
    assert status["status"] == "completed", (status, stdout_text(events),
                                             stdout_text(events, "process.stderr"))
    return stdout_text(events), stdout_text(events, "process.stderr")


def workspace(s, thread):
    return os.path.join(s.dir, "state", "sandboxes", sandbox_id(thread), "workspace")


def sandbox_id(key):
    import hashlib
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def fsxattr(path):
    """(xflags, projid) of path."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        buf = fcntl.ioctl(fd, FS_IOC_FSGETXATTR, bytes(28))
    finally:
        os.close(fd)
    xflags, _extsize, _nextents, projid, _cowext = struct.unpack("=IIIII", buf[:20])
    return xflags, projid


# ---------------------------------------------------------------- /tmp, /dev/shm

TMP_INODES = 300


def test_tmp_and_shm_inode_cap():
    with suite(f"[containerd-shim]\ntmp_inodes = {TMP_INODES}\n") as s:
        for d in ("/tmp", "/dev/shm"):
            out, _ = run_ok(s, py(FILL_FILES, d), "tmp-" + d.replace("/", "-"))
            n, err = out.split()
            # the mount's root directory takes one inode of the cap
            assert err == "ENOSPC", out
            assert int(n) == TMP_INODES - 1, (d, out)


# ---------------------------------------------------------------- fail closed

QUOTA_ERR = ("sandbox: sandbox creation failed: workspace_quota: {dir} is on ext4 without "
             "project quotas; mount it with -o prjquota (the filesystem needs the quota and "
             "project features: tune2fs -O quota,project), or set workspace_quota=0 and "
             "workspace_inodes=0")


def assert_fails_closed(s, thread):
    s.expected_errors.append(r"workspace_quota: .* without project quotas")
    marker = "/workspace/ran"
    events, status = run(s, f"echo ran > {marker}; echo ran", thread)
    assert status["status"] == "failed", status
    assert status["error"] == {
        "code": "sandbox_error",
        "message": QUOTA_ERR.format(dir=os.path.join(s.dir, "state", "sandboxes")),
    }, status["error"]
    assert stdout_text(events) == "", events
    assert not os.path.exists(os.path.join(workspace(s, thread), "ran"))
    # no sandbox was created: the shim has no cgroup or process for it
    assert [e for e in events if e["chunk"]["type"] == "CUSTOM"
            and e["chunk"]["name"] == "sandbox.created"] == [], events


def test_quota_on_root_fs_without_prjquota_fails_closed():
    with suite("[containerd-shim]\nworkspace_quota = 8M\n") as s:
        fstype = sh("findmnt", "-no", "FSTYPE", "--target", s.dir)
        assert fstype == "ext4", f"this test expects {s.dir} on ext4, not {fstype}"
        assert_fails_closed(s, "closed-root")


def test_inode_quota_on_ext4_without_quota_features_fails_closed():
    with suite("[containerd-shim]\nworkspace_inodes = 100\n", image=(None, None)) as s:
        assert sh("findmnt", "-no", "FSTYPE", os.path.join(s.dir, "state")) == "ext4"
        assert_fails_closed(s, "closed-img")


def test_doctor_reports_project_quota_support():
    binary = os.path.join(rwtest.BUILD, "containerd-shim")
    with tempfile.TemporaryDirectory(prefix="rw-quota-doc-") as d:
        conf = os.path.join(d, "rw.conf")
        for extra, status in (("", "info"), ("workspace_quota = 1G\n", "FAIL")):
            with open(conf, "w") as f:
                f.write(f"[runwarden]\nstate_dir = {d}/state\nruntime_dir = {d}/run\n"
                        f"[containerd-shim]\n{extra}")
            r = subprocess.run([binary, "--config", conf, "--doctor"], capture_output=True,
                               text=True, timeout=60)
            line = [ln for ln in r.stdout.splitlines() if "project quotas" in ln]
            assert len(line) == 1, r.stdout
            assert line[0].startswith(status + " "), line
            assert f"{d}/state/sandboxes is on ext4 without project quotas" in line[0], line
            if status == "FAIL":
                assert r.returncode == 1, r.stdout


# ---------------------------------------------------------------- project quotas

WS_QUOTA = 4 * 1024 * 1024
WS_INODES = 120
QUOTA_CONF = f"[containerd-shim]\nworkspace_quota = 4M\nworkspace_inodes = {WS_INODES}\n"
PRJ_IMAGE = ("quota,project", "prjquota")


def prjquota_suite():
    why = kernel_lacks_ext4_quota()
    if why:
        print(f"SKIP workspace project quotas: {why}, so ext4 with project quotas cannot "
              "be mounted read-write here (the fail-closed tests above cover this kernel)")
        return None
    return suite(QUOTA_CONF, image=PRJ_IMAGE)


def dd_past_quota(s, thread):
    """dd 6 MiB into a 4 MiB workspace: (stderr, size of the file)."""
    events, status = run(s, "dd if=/dev/zero of=/workspace/big bs=4096 count=1536; "
                         "echo rc=$?", thread)
    assert status["status"] == "completed", status
    assert stdout_text(events) == "rc=1\n", events
    return (stdout_text(events, "process.stderr"),
            os.stat(os.path.join(workspace(s, thread), "big")).st_size)


def test_workspace_byte_and_inode_quota():
    cm = prjquota_suite()
    if cm is None:
        return
    with cm as s:
        err, size = dd_past_quota(s, "prj-a")
        # ext4 project quota: EDQUOT (dquot_alloc_block), not ENOSPC
        assert "dd: error writing '/workspace/big': Disk quota exceeded" in err, err
        # the workspace directory's own block counts; ± one 4 KiB block
        assert WS_QUOTA - 3 * 4096 <= size <= WS_QUOTA, size

        xflags, projid = fsxattr(workspace(s, "prj-a"))
        assert xflags & FS_XFLAG_PROJINHERIT, hex(xflags)
        assert PROJID_BASE <= projid < PROJID_BASE + PROJID_COUNT, projid

        # another sandbox: its own project, its own full quota
        err_b, size_b = dd_past_quota(s, "prj-b")
        assert "Disk quota exceeded" in err_b, err_b
        assert WS_QUOTA - 3 * 4096 <= size_b <= WS_QUOTA, size_b
        _, projid_b = fsxattr(workspace(s, "prj-b"))
        assert projid_b != projid and PROJID_BASE <= projid_b < PROJID_BASE + PROJID_COUNT

        # inodes: a fresh sandbox; the workspace directory itself is one of them
        out, _ = run_ok(s, py(FILL_FILES, "/workspace"), "prj-c")
        n, e = out.split()
        assert e == "EDQUOT", out
        assert int(n) == WS_INODES - 1, out

        # the first sandbox is still capped after a re-creation (id kept)
        out, _ = run_ok(s, "rm /workspace/big; echo ok", "prj-a")
        assert out == "ok\n"
        assert fsxattr(workspace(s, "prj-a"))[1] == projid


def test_existing_workspace_is_labelled_when_the_quota_is_turned_on():
    """A workspace made without a quota gets the project id recursively at the
    next creation: its existing bytes count against the new quota."""
    why = kernel_lacks_ext4_quota()
    if why:
        print(f"SKIP existing workspace relabel: {why}")
        return
    s = rwtest.Suite("")
    state = os.path.join(s.dir, "state")
    try:
        with ext4_image(state, "64M", *PRJ_IMAGE):
            s.start()
            run_ok(s, "mkdir -p /workspace/d/e && head -c 3000000 /dev/zero > "
                   "/workspace/d/e/old && echo ok", "relabel")
            problems = s.stop()
            assert not problems, problems
            assert fsxattr(workspace(s, "relabel"))[1] == 0
            s.extra_conf = QUOTA_CONF
            s.procs = {}
            s.start()
            events, status = run(s, "head -c 2000000 /dev/zero > /workspace/new; echo rc=$?",
                                 "relabel")
            assert status["status"] == "completed", status
            assert stdout_text(events) == "rc=1\n", events
            assert "Disk quota exceeded" in stdout_text(events, "process.stderr"), events
            new = os.stat(os.path.join(workspace(s, "relabel"), "new")).st_size
            assert new <= WS_QUOTA - 3000000, new
            problems = s.stop()
            assert not problems, problems
    finally:
        s.cleanup()

