# SPDX-License-Identifier: MIT
"""Disk quotas of a sandbox (SANDBOX.md §7 "Filling the workspace and /tmp
gives ENOSPC at the quota; a million empty files give an inode cap";
docs/DESIGN.md "Workspace quotas are filesystem project quotas").

- /tmp and /dev/shm: tmpfs with size= and nr_inodes= (tmp_inodes): creating
  files until the error stops at the cap (the root directory takes one) with
  ENOSPC.
- The workspace: project quotas (workspace_quota, workspace_inodes). The real
  daemons run with their state_dir on a filesystem image made here on a loop
  device: ext4 (mkfs.ext4 -O quota,project, mount -o prjquota) and XFS (mount
  -o pquota). A dd past the quota fails with EDQUOT on ext4 and ENOSPC on XFS,
  its file ends within 3 blocks of the quota, file creation stops at
  workspace_inodes, a second sandbox has its own project and quota, a
  re-created sandbox keeps its project id, and a workspace made before the
  quota was turned on is relabelled recursively.
- Fail closed: a quota configured where the filesystem cannot enforce it (the
  default state dir, on an ext4 / without prjquota; an ext4 image without the
  quota features) fails the run with the typed workspace_quota error, and
  nothing ran. The doctor reports it.

Each test starts its own suite (NO_SUITE), since the state_dir differs. Loop
devices are required: without them the tests FAIL. A project-quota test prints
a SKIP line only when the running kernel's own config (/proc/config.gz) says
it cannot enforce that filesystem's project quotas (no CONFIG_QFMT_V2, no
CONFIG_XFS_QUOTA): a kernel property, not runwarden's; the fail-closed tests
still run on such a kernel, and tests/vm/run-e2e runs the module under
Debian's stock kernel in QEMU."""
import contextlib
import fcntl
import gzip
import os
import re
import shutil
import struct
import subprocess
import tempfile

import rwtest
from rwtest import stdout_text

NO_SUITE = True
SHIMCTL = os.path.join(rwtest.BUILD, "tools", "shimctl")

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


# what each filesystem needs of the kernel to enforce project quotas
KERNEL_NEEDS = {"ext4": ("CONFIG_QUOTA", "CONFIG_QFMT_V2"), "xfs": ("CONFIG_XFS_QUOTA",)}


def kernel_lacks_project_quota(fstype):
    """A reason when the running kernel's config says it cannot mount fstype
    with project quotas, else None. Without /proc/config.gz we cannot tell, and
    the tests run (and fail if the mount fails)."""
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            cfg = f.read()
    except OSError:
        return None
    for opt in KERNEL_NEEDS[fstype]:
        if f"\n{opt}=y" not in cfg and f"\n{opt}=m" not in cfg:
            return f"this kernel ({os.uname().release}) is built without {opt}"
    return None


