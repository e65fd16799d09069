# SPDX-License-Identifier: MIT
"""What a sandbox sees of the host (docs/SECURITY.md, "What the sandbox sees of
the host"): a curated /etc (generated passwd/group/hosts naming the sandbox
user, plus only the etc_entries carried over), /proc/cmdline and the other
runc/bwrap masks unreadable, /proc/self/cgroup rooted at the sandbox's own
cgroup in every hierarchy, no host path among the mount points and sources of
/proc/self/mountinfo — and sh, python3, git and id still work."""
import os
import re
import secrets

from t_sandbox import HOST_UID, run_ok

SUITE_CONF = """[containerd-shim]
sandbox_user = agent
"""


def test_etc_is_curated_and_host_files_invisible(s):
    canary = f"/etc/rw-canary-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with open(canary, "w") as f:
            f.write("host secret\n")
        out = run_ok(s, "ls -A /etc; echo ---; cat /etc/passwd; echo ---; id; echo ---; "
                     f"for f in npmrc gitconfig machine-id pip.conf shadow {os.path.basename(canary)};"
                     " do test -e /etc/$f && echo has-$f; done; echo ---; cat /etc/hosts",
                     thread="t-view-etc")
    finally:
        os.unlink(canary)
    etc, passwd, ident, has, hosts = out.split("---\n")
    names = etc.split()
    assert os.path.basename(canary) not in names, names
    for leak in ("npmrc", "gitconfig", "machine-id", "pip.conf", "shadow", "gshadow", "sudoers",
                 "ssh", "apt", "environment", "fstab", "hostname-", "passwd-"):
        assert leak not in names, (leak, names)
    for needed in ("passwd", "group", "hosts", "ssl", "ld.so.cache", "nsswitch.conf",
                   "alternatives"):
        if needed in ("passwd", "group", "hosts") or os.path.exists("/etc/" + needed):
            assert needed in names, (needed, names)
    assert has == "", has
    assert "agent:x:1000:1000:agent:/workspace:/bin/sh" in passwd.splitlines(), passwd
    assert str(HOST_UID) not in passwd, passwd  # no host identity in the stubs
    assert ident.strip() == "uid=1000(agent) gid=1000(agent) groups=1000(agent)", ident
    assert re.search(r"^127\.0\.0\.1\s+localhost", hosts, re.M), hosts


def test_etc_is_read_only(s):
    out = run_ok(s, "touch /etc/x 2>&1; echo rc=$?; (echo hi >> /etc/passwd) 2>&1; echo rc=$?",
                 thread="t-view-etc")
    assert out.count("Read-only file system") == 2 and "rc=0" not in out, out


def test_programs_still_run(s):
    cmd = ("sh -c 'echo sh-ok'; python3 -c 1 && echo py-ok; "
           "python3 -c 'import ssl, pwd, os; ssl.create_default_context(); "
           "print(pwd.getpwuid(os.getuid()).pw_name)'; "
           "git --version >/dev/null && echo git-ok; awk 'BEGIN{print \"awk-ok\"}'; "
           "date +%Y >/dev/null && echo date-ok")
    out = run_ok(s, cmd, thread="t-view-run")
    assert out.splitlines()[:3] == ["sh-ok", "py-ok", "agent"], out
    assert "git-ok" in out and "awk-ok" in out and "date-ok" in out, out
    if os.path.exists("/usr/bin/node"):
        out = run_ok(s, "node -e 'console.log(require(\"os\").userInfo().username)'",
                     thread="t-view-run")
        assert out == "agent\n", out


def test_proc_masks(s):
    out = run_ok(s, "for f in cmdline kcore keys timer_list sched_debug kallsyms; do"
                 " if [ -e /proc/$f ]; then cat /proc/$f >/dev/null 2>&1 && echo $f=read"
                 " || echo $f=denied; fi; done; ls -A /proc/acpi 2>/dev/null | wc -l;"
                 " echo x > /proc/sys/kernel/hostname 2>/dev/null || echo sys=ro", thread="t-view-proc")
    lines = out.splitlines()
    assert "cmdline=denied" in lines, out
    assert not [l for l in lines if l.endswith("=read")], out
    assert lines[-2] == "0", out  # /proc/acpi is an empty tmpfs (or absent)
    assert lines[-1] == "sys=ro", out


def _shim_cgroup_paths(s):
    with open(f"/proc/{s.procs['containerd-shim'].pid}/cgroup") as f:
        return {l.rstrip("\n").split(":", 2)[2] for l in f} - {"/"}


def test_no_host_paths_in_mountinfo_or_cgroup(s):
    out = run_ok(s, "cat /proc/self/mountinfo; echo ---; cat /proc/self/cgroup",
                 thread="t-view-paths")
    mountinfo, cgroup = out.split("---\n")
    state = os.path.realpath(s.dir)
    # cgroup: rooted at the sandbox (v1 hierarchies) / the exec's own leaf (cgroup2).
    for line in cgroup.splitlines():
        hid, ctrl, path = line.split(":", 2)
        assert "runwarden." not in path and "sb-" not in path, cgroup
        if hid == "0":
            assert re.fullmatch(r"/(e\d+)?", path), cgroup
        else:
            assert path == "/", cgroup
    for p in _shim_cgroup_paths(s):
        assert p not in cgroup, (p, cgroup)
    # mountinfo: no mount point, source or option names the host's state dir.
    # (The root field of the /workspace line is the workspace's path within its
    # filesystem — docs/SECURITY.md says why and how to keep it neutral.)
    for line in mountinfo.splitlines():
        pre, post = line.split(" - ", 1)
        f = pre.split()
        mount_point, opts = f[4], f[5]
        assert state not in mount_point and state not in opts, line
        assert state not in post, line
        if state in f[3]:
            assert mount_point == "/workspace", line
        assert s.dir not in mount_point + opts + post, line


def test_bad_etc_keys_are_config_errors(s):
    import subprocess
    import tempfile
    from rwtest import BUILD
    for text, expect in (("etc_entries = ssl ../shadow\n", "etc_entries: '../shadow'"),
                         ("etc_entries = passwd\n", "etc_entries: 'passwd'"),
                         ("etc_entries = ssl/certs\n", "etc_entries: 'ssl/certs'"),
                         ("sandbox_user = Root:x\n", "sandbox_user: 'Root:x'")):
        with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
            f.write("[containerd-shim]\n" + text)
        try:
            p = subprocess.run([os.path.join(BUILD, "containerd-shim"), "--check-config",
                                "--config", f.name], capture_output=True, text=True, timeout=30)
        finally:
            os.unlink(f.name)
        assert p.returncode != 0 and expect in p.stderr, (text, p.stderr)
