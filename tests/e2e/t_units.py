# SPDX-License-Identifier: MIT
"""systemd units: `systemd-analyze verify` accepts every unit of units/, with
the paths substituted as make does but pointing at the build tree, and every
ExecStartPre= check of the configuration passes on conf/runwarden.conf."""
import glob
import os
import re
import shlex
import shutil
import subprocess
import tempfile

from rwtest import BUILD

NO_SUITE = True
TOP = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
UNITS = os.path.join(TOP, "units")
BUILD = os.path.realpath(BUILD)


def substituted(d):
    """Write every unit into d with the build tree's paths; return their names."""
    subs = {"@pkglibexecdir@": BUILD, "@pkgdatadir@": UNITS,
            "@runwardenconfdir@": os.path.join(TOP, "conf"), "@bindir@": BUILD}
    names = []
    for src in sorted(glob.glob(os.path.join(UNITS, "*"))):
        name = os.path.basename(src)
        if name.endswith(".in"):
            name = name[:-3]
        if not re.search(r"\.(service|socket|target)$", name):
            continue
        text = open(src).read()
        for k, v in subs.items():
            text = text.replace(k, v)
        assert not re.search(r"@[A-Za-z_]+@", text), f"{name}: unsubstituted @…@"
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
        names.append(name)
    return names


def test_systemd_analyze_verify():
    if not shutil.which("systemd-analyze"):
        raise AssertionError("systemd-analyze missing (Debian package systemd)")
    with tempfile.TemporaryDirectory() as d:
        names = substituted(d)
        assert {"runwarden.target", "runwarden-routerd.service", "runwarden-routerd.socket",
                "runwarden-coordinatord.service",
                "runwarden-containerd-shim.service"} <= set(names), names
        p = subprocess.run(["systemd-analyze", "verify", "--man=no", *names], cwd=d,
                           capture_output=True, text=True, timeout=60)
        out = (p.stdout + p.stderr).strip()
        assert p.returncode == 0 and not out, out


def test_every_service_is_notify_with_watchdog_and_hardening():
    with tempfile.TemporaryDirectory() as d:
        for name in substituted(d):
            if not name.endswith(".service"):
                continue
            text = open(os.path.join(d, name)).read()
            for line in ("Type=notify", "Restart=on-failure", "ProtectSystem=strict",
                         "PrivateTmp=yes", "NoNewPrivileges=yes", "RuntimeDirectoryPreserve=yes"):
                assert line in text, f"{name}: no {line}"
            assert re.search(r"^WatchdogSec=\d", text, re.M), f"{name}: no WatchdogSec="
            assert re.search(r"^ExecStartPre=.*--check-config$", text, re.M), name
            if "containerd-shim" in name:
                assert "Delegate=yes" in text and "CapabilityBoundingSet=CAP_" in text
                assert not re.search(r"^User=", text, re.M)
                # seccomp-based settings would be inherited by every sandbox
                for bad in ("SystemCallFilter", "RestrictAddressFamilies", "ProtectHostname",
                            "MemoryDenyWriteExecute", "RestrictNamespaces"):
                    assert not re.search(rf"^{bad}=", text, re.M), f"{name}: {bad}="
            else:
                assert "SystemCallFilter=@system-service" in text and "User=runwarden" in text
                assert re.search(r"^RestrictAddressFamilies=", text, re.M), name


def test_exec_start_pre_checks_pass():
    """The units' --check-config commands accept the shipped configuration."""
    with tempfile.TemporaryDirectory() as d:
        for name in substituted(d):
            for line in open(os.path.join(d, name)):
                if not line.startswith("ExecStartPre="):
                    continue
                argv = shlex.split(line.split("=", 1)[1])
                if "--config" not in argv:  # the default file would be /etc's
                    argv[1:1] = ["--config", os.path.join(TOP, "conf", "runwarden.conf")]
                p = subprocess.run(argv, capture_output=True, text=True, timeout=10)
                assert p.returncode == 0, f"{name}: {argv}: {p.stderr}"


def test_sysusers_and_tmpfiles_parse():
    for kind, f in (("sysusers", "runwarden.sysusers"), ("tmpfiles", "runwarden.tmpfiles")):
        path = os.path.join(UNITS, f)
        tool = shutil.which(f"systemd-{kind}")
        if not tool:
            continue
        with tempfile.TemporaryDirectory() as root:
            args = [tool, f"--root={root}", path]
            os.makedirs(os.path.join(root, "etc"))
            if kind == "tmpfiles":
                # owners resolve against the root's passwd: give it the user
                with open(os.path.join(root, "etc", "passwd"), "w") as pw:
                    pw.write("root:x:0:0::/root:/bin/sh\nrunwarden:x:990:990::/:/bin/false\n")
                with open(os.path.join(root, "etc", "group"), "w") as g:
                    g.write("root:x:0:\nrunwarden:x:990:\n")
                args.insert(1, "--create")
            p = subprocess.run(args, capture_output=True, text=True, timeout=30)
            assert p.returncode == 0, f"{f}: {p.stderr}"
            if kind == "sysusers":
                assert "runwarden:" in open(os.path.join(root, "etc", "passwd")).read()
            else:
                st = os.stat(os.path.join(root, "run", "runwarden"))
                assert st.st_uid == 990 and oct(st.st_mode & 0o7777) == "0o755"