def sh(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0, (argv, r.returncode, r.stdout, r.stderr)
    return r.stdout.strip()


@contextlib.contextmanager
def fs_image(mnt, fstype="ext4", mkfs_args=(), opts=None, size="64M"):
    """A filesystem image on a loop device mounted at mnt; unmounted and
    detached afterwards, also when the body fails."""
    if not os.path.exists("/dev/loop-control"):
        raise AssertionError("loop devices are unavailable (/dev/loop-control missing): "
                             "this test needs them (modprobe loop, or run on the host)")
    work = tempfile.mkdtemp(prefix="rw-quota-img-")
    img = os.path.join(work, "fs.img")
    dev = None
    mounted = False
    try:
        sh("truncate", "-s", size, img)
        sh("mkfs." + fstype, "-q", *mkfs_args, img)
        r = subprocess.run(["losetup", "--find", "--show", img], capture_output=True, text=True)
        assert r.returncode == 0, ("loop devices are unavailable: losetup failed: "
                                   + r.stderr.strip())
        dev = r.stdout.strip()
        os.makedirs(mnt, exist_ok=True)
        sh("mount", "-t", fstype, *(["-o", opts] if opts else []), dev, mnt)
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
    """A suite of real daemons with conf; image: fs_image() keyword arguments
    of an image mounted as its state_dir. Fails on any hygiene problem."""
    # the run log reserves its map on the state filesystem (a small image
    # here, or the QEMU VM's tmpfs of tests/vm/run-e2e): keep it small
    conf += "\n[coordinatord]\nmap_size = 8M\n"
    s = rwtest.Suite(conf)
    try:
        with contextlib.ExitStack() as stack:
            if image is not None:
                stack.enter_context(fs_image(os.path.join(s.dir, "state"), **image))
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


def shimctl(s, key, *args):
    sock = os.path.join(s.dir, "run", "containerd-shim.sock")
    return subprocess.run([SHIMCTL, sock, key, *args], capture_output=True, text=True,
                          timeout=60)


def workspace(s, thread):
    return os.path.join(s.dir, "state", "sandboxes", sandbox_id(thread), "workspace")


def sandbox_id(key):
    import hashlib
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def fsxattr(path):
    """(xflags, projid) of path (a directory or a regular file)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
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
             "project features: tune2fs -O quota,project), or set workspace_quota_required=no "
             "(no quota there) or workspace_quota=0 and workspace_inodes=0")
REQUIRED = "workspace_quota_required = yes\n"


def assert_fails_closed(s, thread):
    s.expected_errors.append(r"workspace_quota: .* without project quotas")
    s.expected_errors.append(r"WORKSPACE QUOTAS CANNOT BE ENFORCED: .* without project quotas")
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
    with suite("[containerd-shim]\nworkspace_quota = 8M\n" + REQUIRED) as s:
        fstype = sh("findmnt", "-no", "FSTYPE", "--target", s.dir)
        assert fstype == "ext4", f"this test expects {s.dir} on ext4, not {fstype}"
        assert_fails_closed(s, "closed-root")


def test_inode_quota_on_ext4_without_quota_features_fails_closed():
    with suite("[containerd-shim]\nworkspace_inodes = 100\n" + REQUIRED, image={}) as s:
        assert sh("findmnt", "-no", "FSTYPE", os.path.join(s.dir, "state")) == "ext4"
        assert_fails_closed(s, "closed-img")


def test_doctor_reports_project_quota_support():
    binary = os.path.join(rwtest.BUILD, "containerd-shim")
    with tempfile.TemporaryDirectory(prefix="rw-quota-doc-") as d:
        conf = os.path.join(d, "rw.conf")
        for extra, status in (("", "WARN"), ("workspace_quota_required = yes\n", "FAIL"),
                              ("workspace_quota = 0\nworkspace_inodes = 0\n", "info")):
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
            if status == "WARN":  # a warning alone never fails the doctor
                assert "FAIL" in r.stdout or r.returncode == 0, r.stdout
                assert "workspaces get NO quota" in line[0], line


def test_default_quota_where_unsupported_warns_loudly_and_runs():
    """Quotas are on by default; on a filesystem without project quotas the
    sandboxes run without one and the shim's start-up log says so loudly."""
    with suite("") as s:
        assert sh("findmnt", "-no", "FSTYPE", "--target", s.dir) == "ext4"
        out, _ = run_ok(s, "echo ran > /workspace/ran; echo ran", "default-unsup")
        assert out == "ran\n"
        assert fsxattr(workspace(s, "default-unsup"))[1] == 0  # no project: no quota
        log = s.log("containerd-shim")
        assert re.search(r"<4>.*WORKSPACE QUOTAS ARE NOT ENFORCED: "
                         + re.escape(os.path.join(s.dir, "state", "sandboxes"))
                         + r" is on ext4 without project quotas", log), log[-2000:]


# ---------------------------------------------------------------- project quotas

WS_QUOTA = 4 * 1024 * 1024
WS_INODES = 120
QUOTA_CONF = f"[containerd-shim]\nworkspace_quota = 4M\nworkspace_inodes = {WS_INODES}\n"
IMAGES = {
    "ext4": {"fstype": "ext4", "mkfs_args": ("-O", "quota,project"), "opts": "prjquota"},
    # mkfs.xfs refuses images under 300 MiB; the file is sparse
    "xfs": {"fstype": "xfs", "mkfs_args": ("-f",), "opts": "pquota", "size": "320M"},
}
# what a write past the project quota fails with: ext4 charges it like a user
# quota (dquot_alloc_block: EDQUOT); XFS reports a project quota as a full
# filesystem (xfs_trans_dqresv: ENOSPC for project dquots)
QUOTA_ERRNO = {"ext4": ("EDQUOT", "Disk quota exceeded"),
               "xfs": ("ENOSPC", "No space left on device")}


def prjquota_suite(fstype):
    why = kernel_lacks_project_quota(fstype)
    if why:
        raise rwtest.Skip(f"workspace project quotas on {fstype}: {why}, so {fstype} with "
                          "project quotas cannot be mounted read-write here (tests/run-all "
                          "reruns this under Debian's kernel in a VM: tests/vm/run-e2e)")
    return suite(QUOTA_CONF, image=IMAGES[fstype])


def dd_past_quota(s, thread):
    """dd 6 MiB into a 4 MiB workspace: (stderr, size of the file)."""
    events, status = run(s, "dd if=/dev/zero of=/workspace/big bs=4096 count=1536; "
                         "echo rc=$?", thread)
    assert status["status"] == "completed", status
    assert stdout_text(events) == "rc=1\n", events
    return (stdout_text(events, "process.stderr"),
            os.stat(os.path.join(workspace(s, thread), "big")).st_size)


def byte_and_inode_quota(fstype):
    cm = prjquota_suite(fstype)
    errname, strerror = QUOTA_ERRNO[fstype]
    with cm as s:
        err, size = dd_past_quota(s, "prj-a")
        assert f"dd: error writing '/workspace/big': {strerror}" in err, err
        # the directory's own blocks count too; within 3 blocks of 4 KiB
        assert WS_QUOTA - 3 * 4096 <= size <= WS_QUOTA, size
        print(f"   {fstype}: dd stopped at {size} of {WS_QUOTA} bytes")

        xflags, projid = fsxattr(workspace(s, "prj-a"))
        assert xflags & FS_XFLAG_PROJINHERIT, hex(xflags)
        assert PROJID_BASE <= projid < PROJID_BASE + PROJID_COUNT, projid

        # another sandbox: its own project, its own full quota
        err_b, size_b = dd_past_quota(s, "prj-b")
        assert f"dd: error writing '/workspace/big': {strerror}" in err_b, err_b
        assert WS_QUOTA - 3 * 4096 <= size_b <= WS_QUOTA, size_b
        _, projid_b = fsxattr(workspace(s, "prj-b"))
        assert projid_b != projid and PROJID_BASE <= projid_b < PROJID_BASE + PROJID_COUNT

        # inodes: a fresh sandbox; the workspace directory itself is one of them
        out, _ = run_ok(s, py(FILL_FILES, "/workspace"), "prj-c")
        n, e = out.split()
        assert e == errname, out
        assert int(n) == WS_INODES - 1, out
        print(f"   {fstype}: {n} files created with workspace_inodes = {WS_INODES}")

        # a re-created sandbox keeps its project id and its cap
        r = shimctl(s, "prj-a", "--destroy")
        assert r.returncode == 0, (r.stdout, r.stderr)
        out, _ = run_ok(s, "rm /workspace/big; echo ok", "prj-a")
        assert out == "ok\n"
        assert fsxattr(workspace(s, "prj-a"))[1] == projid
        err, size = dd_past_quota(s, "prj-a")
        assert strerror in err and WS_QUOTA - 3 * 4096 <= size <= WS_QUOTA, size


def test_workspace_byte_and_inode_quota_ext4():
    byte_and_inode_quota("ext4")


def test_workspace_byte_and_inode_quota_xfs():
    byte_and_inode_quota("xfs")


def project_limits(path, projid):
    """(byte hard limit, inode hard limit) of project projid on the filesystem
    holding path: quotactl(Q_GETQUOTA, PRJQUOTA) on its block device."""
    import ctypes
    dev = sh("findmnt", "-no", "SOURCE", "--target", path)
    buf = ctypes.create_string_buffer(72)  # struct if_dqblk
    libc = ctypes.CDLL(None, use_errno=True)
    cmd = (0x800007 << 8) | 2  # QCMD(Q_GETQUOTA, PRJQUOTA)
    if libc.quotactl(cmd, dev.encode(), projid, buf) < 0:
        raise OSError(ctypes.get_errno(), f"quotactl {dev}")
    bhard, _bsoft, _cur, ihard = struct.unpack("=QQQQ", buf.raw[:32])
    return bhard * 1024, ihard


def test_default_quota_applies_where_supported():
    """With no quota key in the configuration, a workspace on a filesystem with
    project quotas gets the defaults: 10G and 1,000,000 inodes."""
    why = kernel_lacks_project_quota("ext4")
    if why:
        raise rwtest.Skip(f"default workspace quota: {why} (tests/run-all reruns it in a "
                          "VM: tests/vm/run-e2e)")
    with suite("", image=IMAGES["ext4"]) as s:
        out, _ = run_ok(s, "echo ok", "default-q")
        assert out == "ok\n"
        ws = workspace(s, "default-q")
        projid = fsxattr(ws)[1]
        assert PROJID_BASE <= projid < PROJID_BASE + PROJID_COUNT, projid
        assert project_limits(ws, projid) == (10 << 30, 1000000)
        assert "Workspace quotas enforced" in s.log("containerd-shim")


def test_existing_workspace_is_labelled_when_the_quota_is_turned_on():
    """A workspace made without a quota gets the project id recursively at the
    next creation: its existing bytes count against the new quota."""
    why = kernel_lacks_project_quota("ext4")
    if why:
        raise rwtest.Skip(f"existing workspace relabel: {why} (tests/run-all reruns it in a "
                          "VM: tests/vm/run-e2e)")
    # quotas off at first (they are on by default); the log's reserve fits the image
    s = rwtest.Suite("[containerd-shim]\nworkspace_quota = 0\nworkspace_inodes = 0\n"
                     "[coordinatord]\nmap_size = 8M\n")
    ws = workspace(s, "relabel")
    try:
        with fs_image(os.path.join(s.dir, "state"), **IMAGES["ext4"]):
            s.start()
            assert rwtest.poll(lambda: s.http("GET", "/readyz")[0] == 200), "not ready"
            run_ok(s, "mkdir -p /workspace/d/e && head -c 3000000 /dev/zero > "
                   "/workspace/d/e/old && echo ok", "relabel")
            problems = s.stop()
            assert not problems, problems
            assert fsxattr(ws)[1] == 0
            s.extra_conf = QUOTA_CONF + "\n[coordinatord]\nmap_size = 8M\n"
            s.procs = {}
            for d in rwtest.DAEMONS:  # wait_ready looks for a fresh "ready"
                os.rename(s.log_path(d), s.log_path(d) + ".1")
            s.start()
            assert rwtest.poll(lambda: s.http("GET", "/readyz")[0] == 200), "not ready"
            events, status = run(s, "head -c 2000000 /dev/zero > /workspace/new; echo rc=$?",
                                 "relabel")
            assert status["status"] == "completed", status
            assert stdout_text(events) == "rc=1\n", events
            assert "Disk quota exceeded" in stdout_text(events, "process.stderr"), events
            projid = fsxattr(ws)[1]
            assert PROJID_BASE <= projid < PROJID_BASE + PROJID_COUNT, projid
            for p in ("d", "d/e", "d/e/old", "new"):
                assert fsxattr(os.path.join(ws, p))[1] == projid, p
            new = os.stat(os.path.join(ws, "new")).st_size
            assert new <= WS_QUOTA - 3000000, new
            problems = s.stop()
            assert not problems, problems
    finally:
        s.cleanup()
