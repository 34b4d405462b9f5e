"""fastpath.kernel.vm and ``python -m fastpath.kernel vm``: a command in a VM
whose Linux has seg6 lwtunnels, seg6 HMAC and VRF.

The choice of kernel and the refusals are checked in process; two tests boot
the real VM (software emulation, ~20 s each) where this machine can."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from fastpath.kernel import vm
from fastpath.kernel.__main__ import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOOD = {name: ok[0] for name, ok in vm.REQUIRED_CONFIG.items()}


def _boot_dir(tmp_path, kernels):
    d = tmp_path / "boot"
    d.mkdir()
    for release, options in kernels.items():
        (d / f"vmlinuz-{release}").write_bytes(b"\0")
        if options is not None:
            (d / f"config-{release}").write_text(
                "# generated\n" + "".join(f"{k}={v}\n" for k, v in options.items())
                + "# CONFIG_FOO is not set\n")
    return str(d)


def test_find_kernel_takes_the_newest_that_has_seg6_and_vrf(tmp_path):
    no_vrf = dict(GOOD, CONFIG_NET_VRF="n")
    boot = _boot_dir(tmp_path, {"6.1.0-9-amd64": GOOD, "6.12.9+deb12-amd64": GOOD,
                                "6.12.10+deb12-amd64": GOOD, "6.18.1-amd64": no_vrf,
                                "6.19.0-amd64": None})
    k = vm.find_kernel(boot=boot)
    assert k.release == "6.12.10+deb12-amd64"          # 6.12.10 > 6.12.9, not as text
    assert k.image == os.path.join(boot, "vmlinuz-6.12.10+deb12-amd64")


@pytest.mark.parametrize("missing", sorted(vm.REQUIRED_CONFIG))
def test_find_kernel_refuses_an_image_without_an_option(tmp_path, missing):
    opts = dict(GOOD)
    del opts[missing]
    boot = _boot_dir(tmp_path, {"6.12.1-amd64": opts})
    with pytest.raises(vm.VMError, match="apt-get install linux-image-6.12-amd64"):
        vm.find_kernel(boot=boot)
    with pytest.raises(vm.VMError, match=missing):
        vm.find_kernel(os.path.join(boot, "vmlinuz-6.12.1-amd64"))


def test_vrf_as_a_module_is_enough(tmp_path):
    boot = _boot_dir(tmp_path, {"6.12.1-amd64": dict(GOOD, CONFIG_NET_VRF="m")})
    assert vm.find_kernel(boot=boot).release == "6.12.1-amd64"


@pytest.mark.parametrize("absent,package", [
    ("vng", "pip install virtme-ng"),
    ("qemu-system-x86_64", "apt-get install qemu-system-x86"),
    ("busybox", "apt-get install busybox-static"),
    ("kernel", "apt-get install linux-image-6.12-amd64"),
])
def test_cli_names_the_package_that_is_missing(monkeypatch, capsys, tmp_path, absent, package):
    real_which = vm.shutil.which
    monkeypatch.setattr(vm.shutil, "which",
                        lambda name, *a, **k: (None if name == absent else
                                               real_which(name) or f"/usr/bin/{name}"))
    monkeypatch.setattr(vm.sys, "executable", str(tmp_path / "python"))
    if absent == "kernel":
        find, boot = vm.find_kernel, _boot_dir(tmp_path, {})
        monkeypatch.setattr(vm, "find_kernel", lambda image=None: find(image, boot=boot))
    assert main(["vm", "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and package in err[0], err


@pytest.mark.parametrize("argv,msg", [
    (["vm"], "no command"),
    (["vm", "--"], "no command"),
    (["vm", "--cpus", "0", "--", "true"], "--cpus"),
    (["vm", "--kernel", "/nonexistent/vmlinuz-1", "--", "true"], "no kernel image"),
])
def test_cli_refusals_one_line(capsys, argv, msg):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0], err


def test_guest_script_carries_the_environment_and_the_status(tmp_path):
    """The script the guest runs, run here with a stub modprobe: the host's
    environment (quoted as the shell must), its working directory, the
    command's own words and its exit status."""
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "modprobe").write_text("#!/bin/sh\necho \"$@\" >> " + str(tmp_path / "loaded") + "\n")
    (stub / "modprobe").chmod(0o755)
    status = tmp_path / "status"
    env = {"PATH": f"{stub}:/usr/bin:/bin", "ODD": "it's $HOME `x` \"q\"\nline2",
           "PWD": "/elsewhere", "TERM": "xterm", "BAD-NAME": "x"}
    cmd = ["sh", "-c", 'printf "%s|%s|%s|%s" "$ODD" "$(pwd)" "$1" "${TERM-unset}" > out; exit 7',
           "sh", "two words"]
    script = vm.guest_script(cmd, str(tmp_path), env, str(status))
    # the modules are loaded before the host's PATH is taken: the guest's finds modprobe
    p = subprocess.run(["sh", "-c", script], env={"PATH": f"{stub}:/usr/bin:/bin"}, cwd="/")
    assert p.returncode == 0
    assert status.read_text().strip() == "7"
    assert (tmp_path / "out").read_text() == f"{env['ODD']}|{tmp_path}|two words|unset"
    assert (tmp_path / "loaded").read_text().split() == [w for m in vm.MODULES for w in ("-q", m)]


def _vm_ready():
    try:
        vm.check()
    except vm.VMError as e:
        return str(e)
    return None


needs_vm = pytest.mark.skipif(os.geteuid() != 0 or _vm_ready() is not None,
                              reason=f"no VM here: {_vm_ready()}")


@needs_vm
def test_a_command_in_the_vm(tmp_path):
    """One boot: the guest's kernel has seg6local and VRF, the command runs
    in the host's working directory (shared read-write) with the host's
    environment, and its exit status is the command's."""
    script = ("set -e; uname -r > kernel; "
              "ip link set lo up; "
              "ip -6 route add fc00::1/128 encap seg6local action End dev lo; "
              "ip link add vrf-t type vrf table 10; "
              "test -e /proc/sys/net/vrf/strict_mode; test -c /dev/net/tun; "
              "echo \"$FASTPATH_VM_TEST\" > env; exit 7")
    p = subprocess.run([sys.executable, "-m", "fastpath.kernel", "vm", "--memory", "1G", "--",
                        "sh", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                       env=dict(os.environ, FASTPATH_VM_TEST="from the host"))
    assert p.returncode == 7, p.stderr
    assert (tmp_path / "kernel").read_text().strip() == vm.find_kernel().release
    assert (tmp_path / "env").read_text() == "from the host\n"


def _qemu_below(pid):
    """The QEMU processes below ``pid`` (not another test's or user's VM)."""
    out = set()
    for c in vm._descendants(pid):
        try:
            with open(f"/proc/{c}/cmdline", "rb") as f:
                if b"qemu-system" in f.read():
                    out.add(c)
        except OSError:
            pass
    return out


@needs_vm
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_vm_and_all_it_started(tmp_path, sig):
    p = subprocess.Popen([sys.executable, "-m", "fastpath.kernel", "vm", "--memory", "1G", "--",
                          "sh", "-c", "touch started; sleep 600"], cwd=tmp_path,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # the guest writes into the shared directory once the command runs
        while not (tmp_path / "started").exists():
            assert p.poll() is None, p.stderr.read()
            time.sleep(0.2)
        ours = _qemu_below(p.pid)
        assert ours, "no QEMU process while the command runs"
        p.send_signal(sig)
        assert p.wait() == 128 + sig
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # gone, or a zombie (dead, waiting to be reaped by whoever inherited it)
    assert not [q for q in ours if vm._alive(q)]
    assert not (tmp_path / "status").exists()
